#include "moeserve/model/layers/weight_loading.h"

#include "moeserve/core/error.h"
#include "moeserve/io/weight_source.h"

namespace moeserve::model {

TensorView get_checked(const io::WeightSource& weights, const std::string& name, const Shape& shape) {
    TensorView t = weights.get(name);
    if (!(t.shape == shape) && weights.is_gguf()) {
        raise(ErrorCode::kInvalidModel, "tensor {} has shape {}, but the model's metadata implies {}",
              weights.describe(name), t.shape.str(), shape.str());
    }
    if (!(t.shape == shape)) {
        raise(ErrorCode::kInvalidModel, "tensor '{}' has shape {}, but config.json implies {}", name, t.shape.str(),
              shape.str());
    }
    return t;
}

Tensor load_vector_f32(const io::WeightSource& weights, const std::string& name, int64_t n) {
    get_checked(weights, name, Shape{n});
    return weights.load_f32(name);
}

Tensor load_optional_vector_f32(const io::WeightSource& weights, const std::string& name, int64_t n) {
    return weights.contains(name) ? load_vector_f32(weights, name, n) : Tensor();
}

TensorView widen_to_f32_if(const TensorView& view, bool f32, Tensor& owned) {
    if (!f32 || view.dtype != DType::kBF16) return view;
    owned = Tensor(DType::kF32, view.shape);
    io::convert_to_f32(view, owned.as<float>());
    return owned.view();
}

void add_row_bias(const Tensor& bias, float* x, int64_t rows, int64_t n) {
    if (bias.empty()) return;
    const float* b = bias.as<float>();
    for (int64_t r = 0; r < rows; ++r) {
        for (int64_t j = 0; j < n; ++j) x[r * n + j] += b[j];
    }
}

}  // namespace moeserve::model
