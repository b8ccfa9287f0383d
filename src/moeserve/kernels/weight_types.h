// The weights the linear and expert kernels read, as every backend receives them: views (no
// ownership) of GGUF blocks, int4 codes with their scales, static-int8 matrices and the stacked
// experts of one rank in each precision. The model builds them from its loaded tensors. Depends
// on core only.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "moeserve/core/ggml_type.h"

namespace moeserve::kernels {

// The gated unit between an expert's gate|up and down projections. Default: SwiGLU,
// silu(g) * u. gpt-oss (clamp_limit > 0): per-expert biases added to g and u, g clamped above at
// the limit, u into [-limit, limit], then (u + 1) * g * sigmoid(alpha * g), as Hugging Face's
// GptOssExperts. The down projection's bias is the model's to add (layers/experts.h): it is
// outside the kernel's product.
struct ExpertGlu {
    // f32 [num_experts, 2 * inter] of the rank's experts (gate's inter, then up's), or null
    const float* gate_up_bias = nullptr;
    float clamp_limit = 0.0f;  // > 0: the gpt-oss unit
    float alpha = 1.0f;

    bool is_swiglu() const { return gate_up_bias == nullptr && clamp_limit <= 0.0f; }
    // One element of local expert e's row r (of inter): g and u as the projections gave them.
    // SwiGLU's element here is the scalar kernels' silu(g) * u, bit for bit.
    float apply(int64_t e, int64_t inter, int64_t r, float g, float u) const {
        if (gate_up_bias != nullptr) {
            g += gate_up_bias[e * 2 * inter + r];
            u += gate_up_bias[e * 2 * inter + inter + r];
        }
        if (clamp_limit <= 0.0f) return g / (1.0f + std::exp(-g)) * u;
        g = std::min(g, clamp_limit);
        u = std::clamp(u, -clamp_limit, clamp_limit);
        return (u + 1.0f) * (g / (1.0f + std::exp(-alpha * g)));
    }
};

// A [rows, cols] matrix of GGUF blocks: row r starts at data + r * row_stride (a column slice of a
// wider matrix has a stride larger than its own row bytes). cols is a multiple of the block size.
// packed_rows 8: repacked in groups of 8 interleaved rows (cpu/gguf_packed.h), group g at
// data + g * row_stride; row() is then meaningless, and rows are read by the packed kernels or
// gguf_unpack_row.
struct GgufMatrix {
    GgmlType type = GgmlType::kF32;
    const uint8_t* data = nullptr;
    int64_t rows = 0, cols = 0;
    size_t row_stride = 0;
    int packed_rows = 1;
    const uint8_t* row(int64_t r) const { return data + static_cast<size_t>(r) * row_stride; }
    // The rows from r on as the kernels take them: row r, or (packed) the group that starts at r.
    const uint8_t* rows_from(int64_t r) const { return data + static_cast<size_t>(r / packed_rows) * row_stride; }
};

// SwiGLU experts: expert e (global id expert_begin + e) is down_e(silu(gate_e x) * up_e x), or
// the glu's unit; gate/up [inter, hidden], down [hidden, inter].
struct GgufExperts {
    std::vector<GgufMatrix> gate, up, down;
    int64_t expert_begin = 0, hidden = 0, inter = 0;
    ExpertGlu glu{};
    int64_t num_experts() const { return static_cast<int64_t>(gate.size()); }
};

// Groups per row: ceil(k / group_size) (the last group may be partial).
inline int64_t int4_groups(int64_t k, int64_t group_size) { return (k + group_size - 1) / group_size; }

// n rows of an int4 matrix [n, k]. Row j: codes at codes + j * k / 2 (column 2i in the low nibble
// of byte i, 2i + 1 in the high one: the byte order of compressed-tensors' int32 packing),
// scale/zero at j * groups. k and group_size even.
struct Int4Weights {
    const uint8_t* codes = nullptr;  // [n, k / 2]
    const float* scale = nullptr;    // [n, groups]
    const float* zero = nullptr;     // [n, groups]: integers in [0, 16] (8 for symmetric 4-bit)
    int64_t n = 0, k = 0, group_size = 0;
    // W4A8: the activations are quantized per token to int8 and the products taken in integers
    // (cpu/linear_w4a8.h); false: W4A16, f32 activations.
    bool int8_activations = false;

    int64_t groups() const { return int4_groups(k, group_size); }
    // Rows [j0, j0 + count) as their own Int4Weights.
    Int4Weights rows(int64_t j0, int64_t count) const {
        return {codes + j0 * (k / 2), scale + j0 * groups(), zero + j0 * groups(), count, k,
                group_size,           int8_activations};
    }
};

// One static linear: w int8 [n, k] row-major, bias int32 [n] (nullptr: none), deq_scale f32 [n].
struct StaticInt8Weights {
    const int8_t* w = nullptr;
    const int32_t* bias = nullptr;
    const float* deq_scale = nullptr;
    int64_t n = 0, k = 0;
    float x_mul = 1.0f;   // the multiplier applied to x (ModelSlim: bf16(1 / bf16(input_scale)))
    float x_zero = 0.0f;  // the zero point added after it (ModelSlim: input_offset, an integer)
    // f32 [k] or nullptr. Set: x is divided by x_div[p] instead of multiplied by x_mul (golden-stick
    // input_scale, which holds s_x / smooth[p] with the smoothing folded in).
    const float* x_div = nullptr;
};

// bf16 weights of the experts this rank holds: global ids [expert_begin, expert_begin + num_experts).
struct MoeExpertsBf16 {
    const uint16_t* gate_up;  // bf16 [num_experts, 2 * inter, hidden]: rows [0, inter) gate, [inter, 2*inter) up
    const uint16_t* down;     // bf16 [num_experts, hidden, inter]
    int64_t num_experts;
    int64_t expert_begin;  // ids outside [expert_begin, expert_begin + num_experts) are skipped (EP)
    int64_t hidden;
    int64_t inter;  // moe_intermediate_size
    ExpertGlu glu{};
    // Set: the weights are repacked into bf16 panels (cpu/bf16_panels.h, the backend's pack_bf16
    // op), each expert one block after the other: gate_up its gate [inter, hidden] repacked, then
    // its up; down its [hidden, inter] repacked.
    bool panels = false;
};

// The same with f32 weights (--dtype float32: the checkpoint's bf16 widened at load).
struct MoeExpertsF32 {
    const float* gate_up;  // f32 [num_experts, 2 * inter, hidden]
    const float* down;     // f32 [num_experts, hidden, inter]
    int64_t num_experts;
    int64_t expert_begin;
    int64_t hidden;
    int64_t inter;
    ExpertGlu glu{};
};

// int8 weights of the experts this rank holds: global ids [expert_begin, expert_begin + num_experts).
struct MoeExpertsInt8 {
    const int8_t* gate_up;       // int8 [num_experts, 2 * inter, hidden]: gate rows, then up rows
    const float* gate_up_scale;  // f32 [num_experts, 2 * inter]
    const int8_t* down;          // int8 [num_experts, hidden, inter]
    const float* down_scale;     // f32 [num_experts, hidden]
    int64_t num_experts;
    int64_t expert_begin;
    int64_t hidden;
    int64_t inter;
};

// int4 weights of the experts this rank holds: global ids [expert_begin, expert_begin + num_experts).
struct MoeExpertsInt4 {
    Int4Weights gate_up;  // [num_experts * 2 * inter, hidden]: expert e's inter gate rows, then its inter up rows
    Int4Weights down;     // [num_experts * hidden, inter]
    int64_t num_experts = 0;
    int64_t expert_begin = 0;
    int64_t hidden = 0;
    int64_t inter = 0;
    // GPTQ act order (desc_act), or null: expert e's gate/up columns i multiply x[gate_up_perm[e * hidden + i]],
    // its down columns i act[down_perm[e * inter + i]]. The activations are gathered once per (token, expert).
    const int32_t* gate_up_perm = nullptr;
    const int32_t* down_perm = nullptr;
};

}  // namespace moeserve::kernels
