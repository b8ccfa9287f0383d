// The tensors an architecture expects in a checkpoint: HF name, dtype, shape, and how the
// random-weight generator initializes it. The loader checks a checkpoint against the same list.
#pragma once

#include <string>
#include <vector>

#include "moeserve/core/dtype.h"
#include "moeserve/core/tensor.h"

namespace moeserve::model {

enum class WeightInit {
    kNormal,    // N(0, scale^2)
    kNormOnes,  // 1 + N(0, scale^2): RMSNorm gains near one, but not exactly (so a missed norm shows)
};

struct WeightSpec {
    std::string name;  // Hugging Face tensor name, e.g. "model.layers.0.mlp.gate.weight"
    Shape shape;       // outermost first, as in the checkpoint
    DType dtype = DType::kBF16;
    WeightInit init = WeightInit::kNormal;
    float scale = 0.02f;
};

}  // namespace moeserve::model
