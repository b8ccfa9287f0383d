#include "moeserve/model/formats/gguf_kv_b.h"

#include "moeserve/core/error.h"

namespace moeserve::model {

Tensor split_kv_b(const Tensor& kv_b, int64_t heads, int64_t qk_nope, KvbPart part) {
    const int64_t rank = kv_b.dim(1);
    const int64_t per_head = kv_b.dim(0) / heads;
    const int64_t v = per_head - qk_nope;
    MOESERVE_CHECK(kv_b.shape().rank() == 2 && per_head * heads == kv_b.dim(0) && v > 0,
                   "split_kv_b: kv_b_proj {} is not {} heads of {} key rows and some value rows", kv_b.shape().str(),
                   heads, qk_nope);
    const float* src = kv_b.as<const float>();
    if (part == KvbPart::kKeys) {
        Tensor k_b(DType::kF32, Shape{heads, rank, qk_nope});
        float* dst = k_b.as<float>();
        for (int64_t h = 0; h < heads; ++h)
            for (int64_t d = 0; d < qk_nope; ++d)
                for (int64_t r = 0; r < rank; ++r)
                    dst[(h * rank + r) * qk_nope + d] = src[(h * per_head + d) * rank + r];
        return k_b;
    }
    Tensor v_b(DType::kF32, Shape{heads, v, rank});
    float* dst = v_b.as<float>();
    for (int64_t h = 0; h < heads; ++h)
        for (int64_t j = 0; j < v; ++j)
            for (int64_t r = 0; r < rank; ++r)
                dst[(h * v + j) * rank + r] = src[(h * per_head + qk_nope + j) * rank + r];
    return v_b;
}

Tensor join_kv_b(const Tensor& k_b, const Tensor& v_b, const std::string& label) {
    const Shape& ks = k_b.shape();
    const Shape& vs = v_b.shape();
    if (ks.rank() != 3 || vs.rank() != 3 || ks[0] != vs[0] || ks[1] != vs[2]) {
        raise(ErrorCode::kInvalidModel,
              "{}: attn_k_b {} and attn_v_b {} are not [heads, kv_lora, qk_nope] and [heads, v, kv_lora] of one "
              "kv_lora_rank and head count",
              label, ks.str(), vs.str());
    }
    const int64_t heads = ks[0], rank = ks[1], qk_nope = ks[2], v = vs[1];
    const int64_t per_head = qk_nope + v;
    Tensor kv_b(DType::kF32, Shape{heads * per_head, rank});
    float* dst = kv_b.as<float>();
    const float* k = k_b.as<const float>();
    const float* vv = v_b.as<const float>();
    for (int64_t h = 0; h < heads; ++h) {
        for (int64_t d = 0; d < qk_nope; ++d)
            for (int64_t r = 0; r < rank; ++r) dst[(h * per_head + d) * rank + r] = k[(h * rank + r) * qk_nope + d];
        for (int64_t j = 0; j < v; ++j)
            for (int64_t r = 0; r < rank; ++r)
                dst[(h * per_head + qk_nope + j) * rank + r] = vv[(h * v + j) * rank + r];
    }
    return kv_b;
}

}  // namespace moeserve::model
