#include "moeserve/model/layers/experts.h"

#include <algorithm>
#include <cstring>
#include <optional>
#include <vector>

#include "moeserve/core/error.h"
#include "moeserve/core/load_pool.h"
#include "moeserve/core/overloaded.h"
#include "moeserve/kernels/ops.h"
#include "moeserve/model/formats/fp8_blocks.h"
#include "moeserve/model/formats/gguf_weights.h"
#include "moeserve/model/formats/modelslim.h"
#include "moeserve/model/layers/weight_loading.h"

namespace moeserve::model {

namespace {

// The experts one rank loads: n experts; gate/up keep rows [inter_begin, +inter) of their
// [full_inter, hidden] weights, down the same columns of [hidden, full_inter] (TP partial sums);
// and the names of their projections.
struct ExpertsLayout {
    int64_t n = 0, hidden = 0, full_inter = 0, inter_begin = 0, inter = 0;
    ExpertProjections names;
};

enum ProjectionKind : int { kGate = 0, kUp = 1, kDown = 2 };

// One projection of one expert, as this rank holds it.
struct Projection {
    int64_t expert = 0;
    ProjectionKind kind = kGate;
    std::string module;                              // e.g. "model.layers.3.mlp.experts.7.gate_proj"
    Shape shape;                                     // the checkpoint's full weight
    int64_t row0 = 0, rows = 0, col0 = 0, cols = 0;  // the rectangle held
    int64_t stacked_row = 0;  // its first row in the stacked gate_up (gate, then up) or down matrix
    std::string weight() const { return module + ".weight"; }
};

// Every expert's gate, up and down projection in order: the one loop every representation loads by.
template <class F>
void for_each_projection(const std::vector<std::string>& prefixes, const ExpertsLayout& g, F&& load) {
    for (int64_t i = 0; i < g.n; ++i) {
        const std::string& p = prefixes[static_cast<size_t>(i)];
        const Shape up_shape{g.full_inter, g.hidden}, down_shape{g.hidden, g.full_inter};
        load(Projection{i, kGate, p + g.names.gate, up_shape, g.inter_begin, g.inter, 0, g.hidden, i * 2 * g.inter});
        load(Projection{i, kUp, p + g.names.up, up_shape, g.inter_begin, g.inter, 0, g.hidden,
                        i * 2 * g.inter + g.inter});
        load(Projection{i, kDown, p + g.names.down, down_shape, 0, g.hidden, g.inter_begin, g.inter, i * g.hidden});
    }
}

// A [rows, cols] rectangle of bf16 rows to copy: planned where a missing tensor or a wrong shape
// can raise, copied wherever (load_float copies them on the load pool's threads).
struct Bf16Rows {
    const uint16_t* src;
    int64_t src_stride;
    uint16_t* dst;  // row stride cols
    int64_t rows, cols;

    void copy() const {
        for (int64_t r = 0; r < rows; ++r) {
            std::memcpy(dst + r * cols, src + r * src_stride, static_cast<size_t>(cols) * 2);
        }
    }
};

// The copy of the [rows, cols] rectangle at (row0, col0) of a `shape` weight into dst, where the
// checkpoint stores it as bf16; nothing where it must be converted (copy_as_bf16).
std::optional<Bf16Rows> plan_bf16_rows(const io::WeightSource& weights, const std::string& name, const Shape& shape,
                                       int64_t row0, int64_t rows, int64_t col0, int64_t cols,
                                       const Quantization& quant, uint16_t* dst) {
    const std::string module = name.substr(0, name.size() - std::string(".weight").size());
    if (stored_as_int4(weights, module, quant)) return std::nullopt;
    const TensorView src = get_checked(weights, name, shape);
    if (src.dtype != DType::kBF16) return std::nullopt;
    return Bf16Rows{src.as<const uint16_t>() + row0 * shape[1] + col0, shape[1], dst, rows, cols};
}

// Copies the [rows, cols] rectangle at (row0, col0) of a `shape` weight into dst as bf16 (bf16
// bytes copied, other float dtypes rounded).
void copy_as_bf16(const io::WeightSource& weights, const std::string& name, const Shape& shape, int64_t row0,
                  int64_t rows, int64_t col0, int64_t cols, const Quantization& quant, uint16_t* dst) {
    if (const auto plan = plan_bf16_rows(weights, name, shape, row0, rows, col0, cols, quant, dst)) {
        plan->copy();
        return;
    }
    // other dtypes (and int4 under --quantization none) through f32
    const int64_t width = shape[1];
    const std::string module = name.substr(0, name.size() - std::string(".weight").size());
    const Tensor f = load_weight_f32(weights, module, shape[0], width, quant);
    for (int64_t r = 0; r < rows; ++r) {
        for (int64_t c = 0; c < cols; ++c)
            dst[r * cols + c] = f32_to_bf16(f.as<float>()[(row0 + r) * width + col0 + c]);
    }
}

// Copies src into rows [row0, row0 + src.rows()) of dst (same columns and groups).
void copy_int4_rows(const Int4Matrix& src, Int4Matrix& dst, int64_t row0) {
    const int64_t ng = src.scale.dim(1);
    std::memcpy(dst.codes.as<uint8_t>() + row0 * (dst.cols() / 2), src.codes.data(), src.codes.nbytes());
    std::memcpy(dst.scale.as<float>() + row0 * ng, src.scale.data(), src.scale.nbytes());
    std::memcpy(dst.zero.as<float>() + row0 * ng, src.zero.data(), src.zero.nbytes());
}

// Expert i's act order (GPTQ desc_act) into row i of dst: gate and up share one input, so they
// must share one order (GPTQ's, from the same Hessian, does); all experts must agree on having one.
void copy_act_order(const Tensor& a, const Tensor& b, const std::string& module, Tensor& dst, int64_t i) {
    const bool same = a.empty() == b.empty() && (a.empty() || std::memcmp(a.data(), b.data(), a.nbytes()) == 0);
    if (!same || a.empty() != dst.empty()) {
        raise(ErrorCode::kUnsupported,
              "'{}': the experts' gate/up projections (or experts 0 and this one) differ in GPTQ act order; moeserve "
              "runs one order per shared input",
              module);
    }
    if (!dst.empty()) std::memcpy(dst.as<int32_t>() + i * a.numel(), a.data(), a.nbytes());
}

// An empty stacked int4 matrix [rows, like.cols()] with like's groups.
Int4Matrix stacked_like(const Int4Matrix& like, int64_t rows) {
    return {Tensor(DType::kU8, {rows, like.codes.dim(1)}),
            Tensor(DType::kF32, {rows, like.scale.dim(1)}),
            Tensor(DType::kF32, {rows, like.scale.dim(1)}),
            like.group_size,
            Tensor(),
            0};
}

// Copies the [rows, cols] rectangle at (row0, col0) of a `shape` weight into dst as f32 (the
// --dtype float32 path: any float dtype widened, FP8 dequantized).
void copy_as_f32(const io::WeightSource& weights, const std::string& name, const Shape& shape, int64_t row0,
                 int64_t rows, int64_t col0, int64_t cols, const Quantization& quant, float* dst) {
    const Tensor f = load_weight_f32(weights, name.substr(0, name.size() - std::string(".weight").size()), shape[0],
                                     shape[1], quant);
    const int64_t width = shape[1];
    for (int64_t r = 0; r < rows; ++r) {
        std::memcpy(dst + r * cols, f.as<float>() + (row0 + r) * width + col0, static_cast<size_t>(cols) * 4);
    }
}

// Copies the [rows, cols] rectangle at (row0, col0) of the int8 form of a `shape` weight into
// dst, and the scales of its rows into scale_dst.
void copy_as_int8(const io::WeightSource& weights, const std::string& name, const Shape& shape, int64_t row0,
                  int64_t rows, int64_t col0, int64_t cols, const Quantization& quant, int8_t* dst, float* scale_dst) {
    get_checked(weights, name, shape);
    const Int8Matrix m = load_int8_matrix(weights, name, quant);
    const int64_t width = shape[1];
    for (int64_t r = 0; r < rows; ++r) {
        std::memcpy(dst + r * cols, m.data.as<int8_t>() + (row0 + r) * width + col0, static_cast<size_t>(cols));
        scale_dst[r] = m.scale.as<float>()[row0 + r];
    }
}

FloatExpertWeights load_float(const io::WeightSource& weights, const std::vector<std::string>& prefixes,
                              const ExpertsLayout& g, const Quantization& quant) {
    const DType dtype = quant.f32_weights ? DType::kF32 : DType::kBF16;
    FloatExpertWeights w{Tensor(dtype, {g.n, 2 * g.inter, g.hidden}), Tensor(dtype, {g.n, g.hidden, g.inter}), false};
    // Rows stored as bf16 are copied on the load pool's threads (the file's pages faulting in, the
    // tensors' pages cleared: most of a load's time); rows that need converting, on this one.
    std::vector<Bf16Rows> copies;
    for_each_projection(prefixes, g, [&](const Projection& p) {
        const Tensor& dst = p.kind == kDown ? w.down : w.gate_up;
        const int64_t offset = p.stacked_row * p.cols;
        if (dtype == DType::kF32) {
            copy_as_f32(weights, p.weight(), p.shape, p.row0, p.rows, p.col0, p.cols, quant, dst.as<float>() + offset);
        } else if (auto plan = plan_bf16_rows(weights, p.weight(), p.shape, p.row0, p.rows, p.col0, p.cols, quant,
                                              dst.as<uint16_t>() + offset)) {
            copies.push_back(*plan);
        } else {
            copy_as_bf16(weights, p.weight(), p.shape, p.row0, p.rows, p.col0, p.cols, quant,
                         dst.as<uint16_t>() + offset);
        }
    });
    load_pool().parallel_for(static_cast<int64_t>(copies.size()), [&](int64_t begin, int64_t end) {
        for (int64_t i = begin; i < end; ++i) copies[static_cast<size_t>(i)].copy();
    });
    return w;
}

Int8ExpertWeights load_int8(const io::WeightSource& weights, const std::vector<std::string>& prefixes,
                            const ExpertsLayout& g, const Quantization& quant) {
    Int8ExpertWeights w{Tensor(DType::kI8, {g.n, 2 * g.inter, g.hidden}), Tensor(DType::kI8, {g.n, g.hidden, g.inter}),
                        Tensor(DType::kF32, {g.n, 2 * g.inter}), Tensor(DType::kF32, {g.n, g.hidden})};
    for_each_projection(prefixes, g, [&](const Projection& p) {
        const bool down = p.kind == kDown;
        copy_as_int8(weights, p.weight(), p.shape, p.row0, p.rows, p.col0, p.cols, quant,
                     (down ? w.down : w.gate_up).as<int8_t>() + p.stacked_row * p.cols,
                     (down ? w.down_scale : w.gate_up_scale).as<float>() + p.stacked_row);
    });
    return w;
}

// TP splits the experts' intermediate features. Where down has an act order (GPTQ desc_act), a
// rank's slice of its input columns lies in every group, so the rank takes down's stored columns
// [inter_begin, +inter) instead (whole groups) and computes, in gate and up, the features those
// columns multiply, in that order: down then needs no order of its own, and nothing is padded.
// Without an order the features are [inter_begin, +inter), the plain TP slice.
struct StoredSplit {
    Int4Matrix down;                // the stored columns, no act order
    std::vector<int32_t> features;  // the gate/up rows this rank computes, in down's column order
};

// The TP split of the expert whose down projection is `down_module`, or none where TP does not
// split the features or the checkpoint does not store the experts as int4 (quantized at load,
// each rank quantizes its own rectangle).
std::optional<StoredSplit> stored_split(const io::WeightSource& weights, const std::string& down_module,
                                        const ExpertsLayout& g, const Quantization& quant) {
    if (g.inter == g.full_inter || !stored_as_int4(weights, down_module, quant)) return std::nullopt;
    const Int4Matrix full = load_int4_matrix(weights, down_module, g.hidden, g.full_inter, quant);
    StoredSplit split;
    split.down = int4_stored_columns(full, g.inter_begin, g.inter, down_module + ".weight", split.features);
    return split;
}

Int4ExpertWeights load_int4(const io::WeightSource& weights, const std::vector<std::string>& prefixes,
                            const ExpertsLayout& g, const Quantization& quant) {
    Int4ExpertWeights w;
    Tensor gate_perm;                  // the current expert's gate act order, which its up must share
    std::optional<StoredSplit> split;  // the current expert's
    for_each_projection(prefixes, g, [&](const Projection& p) {
        if (p.kind == kGate) split = stored_split(weights, prefixes[size_t(p.expert)] + g.names.down, g, quant);
        Int4Matrix m;
        if (!split) {
            m = load_int4_rectangle(weights, p.module, p.shape[0], p.shape[1], p.row0, p.rows, p.col0, p.cols, quant);
        } else if (p.kind == kDown) {
            m = std::move(split->down);
        } else {
            m = int4_rows(load_int4_matrix(weights, p.module, p.shape[0], p.shape[1], quant), split->features);
        }
        const bool down = p.kind == kDown;
        Int4Matrix& dst = down ? w.down : w.gate_up;
        Tensor& perm = down ? w.down_perm : w.gate_up_perm;
        if (p.expert == 0 && p.kind != kUp) {
            dst = stacked_like(m, down ? g.n * g.hidden : g.n * 2 * g.inter);
            if (!m.perm.empty()) perm = Tensor(DType::kI32, {g.n, m.cols()});
        }
        copy_int4_rows(m, dst, p.stacked_row);
        if (p.kind == kGate) {
            gate_perm = std::move(m.perm);
        } else {
            copy_act_order(down ? m.perm : gate_perm, m.perm, p.module, perm, p.expert);
        }
    });
    return w;
}

std::vector<kernels::GgufMatrix>& blocks_of(kernels::GgufExperts& e, ProjectionKind kind) {
    return kind == kGate ? e.gate : kind == kUp ? e.up : e.down;
}

BlockExpertWeights no_blocks_yet(const ExpertsLayout& g, int64_t expert_begin) {
    BlockExpertWeights w;
    w.blocks.expert_begin = expert_begin;
    w.blocks.hidden = g.hidden;
    w.blocks.inter = g.inter;
    return w;
}

// A GGUF file's experts: slices of its stacked ffn_*_exps tensors, in the mapping.
BlockExpertWeights load_gguf(const io::WeightSource& weights, const std::vector<std::string>& prefixes,
                             const ExpertsLayout& g, int64_t expert_begin) {
    BlockExpertWeights w = no_blocks_yet(g, expert_begin);
    std::vector<std::string> names;
    for_each_projection(prefixes, g, [&](const Projection& p) {
        const auto full = *gguf_matrix(weights, p.weight(), p.shape[0], p.shape[1], true);
        blocks_of(w.blocks, p.kind).push_back(gguf_rectangle(full, p.row0, p.rows, p.col0, p.cols, p.weight()));
        if (std::find(names.begin(), names.end(), p.weight()) == names.end()) names.push_back(p.weight());
    });
    w.owned = gguf_pack_experts(weights, w.blocks, names);
    w.bytes = gguf_experts_bytes(w.blocks);
    return w;
}

// An FP8 checkpoint's experts, repacked into FP8 blocks (each expert's gate, up and down in turn).
BlockExpertWeights load_fp8(const io::WeightSource& weights, const std::vector<std::string>& prefixes,
                            const ExpertsLayout& g, int64_t expert_begin, const Quantization& quant) {
    BlockExpertWeights w = no_blocks_yet(g, expert_begin);
    const size_t proj = fp8_packed_bytes(g.inter, g.hidden);  // gate or up; down has as many blocks
    w.owned = Tensor(DType::kU8, {static_cast<int64_t>(3 * proj) * g.n});
    for_each_projection(prefixes, g, [&](const Projection& p) {
        uint8_t* dst = w.owned.as<uint8_t>() + static_cast<size_t>(p.expert * 3 + p.kind) * proj;
        pack_fp8_rows(weights, p.weight(), p.shape, p.row0, p.rows, p.col0, p.cols, quant, dst);
        blocks_of(w.blocks, p.kind).push_back(fp8_matrix(dst, p.rows, p.cols));
    });
    w.bytes = w.owned.nbytes();
    return w;
}

// gate|up|down run as one unit: one type for all three (vllm-ascend reads expert 0's).
void check_one_scheme(const io::WeightSource& weights, const std::string& prefix, const ExpertProjections& names,
                      const Quantization& quant) {
    check_fused_shards(weights, quant, {prefix + names.gate, prefix + names.up});
    check_fused_shards(weights, quant, {prefix + names.gate, prefix + names.down});
    if (quant.scheme(prefix + names.gate) == LinearScheme::kW8A8Static) {
        raise(ErrorCode::kUnsupported,
              "{}: '{}{}.weight' is static W8A8; moeserve runs MLPs and experts as FLOAT or W8A8_DYNAMIC "
              "(the ModelSlim mix)",
              quant.description_file, prefix, names.gate);
    }
}

}  // namespace

Experts Experts::load(const io::WeightSource& weights, const std::vector<std::string>& prefixes, int64_t hidden,
                      int64_t inter, int64_t expert_begin, int64_t inter_begin, int64_t inter_count,
                      const Quantization& quant, const ExpertProjections& names) {
    if (inter_count <= 0) inter_count = inter - inter_begin;
    MOESERVE_CHECK(inter_begin >= 0 && inter_begin + inter_count <= inter, "inter shard [{}, +{}) of {}", inter_begin,
                   inter_count, inter);
    Experts e;
    const ExpertsLayout g{static_cast<int64_t>(prefixes.size()), hidden, inter, inter_begin, inter_count, names};
    e.num_experts_ = g.n;
    e.hidden_ = hidden;
    e.inter_ = inter_count;
    e.expert_begin_ = expert_begin;
    if (g.n == 0) {
        e.weights_ = load_float(weights, prefixes, g, quant);
        return e;
    }
    const std::string& first = prefixes[0];
    if (weights.is_gguf()) {
        e.weights_ = load_gguf(weights, prefixes, g, expert_begin);
        return e;
    }
    check_one_scheme(weights, first, names, quant);
    const std::string gate = first + names.gate;
    if (quant.int4_module(gate)) {
        quant.counts->int4_experts += 1;
        Int4ExpertWeights w = load_int4(weights, prefixes, g, quant);
        w.int8_activations = quant.scheme(gate) == LinearScheme::kW4A8;
        e.weights_ = std::move(w);
    } else if (quant.int8_module(gate)) {
        quant.counts->dynamic_experts += 1;
        e.weights_ = load_int8(weights, prefixes, g, quant);
    } else if (quant.fp8_module(gate) && fp8_packable(weights, gate + ".weight", quant, 0, hidden) &&
               fp8_packable(weights, first + names.down + ".weight", quant, inter_begin, inter_count)) {
        quant.counts->fp8_experts += 1;
        e.weights_ = load_fp8(weights, prefixes, g, expert_begin, quant);
    } else {
        quant.counts->float_experts += 1;
        e.weights_ = load_float(weights, prefixes, g, quant);
        e.pack_for_kernels();
    }
    return e;
}

Experts Experts::from_weights(ExpertWeights weights, int64_t n, int64_t hidden, int64_t inter, int64_t expert_begin,
                              ExpertBiases biases) {
    Experts e;
    e.weights_ = std::move(weights);
    e.num_experts_ = n;
    e.hidden_ = hidden;
    e.inter_ = inter;
    e.expert_begin_ = expert_begin;
    e.set_biases(std::move(biases));
    e.pack_for_kernels();
    return e;
}

namespace {

// The `count` bf16 matrices [rows, k] stored one after another in t, each repacked by the backend
// into `packed_elems` elements. In place, block by block through one matrix's copy, when the
// packing adds no padding (rows a multiple of the panel height): a second tensor would have every
// page cleared by the kernel first, which was most of the packing's load time.
Tensor repack_bf16_blocks(Tensor t, int64_t count, int64_t rows, int64_t k, int64_t packed_elems) {
    const kernels::Ops& ops = kernels::ops();
    if (packed_elems == rows * k) {
        std::vector<uint16_t> block(static_cast<size_t>(rows * k));
        for (int64_t i = 0; i < count; ++i) {
            uint16_t* at = t.as<uint16_t>() + i * rows * k;
            std::memcpy(block.data(), at, block.size() * 2);
            ops.pack_bf16(load_pool(), block.data(), rows, k, at);
        }
        return t;
    }
    Tensor packed(DType::kBF16, {count * packed_elems});
    for (int64_t i = 0; i < count; ++i) {
        ops.pack_bf16(load_pool(), t.as<const uint16_t>() + i * rows * k, rows, k,
                      packed.as<uint16_t>() + i * packed_elems);
    }
    return packed;
}

}  // namespace

void Experts::pack_for_kernels() {
    auto* w = std::get_if<FloatExpertWeights>(&weights_);
    if (w == nullptr || w->panels || w->gate_up.dtype() != DType::kBF16 || num_experts_ == 0) return;
    const kernels::Ops& ops = kernels::ops();
    const int64_t n = num_experts_, h = hidden_, inter = inter_;
    const auto gate_elems = static_cast<int64_t>(ops.bf16_packed_bytes(inter, h) / 2);
    const auto down_elems = static_cast<int64_t>(ops.bf16_packed_bytes(h, inter) / 2);
    if (gate_elems == 0 || down_elems == 0) return;
    // gate_up: expert e's gate rows, then its up rows, as 2 n matrices [inter, h]
    Tensor gate_up = repack_bf16_blocks(std::move(w->gate_up), 2 * n, inter, h, gate_elems);
    Tensor down = repack_bf16_blocks(std::move(w->down), n, h, inter, down_elems);
    *w = FloatExpertWeights{std::move(gate_up), std::move(down), true};
}

void Experts::set_biases(ExpertBiases biases) {
    // the int8 and int4 kernels have no ExpertGlu
    MOESERVE_CHECK(
        std::holds_alternative<FloatExpertWeights>(weights_) || std::holds_alternative<BlockExpertWeights>(weights_),
        "experts with biases run as float or blocks");
    biases_ = std::move(biases);
    if (auto* blocks = std::get_if<BlockExpertWeights>(&weights_)) blocks->blocks.glu = glu();
}

kernels::ExpertGlu Experts::glu() const {
    return {biases_.gate_up.empty() ? nullptr : biases_.gate_up.as<const float>(), biases_.clamp_limit, biases_.alpha};
}

void Experts::add_down_bias(const int32_t* topk_ids, const float* topk_weights, int64_t num_tokens, int k,
                            float* out) const {
    const float* bias = biases_.down.as<const float>();
    for (int64_t t = 0; t < num_tokens; ++t) {
        for (int j = 0; j < k; ++j) {
            const int64_t e = int64_t{topk_ids[t * k + j]} - expert_begin_;
            if (e < 0 || e >= num_experts_) continue;
            const float w = topk_weights[t * k + j];
            for (int64_t c = 0; c < hidden_; ++c) out[t * hidden_ + c] += w * bias[e * hidden_ + c];
        }
    }
}

size_t Experts::weight_bytes() const {
    return std::visit(Overloaded{[](const FloatExpertWeights& w) { return w.gate_up.nbytes() + w.down.nbytes(); },
                                 [](const Int8ExpertWeights& w) {
                                     return w.gate_up.nbytes() + w.down.nbytes() + w.gate_up_scale.nbytes() +
                                            w.down_scale.nbytes();
                                 },
                                 [](const Int4ExpertWeights& w) {
                                     return w.gate_up.nbytes() + w.down.nbytes() + w.gate_up_perm.nbytes() +
                                            w.down_perm.nbytes();
                                 },
                                 [](const BlockExpertWeights& w) { return w.bytes; }},
                      weights_) +
           biases_.gate_up.nbytes() + biases_.down.nbytes();
}

void Experts::forward(ThreadPool& pool, const float* x, int64_t num_tokens, const int32_t* topk_ids,
                      const float* topk_weights, int k, float* out) const {
    const int64_t n = num_experts_, first = expert_begin_, h = hidden_, i = inter_;
    std::visit(
        Overloaded{
            [&](const BlockExpertWeights& w) {
                kernels::ops().gguf_moe_experts(pool, x, num_tokens, topk_ids, topk_weights, k, w.blocks, out);
            },
            [&](const Int4ExpertWeights& w) {
                kernels::Int4Weights gate_up = w.gate_up.view(), down = w.down.view();
                gate_up.int8_activations = down.int8_activations = w.int8_activations;
                const kernels::MoeExpertsInt4 ex{gate_up,
                                                 down,
                                                 n,
                                                 first,
                                                 h,
                                                 i,
                                                 w.gate_up_perm.empty() ? nullptr : w.gate_up_perm.as<const int32_t>(),
                                                 w.down_perm.empty() ? nullptr : w.down_perm.as<const int32_t>()};
                kernels::ops().moe_experts_int4(pool, x, num_tokens, topk_ids, topk_weights, k, ex, out);
            },
            [&](const Int8ExpertWeights& w) {
                const kernels::MoeExpertsInt8 ex{w.gate_up.as<const int8_t>(),
                                                 w.gate_up_scale.as<const float>(),
                                                 w.down.as<const int8_t>(),
                                                 w.down_scale.as<const float>(),
                                                 n,
                                                 first,
                                                 h,
                                                 i};
                kernels::ops().moe_experts_int8(pool, x, num_tokens, topk_ids, topk_weights, k, ex, out);
            },
            [&](const FloatExpertWeights& w) {
                if (w.gate_up.dtype() == DType::kF32) {
                    const kernels::MoeExpertsF32 ex{
                        w.gate_up.as<const float>(), w.down.as<const float>(), n, first, h, i, glu()};
                    kernels::ops().moe_experts_f32(pool, x, num_tokens, topk_ids, topk_weights, k, ex, out);
                    return;
                }
                const kernels::MoeExpertsBf16 ex{
                    w.gate_up.as<const uint16_t>(), w.down.as<const uint16_t>(), n, first, h, i, glu(), w.panels};
                kernels::ops().moe_experts_bf16(pool, x, num_tokens, topk_ids, topk_weights, k, ex, out);
            }},
        weights_);
    if (!biases_.down.empty()) add_down_bias(topk_ids, topk_weights, num_tokens, k, out);
}

void Experts::forward_dense(ThreadPool& pool, const float* x, int64_t num_tokens, std::vector<int32_t>& ids_scratch,
                            kernels::Buffer& weights_scratch, float* out) const {
    MOESERVE_CHECK(num_experts() == 1, "forward_dense needs exactly one expert, have {}", num_experts());
    ids_scratch.assign(static_cast<size_t>(num_tokens), static_cast<int32_t>(expert_begin_));
    weights_scratch.assign(static_cast<size_t>(num_tokens), 1.0f);
    forward(pool, x, num_tokens, ids_scratch.data(), weights_scratch.data(), 1, out);
}

}  // namespace moeserve::model
