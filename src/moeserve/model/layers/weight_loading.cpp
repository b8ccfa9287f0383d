#include "moeserve/model/layers/weight_loading.h"

#include "moeserve/core/error.h"

namespace moeserve::model {

TensorView get_checked(const io::WeightSource& weights, const std::string& name, const Shape& shape) {
    TensorView t = weights.get(name);
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

}  // namespace moeserve::model
