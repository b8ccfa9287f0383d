// SwiGLU experts with gate|up fused at load: the routed experts of a MoE layer, and also a dense
// MLP or DeepSeek's shared experts, which are a single always-chosen expert. The weights are
// held in one representation (ExpertWeights), chosen at load like a Linear's: bf16 (f32 under
// --dtype float32), W8A8 int8 with per-channel scales, W4A16 / W4A8 int4 codes with group scales, or
// blocks the GGUF experts kernels run: a GGUF file's stacked ffn_*_exps slices as stored
// (the gguf_moe_experts op), or an FP8 checkpoint's blocks (formats/fp8_blocks.h).
#pragma once

#include <string>
#include <variant>
#include <vector>

#include "moeserve/core/tensor.h"
#include "moeserve/core/thread_pool.h"
#include "moeserve/io/weight_source.h"
#include "moeserve/kernels/buffer.h"
#include "moeserve/kernels/weight_types.h"
#include "moeserve/model/formats/int4_weights.h"
#include "moeserve/model/quantization.h"

namespace moeserve::model {

// The module names of an expert's three projections under its prefix (Hugging Face's
// gate_proj / up_proj / down_proj; Mixtral's w1 / w3 / w2).
struct ExpertProjections {
    std::string gate = "gate_proj", up = "up_proj", down = "down_proj";
};

// bf16 | f32: gate_up [n, 2 * inter, hidden] (expert e's gate rows, then its up rows), down
// [n, hidden, inter]. bf16 weights the backend has a layout for are repacked once loaded
// (panels set: MoeExpertsBf16::panels has the layout; the tensors' shapes then only say their
// sizes).
struct FloatExpertWeights {
    Tensor gate_up, down;
    bool panels = false;
};
// W8A8: the float layout in int8, with f32 scales per output row: [n, 2 * inter] and [n, hidden].
struct Int8ExpertWeights {
    Tensor gate_up, down, gate_up_scale, down_scale;
};
// W4A16 / W4A8: gate_up [n * 2 * inter, hidden], down [n * hidden, inter] (the float layout's rows).
struct Int4ExpertWeights {
    Int4Matrix gate_up, down;
    Tensor gate_up_perm, down_perm;  // GPTQ act order: I32 [n, hidden] / [n, inter], or empty
    bool int8_activations = false;   // W4A8
};
// Every expert's three matrices as blocks: in the GGUF file's mapping, or FP8 blocks in `owned`.
struct BlockExpertWeights {
    kernels::GgufExperts blocks;
    size_t bytes = 0;
    Tensor owned;
};
using ExpertWeights = std::variant<FloatExpertWeights, Int8ExpertWeights, Int4ExpertWeights, BlockExpertWeights>;

// gpt-oss's experts around their products: the gated unit's biases and clamp (kernels::ExpertGlu)
// and the down projection's bias, added per chosen expert times its routing weight.
struct ExpertBiases {
    Tensor gate_up;  // f32 [n, 2 * inter]: gate's, then up's (this rank's inter slice)
    Tensor down;     // f32 [n, hidden], or empty (the TP ranks but the first: added once)
    float clamp_limit = 0.0f, alpha = 1.0f;
};

class Experts {
public:
    Experts() = default;
    // prefixes[e] + names.gate / names.up + ".weight" [inter, hidden], names.down + ".weight"
    // [hidden, inter]; expert e gets global id expert_begin + e. The representation follows
    // quant for prefixes[0] + names.gate (int4_module, int8_module, fp8_module) and the file (GGUF).
    // With inter_count > 0, only the intermediate rows [inter_begin, inter_begin + inter_count) of
    // gate/up and the same columns of down are kept (tensor parallelism; partial sums result).
    static Experts load(const io::WeightSource& weights, const std::vector<std::string>& prefixes, int64_t hidden,
                        int64_t inter, int64_t expert_begin = 0, int64_t inter_begin = 0, int64_t inter_count = 0,
                        const Quantization& quant = {}, const ExpertProjections& names = {});
    // Experts an architecture's own loader built (stacked checkpoint tensors: gpt-oss), in the
    // float or block representation, with their biases. n experts of [inter, hidden] each.
    static Experts from_weights(ExpertWeights weights, int64_t n, int64_t hidden, int64_t inter, int64_t expert_begin,
                                ExpertBiases biases);
    // Adds biases to experts loaded in the float or block representation (gpt-oss's GGUF files).
    void set_biases(ExpertBiases biases);

    // out f32 [num_tokens, hidden] = sum_j w[t, j] * Expert_{ids[t, j]}(x[t]).
    void forward(ThreadPool& pool, const float* x, int64_t num_tokens, const int32_t* topk_ids,
                 const float* topk_weights, int k, float* out) const;
    // A single expert applied to every token with weight 1 (dense MLP, shared experts).
    void forward_dense(ThreadPool& pool, const float* x, int64_t num_tokens, std::vector<int32_t>& ids_scratch,
                       kernels::Buffer& weights_scratch, float* out) const;

    int64_t num_experts() const { return num_experts_; }
    int64_t inter() const { return inter_; }
    int64_t hidden() const { return hidden_; }
    size_t weight_bytes() const;
    size_t bytes_per_expert() const { return num_experts() ? weight_bytes() / static_cast<size_t>(num_experts()) : 0; }

private:
    // out[t] += w[t, j] * down_bias[e] for each chosen local expert e (gpt-oss).
    void add_down_bias(const int32_t* topk_ids, const float* topk_weights, int64_t num_tokens, int k, float* out) const;
    kernels::ExpertGlu glu() const;
    // bf16 float weights repacked where the backend has a layout for them (the pack_bf16 op).
    void pack_for_kernels();

    ExpertWeights weights_;
    ExpertBiases biases_;
    int64_t num_experts_ = 0, hidden_ = 0, inter_ = 0, expert_begin_ = 0;
};

}  // namespace moeserve::model
