#include "moeserve/model/layers/experts.h"

#include <cstring>

#include "moeserve/core/error.h"
#include "moeserve/model/formats/fp8_blocks.h"
#include "moeserve/model/formats/gguf_weights.h"
#include "moeserve/model/layers/weight_loading.h"

namespace moeserve::model {

namespace {
// Copies the [rows, cols] rectangle at (row0, col0) of a `shape` weight into dst as bf16 (bf16
// bytes copied, other float dtypes rounded).
void copy_as_bf16(const io::WeightSource& weights, const std::string& name, const Shape& shape, int64_t row0,
                  int64_t rows, int64_t col0, int64_t cols, const Quantization& quant, uint16_t* dst) {
    const int64_t width = shape[1];
    const std::string module = name.substr(0, name.size() - std::string(".weight").size());
    if (!stored_as_int4(weights, module, quant)) {
        const TensorView src = get_checked(weights, name, shape);
        if (src.dtype == DType::kBF16) {
            for (int64_t r = 0; r < rows; ++r) {
                std::memcpy(dst + r * cols, src.as<const uint16_t>() + (row0 + r) * width + col0,
                            static_cast<size_t>(cols) * 2);
            }
            return;
        }
    }
    // other dtypes (and int4 under --quantization none) through f32
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
void copy_act_order(const Int4Matrix& a, const Int4Matrix& b, const std::string& prefix, Tensor& dst, int64_t i) {
    const bool same = a.perm.empty() == b.perm.empty() &&
                      (a.perm.empty() || std::memcmp(a.perm.data(), b.perm.data(), a.perm.nbytes()) == 0);
    if (!same || a.perm.empty() != dst.empty()) {
        raise(ErrorCode::kUnsupported,
              "'{}': the experts' gate/up projections (or experts 0 and this one) differ in GPTQ act order; moeserve "
              "runs one order per shared input",
              prefix);
    }
    if (!dst.empty()) std::memcpy(dst.as<int32_t>() + i * a.cols(), a.perm.data(), a.perm.nbytes());
}

// An empty stacked int4 matrix [rows, like.cols()] with like's groups.
Int4Matrix stacked_like(const Int4Matrix& like, int64_t rows) {
    return {Tensor(DType::kU8, {rows, like.codes.dim(1)}), Tensor(DType::kF32, {rows, like.scale.dim(1)}),
            Tensor(DType::kF32, {rows, like.scale.dim(1)}), like.group_size, Tensor()};
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

}  // namespace

Experts Experts::load(const io::WeightSource& weights, const std::vector<std::string>& prefixes, int64_t hidden,
                      int64_t inter, int64_t expert_begin, int64_t inter_begin, int64_t inter_count,
                      const Quantization& quant) {
    Experts e;
    const auto n = static_cast<int64_t>(prefixes.size());
    const int64_t full_inter = inter;
    if (inter_count <= 0) inter_count = full_inter - inter_begin;
    MOESERVE_CHECK(inter_begin >= 0 && inter_begin + inter_count <= full_inter, "inter shard [{}, +{}) of {}",
                   inter_begin, inter_count, full_inter);
    if (weights.is_gguf() && n > 0)
        return load_gguf(weights, prefixes, hidden, full_inter, expert_begin, inter_begin, inter_count);
    inter = inter_count;
    e.hidden_ = hidden;
    e.inter_ = inter;
    e.expert_begin_ = expert_begin;
    e.num_experts_ = n;
    const int64_t proj = inter * hidden;
    if (n > 0) {
        // gate|up|down run as one unit: one type for all three (vllm-ascend reads expert 0's)
        check_fused_shards(weights, quant, {prefixes[0] + "gate_proj", prefixes[0] + "up_proj"});
        check_fused_shards(weights, quant, {prefixes[0] + "gate_proj", prefixes[0] + "down_proj"});
        if (quant.scheme(prefixes[0] + "gate_proj") == LinearScheme::kW8A8Static) {
            raise(ErrorCode::kUnsupported,
                  "{}: '{}gate_proj.weight' is static W8A8; moeserve runs MLPs and experts as FLOAT or W8A8_DYNAMIC "
                  "(the ModelSlim mix)",
                  quant.description_file, prefixes[0]);
        }
    }
    if (n > 0 && quant.int4_module(prefixes[0] + "gate_proj")) {
        quant.counts->int4_experts += 1;
        return load_int4(weights, prefixes, hidden, full_inter, inter_begin, inter, quant, std::move(e));
    }
    if (n > 0 && quant.int8_module(prefixes[0] + "gate_proj")) {
        quant.counts->dynamic_experts += 1;
        e.int8_ = true;
        e.gate_up_ = Tensor(DType::kI8, {n, 2 * inter, hidden});
        e.down_ = Tensor(DType::kI8, {n, hidden, inter});
        e.gate_up_scale_ = Tensor(DType::kF32, {n, 2 * inter});
        e.down_scale_ = Tensor(DType::kF32, {n, hidden});
        for (int64_t i = 0; i < n; ++i) {
            const std::string& p = prefixes[static_cast<size_t>(i)];
            int8_t* gu = e.gate_up_.as<int8_t>() + i * 2 * proj;
            float* gus = e.gate_up_scale_.as<float>() + i * 2 * inter;
            copy_as_int8(weights, p + "gate_proj.weight", {full_inter, hidden}, inter_begin, inter, 0, hidden, quant,
                         gu, gus);
            copy_as_int8(weights, p + "up_proj.weight", {full_inter, hidden}, inter_begin, inter, 0, hidden, quant,
                         gu + proj, gus + inter);
            copy_as_int8(weights, p + "down_proj.weight", {hidden, full_inter}, 0, hidden, inter_begin, inter, quant,
                         e.down_.as<int8_t>() + i * proj, e.down_scale_.as<float>() + i * hidden);
        }
        return e;
    }
    if (n > 0 && quant.fp8_module(prefixes[0] + "gate_proj") &&
        fp8_packable(weights, prefixes[0] + "gate_proj.weight", quant, 0, hidden) &&
        fp8_packable(weights, prefixes[0] + "down_proj.weight", quant, inter_begin, inter)) {
        quant.counts->fp8_experts += 1;
        return load_fp8(weights, prefixes, hidden, full_inter, expert_begin, inter_begin, inter, quant);
    }
    if (n > 0) quant.counts->float_experts += 1;
    if (quant.f32_weights) {
        e.gate_up_ = Tensor(DType::kF32, {n, 2 * inter, hidden});
        e.down_ = Tensor(DType::kF32, {n, hidden, inter});
        for (int64_t i = 0; i < n; ++i) {
            const std::string& p = prefixes[static_cast<size_t>(i)];
            float* gate_up = e.gate_up_.as<float>() + i * 2 * proj;
            copy_as_f32(weights, p + "gate_proj.weight", {full_inter, hidden}, inter_begin, inter, 0, hidden, quant,
                        gate_up);
            copy_as_f32(weights, p + "up_proj.weight", {full_inter, hidden}, inter_begin, inter, 0, hidden, quant,
                        gate_up + proj);
            copy_as_f32(weights, p + "down_proj.weight", {hidden, full_inter}, 0, hidden, inter_begin, inter, quant,
                        e.down_.as<float>() + i * proj);
        }
        return e;
    }
    e.gate_up_ = Tensor(DType::kBF16, {n, 2 * inter, hidden});
    e.down_ = Tensor(DType::kBF16, {n, hidden, inter});
    for (int64_t i = 0; i < n; ++i) {
        const std::string& p = prefixes[static_cast<size_t>(i)];
        uint16_t* gate_up = e.gate_up_.as<uint16_t>() + i * 2 * proj;
        copy_as_bf16(weights, p + "gate_proj.weight", {full_inter, hidden}, inter_begin, inter, 0, hidden, quant,
                     gate_up);
        copy_as_bf16(weights, p + "up_proj.weight", {full_inter, hidden}, inter_begin, inter, 0, hidden, quant,
                     gate_up + proj);
        copy_as_bf16(weights, p + "down_proj.weight", {hidden, full_inter}, 0, hidden, inter_begin, inter, quant,
                     e.down_.as<uint16_t>() + i * proj);
    }
    return e;
}

Experts Experts::load_int4(const io::WeightSource& weights, const std::vector<std::string>& prefixes, int64_t hidden,
                           int64_t full_inter, int64_t inter_begin, int64_t inter_count, const Quantization& quant,
                           Experts e) {
    const auto n = static_cast<int64_t>(prefixes.size());
    const int64_t inter = inter_count;
    for (int64_t i = 0; i < n; ++i) {
        const std::string& p = prefixes[static_cast<size_t>(i)];
        // gate/up: rows [inter_begin, +inter) of the full matrices; down: the same columns
        const Int4Matrix gate =
            load_int4_rectangle(weights, p + "gate_proj", full_inter, hidden, inter_begin, inter, 0, hidden, quant);
        const Int4Matrix up =
            load_int4_rectangle(weights, p + "up_proj", full_inter, hidden, inter_begin, inter, 0, hidden, quant);
        const Int4Matrix down =
            load_int4_rectangle(weights, p + "down_proj", hidden, full_inter, 0, hidden, inter_begin, inter, quant);
        if (i == 0) {
            e.gate_up4_ = stacked_like(gate, n * 2 * inter);
            e.down4_ = stacked_like(down, n * hidden);
            if (!gate.perm.empty()) e.gate_up4_perm_ = Tensor(DType::kI32, {n, hidden});
            if (!down.perm.empty()) e.down4_perm_ = Tensor(DType::kI32, {n, inter});
        }
        copy_int4_rows(gate, e.gate_up4_, i * 2 * inter);
        copy_int4_rows(up, e.gate_up4_, i * 2 * inter + inter);
        copy_int4_rows(down, e.down4_, i * hidden);
        copy_act_order(gate, up, p, e.gate_up4_perm_, i);
        copy_act_order(down, down, p, e.down4_perm_, i);
    }
    return e;
}

Experts Experts::blocked(int64_t hidden, int64_t inter, int64_t expert_begin, int64_t num_experts) {
    Experts e;
    e.hidden_ = hidden;
    e.inter_ = inter;
    e.expert_begin_ = expert_begin;
    e.num_experts_ = num_experts;
    e.gguf_.expert_begin = expert_begin;
    e.gguf_.hidden = hidden;
    e.gguf_.inter = inter;
    return e;
}

Experts Experts::load_gguf(const io::WeightSource& weights, const std::vector<std::string>& prefixes, int64_t hidden,
                           int64_t full_inter, int64_t expert_begin, int64_t inter_begin, int64_t inter_count) {
    Experts e = blocked(hidden, inter_count, expert_begin, static_cast<int64_t>(prefixes.size()));
    for (const std::string& p : prefixes) {
        // gate/up: rows [inter_begin, +inter_count); down: the same columns (TP partial sums)
        const auto gate = *gguf_matrix(weights, p + "gate_proj.weight", full_inter, hidden, true);
        const auto up = *gguf_matrix(weights, p + "up_proj.weight", full_inter, hidden, true);
        const auto down = *gguf_matrix(weights, p + "down_proj.weight", hidden, full_inter, true);
        e.gguf_.gate.push_back(gguf_rectangle(gate, inter_begin, inter_count, 0, hidden, p + "gate_proj.weight"));
        e.gguf_.up.push_back(gguf_rectangle(up, inter_begin, inter_count, 0, hidden, p + "up_proj.weight"));
        e.gguf_.down.push_back(gguf_rectangle(down, 0, hidden, inter_begin, inter_count, p + "down_proj.weight"));
        e.gguf_bytes_ += gguf_matrix_bytes(e.gguf_.gate.back()) + gguf_matrix_bytes(e.gguf_.up.back()) +
                         gguf_matrix_bytes(e.gguf_.down.back());
    }
    return e;
}

Experts Experts::load_fp8(const io::WeightSource& weights, const std::vector<std::string>& prefixes, int64_t hidden,
                          int64_t full_inter, int64_t expert_begin, int64_t inter_begin, int64_t inter_count,
                          const Quantization& quant) {
    Experts e = blocked(hidden, inter_count, expert_begin, static_cast<int64_t>(prefixes.size()));
    const size_t proj = fp8_packed_bytes(inter_count, hidden);  // gate or up; down has as many blocks
    e.fp8_store_ = Tensor(DType::kU8, {static_cast<int64_t>(3 * proj) * e.num_experts_});
    uint8_t* dst = e.fp8_store_.as<uint8_t>();
    for (const std::string& p : prefixes) {
        // gate/up: rows [inter_begin, +inter_count); down: the same columns (TP partial sums)
        pack_fp8_rows(weights, p + "gate_proj.weight", {full_inter, hidden}, inter_begin, inter_count, 0, hidden, quant,
                      dst);
        e.gguf_.gate.push_back(fp8_matrix(dst, inter_count, hidden));
        pack_fp8_rows(weights, p + "up_proj.weight", {full_inter, hidden}, inter_begin, inter_count, 0, hidden, quant,
                      dst + proj);
        e.gguf_.up.push_back(fp8_matrix(dst + proj, inter_count, hidden));
        pack_fp8_rows(weights, p + "down_proj.weight", {hidden, full_inter}, 0, hidden, inter_begin, inter_count, quant,
                      dst + 2 * proj);
        e.gguf_.down.push_back(fp8_matrix(dst + 2 * proj, hidden, inter_count));
        dst += 3 * proj;
    }
    e.gguf_bytes_ = e.fp8_store_.nbytes();
    return e;
}

kernels::cpu::MoeExpertsInt8 Experts::desc_int8() const {
    return {gate_up_.as<const int8_t>(),
            gate_up_scale_.as<const float>(),
            down_.as<const int8_t>(),
            down_scale_.as<const float>(),
            num_experts(),
            expert_begin_,
            hidden_,
            inter_};
}

kernels::cpu::MoeExpertsF32 Experts::desc_f32() const {
    return {gate_up_.as<const float>(), down_.as<const float>(), num_experts(), expert_begin_, hidden_, inter_};
}

kernels::cpu::MoeExpertsBf16 Experts::desc() const {
    return {gate_up_.as<const uint16_t>(), down_.as<const uint16_t>(), num_experts(), expert_begin_, hidden_, inter_};
}

void Experts::forward(ThreadPool& pool, const float* x, int64_t num_tokens, const int32_t* topk_ids,
                      const float* topk_weights, int k, kernels::cpu::MoeScratch& scratch, float* out) const {
    if (is_gguf()) {
        kernels::cpu::gguf_moe_experts(pool, x, num_tokens, topk_ids, topk_weights, k, gguf_, scratch.gguf, out);
        return;
    }
    if (is_int4()) {
        const kernels::cpu::MoeExpertsInt4 ex{gate_up4_.view(),
                                              down4_.view(),
                                              num_experts(),
                                              expert_begin_,
                                              hidden_,
                                              inter_,
                                              gate_up4_perm_.empty() ? nullptr : gate_up4_perm_.as<const int32_t>(),
                                              down4_perm_.empty() ? nullptr : down4_perm_.as<const int32_t>()};
        kernels::cpu::moe_experts_int4(pool, x, num_tokens, topk_ids, topk_weights, k, ex, scratch, out);
        return;
    }
    if (int8_) {
        kernels::cpu::moe_experts_int8(pool, x, num_tokens, topk_ids, topk_weights, k, desc_int8(), scratch,
                                       scratch.int8, out);
        return;
    }
    if (gate_up_.dtype() == DType::kF32) {
        kernels::cpu::moe_experts_f32(pool, x, num_tokens, topk_ids, topk_weights, k, desc_f32(), scratch, out);
        return;
    }
    kernels::cpu::moe_experts_bf16(pool, x, num_tokens, topk_ids, topk_weights, k, desc(), scratch, out);
}

void Experts::forward_dense(ThreadPool& pool, const float* x, int64_t num_tokens, kernels::cpu::MoeScratch& scratch,
                            std::vector<int32_t>& ids_scratch, std::vector<float>& weights_scratch, float* out) const {
    MOESERVE_CHECK(num_experts() == 1, "forward_dense needs exactly one expert, have {}", num_experts());
    ids_scratch.assign(static_cast<size_t>(num_tokens), static_cast<int32_t>(expert_begin_));
    weights_scratch.assign(static_cast<size_t>(num_tokens), 1.0f);
    forward(pool, x, num_tokens, ids_scratch.data(), weights_scratch.data(), 1, scratch, out);
}

}  // namespace moeserve::model
