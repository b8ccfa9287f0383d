// Mixtral's checkpoint names for what the shared MoE block calls otherwise: the router
// (block_sparse_moe.gate) and the experts' w1 / w3 / w2 (gate / up / down). The loader and the
// weight specs (so the generator) read them from the block's MoeNames.
#pragma once

#include "moeserve/model/layers/experts.h"

namespace moeserve::model::mixtral {

inline constexpr const char* kRouter = "block_sparse_moe.gate";
inline constexpr const char* kExperts = "block_sparse_moe.experts.";
inline const ExpertProjections kProjections{.gate = "w1", .up = "w3", .down = "w2"};

}  // namespace moeserve::model::mixtral
