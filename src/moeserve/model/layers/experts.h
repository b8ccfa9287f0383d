// SwiGLU experts with gate|up fused at load time (bf16; f32 under --dtype float32; or int8 with
// per-channel scales for W8A8; or int4 codes with group scales for W4A16; or FP8 blocks for an
// FP8 checkpoint, formats/fp8_blocks.h, run by the GGUF experts kernels):
// the routed experts of a MoE layer, and also a dense MLP or DeepSeek's shared experts, which are
// a single always-chosen expert. From a GGUF file the experts stay in their stored blocks (slices
// of the stacked ffn_*_exps tensors, kernels/cpu/gguf_linear.h), whatever their type.
#pragma once

#include <string>
#include <vector>

#include "moeserve/core/tensor.h"
#include "moeserve/core/thread_pool.h"
#include "moeserve/io/weight_source.h"
#include "moeserve/kernels/cpu/moe_experts.h"
#include "moeserve/kernels/cpu/moe_experts_int4.h"
#include "moeserve/kernels/cpu/moe_experts_int8.h"
#include "moeserve/model/formats/int4_weights.h"
#include "moeserve/model/quantization.h"

namespace moeserve::model {

class Experts {
public:
    Experts() = default;
    // prefixes[e] + "gate_proj.weight" / "up_proj.weight" [inter, hidden], "down_proj.weight"
    // [hidden, inter]; expert e gets global id expert_begin + e. With
    // quant.int8_module(prefixes[0] + "gate_proj") the experts are stored and run as W8A8 int8
    // (I8 checkpoint weights kept, others quantized per output row of the full matrix).
    // With inter_count > 0, only the intermediate rows [inter_begin, inter_begin + inter_count) of
    // gate/up and the same columns of down are kept (tensor parallelism; partial sums result).
    static Experts load(const io::WeightSource& weights, const std::vector<std::string>& prefixes, int64_t hidden,
                        int64_t inter, int64_t expert_begin = 0, int64_t inter_begin = 0, int64_t inter_count = 0,
                        const Quantization& quant = {});

    // out f32 [num_tokens, hidden] = sum_j w[t, j] * Expert_{ids[t, j]}(x[t]).
    void forward(ThreadPool& pool, const float* x, int64_t num_tokens, const int32_t* topk_ids,
                 const float* topk_weights, int k, kernels::cpu::MoeScratch& scratch, float* out) const;
    // A single expert applied to every token with weight 1 (dense MLP, shared experts).
    void forward_dense(ThreadPool& pool, const float* x, int64_t num_tokens, kernels::cpu::MoeScratch& scratch,
                       std::vector<int32_t>& ids_scratch, std::vector<float>& weights_scratch, float* out) const;

    int64_t num_experts() const { return num_experts_; }
    bool is_int8() const { return int8_; }
    int64_t inter() const { return inter_; }
    int64_t hidden() const { return hidden_; }
    size_t weight_bytes() const {
        return gate_up_.nbytes() + down_.nbytes() + gate_up_scale_.nbytes() + down_scale_.nbytes() + gguf_bytes_ +
               gate_up4_.nbytes() + down4_.nbytes() + gate_up4_perm_.nbytes() + down4_perm_.nbytes();
    }
    bool is_int4() const { return !gate_up4_.codes.empty(); }
    bool is_gguf() const { return !gguf_.gate.empty(); }
    size_t bytes_per_expert() const { return num_experts() ? weight_bytes() / static_cast<size_t>(num_experts()) : 0; }

private:
    kernels::cpu::MoeExpertsBf16 desc() const;
    kernels::cpu::MoeExpertsInt8 desc_int8() const;
    kernels::cpu::MoeExpertsF32 desc_f32() const;
    Tensor gate_up_;        // bf16 | f32 | int8 [num_experts, 2 * inter, hidden]: gate rows, then up rows
    Tensor down_;           // bf16 | f32 | int8 [num_experts, hidden, inter]
    Tensor gate_up_scale_;  // int8 only: f32 [num_experts, 2 * inter]
    Tensor down_scale_;     // int8 only: f32 [num_experts, hidden]
    bool int8_ = false;
    // W4A16: gate_up4_ [num_experts * 2 * inter, hidden] (expert e: gate rows, then up rows),
    // down4_ [num_experts * hidden, inter]
    Int4Matrix gate_up4_, down4_;
    Tensor gate_up4_perm_, down4_perm_;  // GPTQ act order: I32 [num_experts, hidden] / [num_experts, inter], or empty
    static Experts load_int4(const io::WeightSource& weights, const std::vector<std::string>& prefixes, int64_t hidden,
                             int64_t full_inter, int64_t inter_begin, int64_t inter_count, const Quantization& quant,
                             Experts e);
    // GGUF: every expert's three matrices in the file's mapping; FP8 (W8A16): in fp8_store_
    kernels::cpu::GgufExperts gguf_;
    size_t gguf_bytes_ = 0;
    Tensor fp8_store_;  // U8: each expert's gate, up and down rows as kF8E4M3x128 blocks
    // Experts of that geometry with no matrices yet, for the two blocked forms (GGUF, FP8).
    static Experts blocked(int64_t hidden, int64_t inter, int64_t expert_begin, int64_t num_experts);
    static Experts load_fp8(const io::WeightSource& weights, const std::vector<std::string>& prefixes, int64_t hidden,
                            int64_t full_inter, int64_t expert_begin, int64_t inter_begin, int64_t inter_count,
                            const Quantization& quant);
    static Experts load_gguf(const io::WeightSource& weights, const std::vector<std::string>& prefixes, int64_t hidden,
                             int64_t full_inter, int64_t expert_begin, int64_t inter_begin, int64_t inter_count);
    int64_t num_experts_ = 0, hidden_ = 0, inter_ = 0, expert_begin_ = 0;
};

}  // namespace moeserve::model
