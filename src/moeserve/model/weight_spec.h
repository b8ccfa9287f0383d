// The tensors an architecture expects in a checkpoint: HF name, dtype, shape, and how the
// random-weight generator initializes it. The loader checks a checkpoint against the same list.
#pragma once

#include <string>
#include <vector>

#include "moeserve/core/dtype.h"
#include "moeserve/core/tensor.h"
#include "moeserve/model/quantization.h"

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
    // Of a linear weight: whether the generator's quantized checkpoints store it in 8 bits
    // (kQuantizable, kDequantized) or not (kHigh, kOutputHead), as the loader treats the layer.
    LayerPrecision precision = LayerPrecision::kQuantizable;
};

}  // namespace moeserve::model
