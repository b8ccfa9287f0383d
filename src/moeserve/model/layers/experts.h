// SwiGLU experts with gate|up fused at load time (still bf16): the routed experts of a MoE layer,
// and also a dense MLP or DeepSeek's shared experts, which are a single always-chosen expert.
#pragma once

#include <string>
#include <vector>

#include "moeserve/core/tensor.h"
#include "moeserve/core/thread_pool.h"
#include "moeserve/io/weight_source.h"
#include "moeserve/kernels/cpu/moe_experts.h"

namespace moeserve::model {

class Experts {
public:
    Experts() = default;
    // prefixes[e] + "gate_proj.weight" / "up_proj.weight" [inter, hidden], "down_proj.weight"
    // [hidden, inter]; expert e gets global id expert_begin + e.
    // With inter_count > 0, only the intermediate rows [inter_begin, inter_begin + inter_count) of
    // gate/up and the same columns of down are kept (tensor parallelism; partial sums result).
    static Experts load(const io::WeightSource& weights, const std::vector<std::string>& prefixes, int64_t hidden,
                        int64_t inter, int64_t expert_begin = 0, int64_t inter_begin = 0, int64_t inter_count = 0);

    // out f32 [num_tokens, hidden] = sum_j w[t, j] * Expert_{ids[t, j]}(x[t]).
    void forward(ThreadPool& pool, const float* x, int64_t num_tokens, const int32_t* topk_ids,
                 const float* topk_weights, int k, kernels::cpu::MoeScratch& scratch, float* out) const;
    // A single expert applied to every token with weight 1 (dense MLP, shared experts).
    void forward_dense(ThreadPool& pool, const float* x, int64_t num_tokens, kernels::cpu::MoeScratch& scratch,
                       std::vector<int32_t>& ids_scratch, std::vector<float>& weights_scratch, float* out) const;

    int64_t num_experts() const { return gate_up_.numel() ? gate_up_.dim(0) : 0; }
    int64_t inter() const { return inter_; }
    int64_t hidden() const { return hidden_; }
    size_t weight_bytes() const { return gate_up_.nbytes() + down_.nbytes(); }
    size_t bytes_per_expert() const { return num_experts() ? weight_bytes() / static_cast<size_t>(num_experts()) : 0; }

private:
    kernels::cpu::MoeExpertsBf16 desc() const;
    Tensor gate_up_;  // bf16 [num_experts, 2 * inter, hidden]: gate rows, then up rows
    Tensor down_;     // bf16 [num_experts, hidden, inter]
    int64_t hidden_ = 0, inter_ = 0, expert_begin_ = 0;
};

}  // namespace moeserve::model
