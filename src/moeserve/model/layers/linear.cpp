#include "moeserve/model/layers/linear.h"

#include "moeserve/core/error.h"
#include "moeserve/kernels/cpu/linear.h"
#include "moeserve/model/layers/weight_loading.h"

namespace moeserve::model {

Linear Linear::load(const io::WeightSource& weights, const std::string& prefix, int64_t out_features,
                    int64_t in_features, bool has_bias) {
    Linear l;
    const std::string name = prefix + ".weight";
    l.weight_ = get_checked(weights, name, Shape{out_features, in_features});
    switch (l.weight_.dtype) {
        case DType::kBF16:
        case DType::kF32: break;
        case DType::kF16:
        case DType::kF8E4M3:
            l.owned_ = weights.load_f32(name);
            l.weight_ = l.owned_.view();
            break;
        default:
            raise(ErrorCode::kUnsupported, "tensor '{}' has dtype {}; linear weights must be BF16, F16 or F32", name,
                  dtype_name(l.weight_.dtype));
    }
    if (has_bias) l.bias_ = load_vector_f32(weights, prefix + ".bias", out_features);
    return l;
}

void Linear::forward(ThreadPool& pool, const float* x, int64_t rows, float* out) const {
    const int64_t n = out_features();
    const int64_t k = in_features();
    if (weight_.dtype == DType::kBF16) {
        kernels::cpu::linear_bf16(pool, x, rows, k, weight_.as<const uint16_t>(), n, out);
    } else {
        kernels::cpu::linear_f32(pool, x, rows, k, weight_.as<const float>(), n, out);
    }
    if (!bias_.empty()) {
        const float* b = bias_.as<float>();
        for (int64_t r = 0; r < rows; ++r) {
            for (int64_t j = 0; j < n; ++j) out[r * n + j] += b[j];
        }
    }
}

}  // namespace moeserve::model
