#include "moeserve/model/layers/experts.h"

#include <cstring>

#include "moeserve/core/error.h"
#include "moeserve/model/layers/weight_loading.h"

namespace moeserve::model {

namespace {
// Copies the [rows, cols] rectangle at (row0, col0) of a `shape` weight into dst as bf16 (bf16
// bytes copied, other float dtypes rounded).
void copy_as_bf16(const io::WeightSource& weights, const std::string& name, const Shape& shape, int64_t row0,
                  int64_t rows, int64_t col0, int64_t cols, uint16_t* dst) {
    TensorView src = get_checked(weights, name, shape);
    const int64_t width = shape[1];
    if (src.dtype == DType::kBF16) {
        for (int64_t r = 0; r < rows; ++r) {
            std::memcpy(dst + r * cols, src.as<const uint16_t>() + (row0 + r) * width + col0,
                        static_cast<size_t>(cols) * 2);
        }
        return;
    }
    Tensor f = weights.load_f32(name);
    for (int64_t r = 0; r < rows; ++r) {
        for (int64_t c = 0; c < cols; ++c) dst[r * cols + c] = f32_to_bf16(f.as<float>()[(row0 + r) * width + col0 + c]);
    }
}
}  // namespace

Experts Experts::load(const io::WeightSource& weights, const std::vector<std::string>& prefixes, int64_t hidden,
                      int64_t inter, int64_t expert_begin, int64_t inter_begin, int64_t inter_count) {
    Experts e;
    const auto n = static_cast<int64_t>(prefixes.size());
    const int64_t full_inter = inter;
    if (inter_count <= 0) inter_count = full_inter - inter_begin;
    MOESERVE_CHECK(inter_begin >= 0 && inter_begin + inter_count <= full_inter, "inter shard [{}, +{}) of {}",
                   inter_begin, inter_count, full_inter);
    inter = inter_count;
    e.hidden_ = hidden;
    e.inter_ = inter;
    e.expert_begin_ = expert_begin;
    e.gate_up_ = Tensor(DType::kBF16, {n, 2 * inter, hidden});
    e.down_ = Tensor(DType::kBF16, {n, hidden, inter});
    const int64_t proj = inter * hidden;
    for (int64_t i = 0; i < n; ++i) {
        const std::string& p = prefixes[static_cast<size_t>(i)];
        uint16_t* gate_up = e.gate_up_.as<uint16_t>() + i * 2 * proj;
        copy_as_bf16(weights, p + "gate_proj.weight", {full_inter, hidden}, inter_begin, inter, 0, hidden, gate_up);
        copy_as_bf16(weights, p + "up_proj.weight", {full_inter, hidden}, inter_begin, inter, 0, hidden,
                     gate_up + proj);
        copy_as_bf16(weights, p + "down_proj.weight", {hidden, full_inter}, 0, hidden, inter_begin, inter,
                     e.down_.as<uint16_t>() + i * proj);
    }
    return e;
}

kernels::cpu::MoeExpertsBf16 Experts::desc() const {
    return {gate_up_.as<const uint16_t>(), down_.as<const uint16_t>(), num_experts(), expert_begin_, hidden_, inter_};
}

void Experts::forward(ThreadPool& pool, const float* x, int64_t num_tokens, const int32_t* topk_ids,
                      const float* topk_weights, int k, kernels::cpu::MoeScratch& scratch, float* out) const {
    kernels::cpu::moe_experts_bf16(pool, x, num_tokens, topk_ids, topk_weights, k, desc(), scratch, out);
}

void Experts::forward_dense(ThreadPool& pool, const float* x, int64_t num_tokens, kernels::cpu::MoeScratch& scratch,
                            std::vector<int32_t>& ids_scratch, std::vector<float>& weights_scratch,
                            float* out) const {
    MOESERVE_CHECK(num_experts() == 1, "forward_dense needs exactly one expert, have {}", num_experts());
    ids_scratch.assign(static_cast<size_t>(num_tokens), static_cast<int32_t>(expert_begin_));
    weights_scratch.assign(static_cast<size_t>(num_tokens), 1.0f);
    forward(pool, x, num_tokens, ids_scratch.data(), weights_scratch.data(), 1, scratch, out);
}

}  // namespace moeserve::model
