// Options that shape how a model is built from its checkpoint (not from config.json).
#pragma once

#include <cstdint>

#include "moeserve/model/parallel_config.h"

namespace moeserve::model {

struct LoadOptions {
    int64_t max_model_len = 0;  // longest sequence served (RoPE tables); 0 = max_position_embeddings
    ParallelConfig parallel{};  // this rank's TP/EP shard; default: the whole model on one rank
};

}  // namespace moeserve::model
