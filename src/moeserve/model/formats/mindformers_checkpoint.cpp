#include "moeserve/model/formats/mindformers_checkpoint.h"

#include <fmt/format.h>

#include <cstring>
#include <map>
#include <set>
#include <span>
#include <string>

#include "moeserve/core/error.h"

namespace moeserve::model {

namespace {

constexpr const char* kWhat = "a golden-stick A8W8 DeepSeek checkpoint in MindFormers names";

// Builds the alias / owned maps of the HF view and remembers which MindFormers tensors were used.
class Converter {
public:
    Converter(const io::WeightSource& mf, const DeepseekV3Config& c) : mf_(mf), c_(c) {}

    const TensorView& need(const std::string& name) {
        const auto sp = split_.find(name);
        if (sp != split_.end()) {
            views_[name] = sp->second.view();
            return views_[name];
        }
        if (!mf_.contains(name)) {
            raise(ErrorCode::kInvalidModel, "{}: tensor '{}' is missing ({} needs it)", mf_.dir().string(), name,
                  kWhat);
        }
        used_.insert(name);
        views_[name] = mf_.get(name);
        return views_[name];
    }

    // `name` must have one of `dtypes` and the shape `shape`.
    const TensorView& need(const std::string& name, std::initializer_list<DType> dtypes, const Shape& shape) {
        const TensorView& v = need(name);
        bool ok = false;
        std::string names;
        for (DType d : dtypes) {
            ok = ok || v.dtype == d;
            names += (names.empty() ? "" : " or ") + std::string(dtype_name(d));
        }
        if (!ok || !(v.shape == shape)) {
            raise(ErrorCode::kInvalidModel, "{} is {} {}; expected {} {}", describe(name), dtype_name(v.dtype),
                  v.shape.str(), names, shape.str());
        }
        return v;
    }

    // A MindFormers tensor for messages; a part of a fused tensor names the fused one.
    std::string describe(const std::string& name) const {
        const auto it = split_from_.find(name);
        return it == split_from_.end() ? mf_.describe(name)
                                       : fmt::format("'{}' (a part of {})", name, mf_.describe(it->second));
    }

    // hf reads MindFormers tensor mf: zero-copy, or a copy of a part split from a fused tensor
    void link(const std::string& hf, const std::string& mf) {
        const auto sp = split_.find(mf);
        if (sp != split_.end()) {
            owned_.emplace(hf, sp->second.clone());
        } else {
            aliases_[hf] = mf;
        }
    }
    void alias(const std::string& hf, const std::string& mf) {
        need(mf);
        link(hf, mf);
    }
    void alias(const std::string& hf, const std::string& mf, std::initializer_list<DType> dtypes, const Shape& shape) {
        need(mf, dtypes, shape);
        link(hf, mf);
    }

    // ffn_concat / qkv_concat left in the file: w_gate_hidden = concat(w1, w3) along the outputs
    // (routed experts: the last axis), qkv2l = concat(q2l_proj, kv2l) along the rows, with one
    // quant_op for both. Their parts are made here under the unfused names.
    void split_fused() {
        const int64_t lq = c_.q_lora_rank.value_or(0), rows = lq + c_.kv_lora_rank + c_.qk_rope_head_dim;
        for (const std::string& name : mf_.names()) {
            const size_t g = name.find(".w_gate_hidden."), q = name.find(".qkv2l.");
            if (g == std::string::npos && q == std::string::npos) continue;
            const bool ffn = g != std::string::npos;
            const std::string head = name.substr(0, ffn ? g : q), tail = name.substr((ffn ? g + 15 : q + 7));
            const auto part = [&](const char* which) { return fmt::format("{}.{}.{}", head, which, tail); };
            const bool known = tail == "_layer.weight" || tail == "_layer.matmul.weight_scale" ||
                               (!ffn && (tail == "_layer.matmul.dequant_scale" || tail == "_layer.matmul.quant_bias" ||
                                         tail == "quant_op.input_scale" || tail == "quant_op.input_zp"));
            if (!known) continue;  // left to check_all_used, which refuses it
            const TensorView v = mf_.get(name);
            used_.insert(name);
            if (!ffn && tail.rfind("quant_op.", 0) == 0) {  // one activation quantization for both
                for (const char* w : {"q2l_proj", "kv2l"}) add_part(part(w), name, v, 0, 0, -1);
                continue;
            }
            const int axis = ffn && head.find("routed_experts.ffn") != std::string::npos ? v.shape.rank() - 1 : 0;
            const int64_t total = v.shape.rank() > 0 ? v.dim(axis) : 0;
            const int64_t first = ffn ? total / 2 : lq;
            if (v.shape.rank() == 0 || (ffn ? total % 2 != 0 : total != rows)) {
                raise(ErrorCode::kInvalidModel, "{} has shape {}; a fused {} needs {} along axis {}",
                      mf_.describe(name), v.shape.str(), ffn ? "w_gate_hidden" : "qkv2l",
                      ffn ? std::string("an even size (w1, then w3)")
                          : fmt::format("q_lora_rank + kv_lora_rank + qk_rope_head_dim = {}", rows),
                      axis);
            }
            add_part(part(ffn ? "w1" : "q2l_proj"), name, v, axis, 0, first);
            add_part(part(ffn ? "w3" : "kv2l"), name, v, axis, first, total - first);
        }
    }
    void own(const std::string& hf, Tensor t) { owned_.emplace(hf, std::move(t)); }

    // The rows of `v` ([rows, ...] or [rows]) with every rope block [b, b + r) for b in `blocks`
    // back in HF order. MindFormers keeps a block's even rows, then its odd rows
    // (infer_trans_rope_weight), so HF row b + 2i is MindFormers row b + i and b + 2i + 1 is b + r/2 + i.
    Tensor unpermute_rope_rows(const TensorView& v, const std::vector<int64_t>& blocks) const {
        const int64_t rows = v.dim(0), r = c_.qk_rope_head_dim;
        const size_t row_bytes = v.nbytes() / static_cast<size_t>(rows);
        std::vector<int64_t> src(static_cast<size_t>(rows));
        for (int64_t j = 0; j < rows; ++j) src[size_t(j)] = j;
        for (int64_t b : blocks) {
            for (int64_t i = 0; i < r / 2; ++i) {
                src[size_t(b + 2 * i)] = b + i;
                src[size_t(b + 2 * i + 1)] = b + r / 2 + i;
            }
        }
        Tensor out(v.dtype, v.shape);
        for (int64_t j = 0; j < rows; ++j) {
            std::memcpy(static_cast<char*>(out.data()) + size_t(j) * row_bytes,
                        static_cast<const char*>(v.data) + size_t(src[size_t(j)]) * row_bytes, row_bytes);
        }
        return out;
    }

    // One static A8W8 attention linear [n, k]; rope_blocks: the row blocks to put back in HF order.
    void static_linear(const std::string& hf, const std::string& mf, int64_t n, int64_t k,
                       const std::vector<int64_t>& rope_blocks) {
        const TensorView& w = need(mf + "._layer.weight", {DType::kI8}, Shape{n, k});
        const TensorView& d = need(mf + "._layer.matmul.dequant_scale", {DType::kF32, DType::kI64}, Shape{n});
        const TensorView& b = need(mf + "._layer.matmul.quant_bias", {DType::kI32}, Shape{n});
        if (rope_blocks.empty()) {
            link(hf + ".weight", mf + "._layer.weight");
            link(hf + ".deq_scale", mf + "._layer.matmul.dequant_scale");
            link(hf + ".quant_bias", mf + "._layer.matmul.quant_bias");
        } else {
            // the per-row dequant_scale and quant_bias are permuted with the rows
            own(hf + ".weight", unpermute_rope_rows(w, rope_blocks));
            own(hf + ".deq_scale", unpermute_rope_rows(d, rope_blocks));
            own(hf + ".quant_bias", unpermute_rope_rows(b, rope_blocks));
        }
        // dtype and shape checked by load_static_int8, which names the MindFormers tensor
        alias(hf + ".input_scale", mf + ".quant_op.input_scale");
        alias(hf + ".input_offset", mf + ".quant_op.input_zp");
    }

    // One dynamic (per-token) A8W8 linear [n, k].
    void dynamic_linear(const std::string& hf, const std::string& mf, int64_t n, int64_t k) {
        alias(hf + ".weight", mf + "._layer.weight", {DType::kI8}, Shape{n, k});
        alias(hf + ".weight_scale", mf + "._layer.matmul.weight_scale", {DType::kF32, DType::kBF16, DType::kF16},
              Shape{n});
    }

    void mlp(const std::string& hf, const std::string& mf, int64_t inter) {
        const int64_t h = c_.hidden_size;
        dynamic_linear(hf + "gate_proj", mf + "w1", inter, h);
        dynamic_linear(hf + "up_proj", mf + "w3", inter, h);
        dynamic_linear(hf + "down_proj", mf + "w2", h, inter);
    }

    // routed experts: w [E, in, out] (in-major) -> E x [out, in]; weight_scale [E, out] -> E x [out]
    void routed(const std::string& hf, const std::string& mf, const char* hf_proj, const char* mf_w, int64_t in,
                int64_t out) {
        const int64_t e_count = c_.n_routed_experts;
        const std::string wname = mf + mf_w + "._layer.weight", sname = mf + mf_w + "._layer.matmul.weight_scale";
        const TensorView& w = need(wname, {DType::kI8}, Shape{e_count, in, out});
        need(sname, {DType::kF32, DType::kBF16, DType::kF16}, Shape{e_count, out});
        const Tensor s = load_f32(sname);
        const auto* src = static_cast<const int8_t*>(w.data);
        for (int64_t e = 0; e < e_count; ++e) {
            Tensor t(DType::kI8, {out, in});
            int8_t* dst = t.as<int8_t>();
            const int8_t* se = src + e * in * out;
            for (int64_t i = 0; i < in; ++i) {
                for (int64_t o = 0; o < out; ++o) dst[o * in + i] = se[i * out + o];
            }
            const std::string p = hf + std::to_string(e) + "." + hf_proj;
            own(p + ".weight", std::move(t));
            Tensor scale(DType::kF32, {out});
            std::memcpy(scale.data(), s.as<float>() + e * out, static_cast<size_t>(out) * 4);
            own(p + ".weight_scale", std::move(scale));
        }
    }

    void layer(int64_t i) {
        const int64_t h = c_.hidden_size, heads = c_.num_attention_heads, r = c_.qk_rope_head_dim;
        const int64_t nope = c_.qk_nope_head_dim, v = c_.v_head_dim, lkv = c_.kv_lora_rank;
        const int64_t lq = *c_.q_lora_rank;
        const std::string p = "model.layers." + std::to_string(i) + ".";
        const std::string a = p + "attention.", s = p + "self_attn.";
        const std::initializer_list<DType> floats = {DType::kBF16, DType::kF16, DType::kF32};
        alias(p + "input_layernorm.weight", p + "attention_norm.weight", floats, Shape{h});
        alias(p + "post_attention_layernorm.weight", p + "ffn_norm.weight", floats, Shape{h});
        alias(s + "q_a_layernorm.weight", a + "lq_norm.weight", floats, Shape{lq});
        alias(s + "kv_a_layernorm.weight", a + "lkv_norm.weight", floats, Shape{lkv});
        static_linear(s + "q_a_proj", a + "q2l_proj", lq, h, {});
        static_linear(s + "kv_a_proj_with_mqa", a + "kv2l", lkv + r, h, {lkv});
        std::vector<int64_t> q_blocks;
        for (int64_t hd = 0; hd < heads; ++hd) q_blocks.push_back(hd * (nope + r) + nope);
        static_linear(s + "q_b_proj", a + "l2q_proj", heads * (nope + r), lq, q_blocks);
        static_linear(s + "o_proj", a + "wo", h, heads * v, {});
        // kv_b_proj [H * (nope + v), kv_lora] from the per-head halves MindFormers keeps apart
        const TensorView& kn = need(a + "lkv2kv_k_nope.weight", floats, Shape{heads * nope, lkv});
        const TensorView& kvv = need(a + "lkv2kv_v.weight", {kn.dtype}, Shape{heads * v, lkv});
        Tensor kv_b(kn.dtype, {heads * (nope + v), lkv});
        const size_t es = dtype_size(kn.dtype), row = static_cast<size_t>(lkv) * es;
        auto* dst = static_cast<char*>(kv_b.data());
        for (int64_t hd = 0; hd < heads; ++hd) {
            std::memcpy(dst + size_t(hd * (nope + v)) * row,
                        static_cast<const char*>(kn.data) + size_t(hd * nope) * row, size_t(nope) * row);
            std::memcpy(dst + size_t(hd * (nope + v) + nope) * row,
                        static_cast<const char*>(kvv.data) + size_t(hd * v) * row, size_t(v) * row);
        }
        own(s + "kv_b_proj.weight", std::move(kv_b));
        const std::string f = p + "feed_forward.";
        if (!c_.is_moe_layer(i)) {
            mlp(p + "mlp.", f, c_.intermediate_size);
            return;
        }
        const std::string re = f + "routed_experts.";
        alias(p + "mlp.gate.weight", re + "router.dense.weight", floats, Shape{c_.n_routed_experts, h});
        if (c_.topk_method == "noaux_tc") {
            alias(p + "mlp.gate.e_score_correction_bias", re + "router.e_score_correction_bias", floats,
                  Shape{c_.n_routed_experts});
        }
        const int64_t inter = c_.moe_intermediate_size;
        routed(p + "mlp.experts.", re + "ffn.", "gate_proj", "w1", h, inter);
        routed(p + "mlp.experts.", re + "ffn.", "up_proj", "w3", h, inter);
        routed(p + "mlp.experts.", re + "ffn.", "down_proj", "w2", inter, h);
        if (c_.n_shared_experts > 0) mlp(p + "mlp.shared_experts.", f + "shared_experts.", c_.n_shared_experts * inter);
    }

    // Every MindFormers tensor must have been used, but those of layers past num_hidden_layers.
    void check_all_used() const {
        for (const std::string& name : mf_.names()) {
            if (used_.count(name) != 0) continue;
            if (name.rfind("model.layers.", 0) == 0) {
                const int64_t layer = std::strtoll(name.c_str() + 13, nullptr, 10);
                if (layer >= c_.num_hidden_layers) continue;  // MTP
            }
            const bool fused =
                name.find("w_gate_hidden") != std::string::npos || name.find("qkv2l") != std::string::npos;
            raise(ErrorCode::kUnsupported, "{}: {} {}", mf_.describe(name),
                  fused ? "is a part of a fused (ffn_concat / qkv_concat) module that moeserve does not split"
                        : "is not part of the golden-stick A8W8 (OSL) layout moeserve loads",
                  name.find("quant_op.beta") != std::string::npos ? "(OSP's beta is not supported)" : "");
        }
    }

    std::map<std::string, std::string> aliases_;
    std::map<std::string, Tensor> owned_;

private:
    // Copies [begin, +len) along axis (0 or the last) of v, or all of v when len < 0, as `name`.
    void add_part(const std::string& name, const std::string& fused, const TensorView& v, int axis, int64_t begin,
                  int64_t len) {
        if (mf_.contains(name) || split_.count(name) != 0) {
            raise(ErrorCode::kInvalidModel, "{} and the fused {} are both present; keep one",
                  mf_.contains(name) ? mf_.describe(name) : "'" + name + "'", mf_.describe(fused));
        }
        std::vector<int64_t> dims(v.shape.dims().begin(), v.shape.dims().end());
        if (len < 0) len = dims.empty() ? 1 : dims[size_t(axis)];
        const size_t es = dtype_size(v.dtype);
        int64_t outer = 1, inner = 1;  // the axis splits [outer, dim, inner]
        for (int i = 0; i < v.shape.rank(); ++i) {
            if (i < axis) outer *= dims[size_t(i)];
            if (i > axis) inner *= dims[size_t(i)];
        }
        const int64_t dim = dims.empty() ? 1 : dims[size_t(axis)];
        if (!dims.empty()) dims[size_t(axis)] = len;
        Tensor t(v.dtype, Shape(std::span<const int64_t>(dims)));
        for (int64_t o = 0; o < outer; ++o) {
            std::memcpy(static_cast<char*>(t.data()) + size_t(o * len * inner) * es,
                        static_cast<const char*>(v.data) + size_t((o * dim + begin) * inner) * es,
                        size_t(len * inner) * es);
        }
        split_.emplace(name, std::move(t));
        split_from_.emplace(name, fused);
    }

    Tensor load_f32(const std::string& name) const {
        const auto sp = split_.find(name);
        if (sp == split_.end()) return mf_.load_f32(name);
        Tensor f(DType::kF32, sp->second.shape());
        io::convert_to_f32(sp->second.view(), f.as<float>());
        return f;
    }

    const io::WeightSource& mf_;
    const DeepseekV3Config& c_;
    std::set<std::string> used_;
    std::map<std::string, TensorView> views_;
    std::map<std::string, Tensor> split_;            // parts of fused tensors, under unfused names
    std::map<std::string, std::string> split_from_;  // part -> the fused tensor it came from
};

}  // namespace

bool has_mindformers_names(const io::WeightSource& weights) {
    return weights.contains("model.tok_embeddings.embedding_weight") || weights.contains("model.norm_out.weight");
}

bool resolve_golden_stick(const io::WeightSource& weights, const io::HfConfig& config, const std::string& requested,
                          Quantization& quant, const std::string& label) {
    const bool mf_names = has_mindformers_names(weights);
    if (mf_names && quant.checkpoint == CheckpointQuant::kNone && (requested.empty() || requested == "auto")) {
        quant = resolve_quantization(
            io::HfConfig(nlohmann::json{{"quantization_config", {{"quant_method", "osl"}}}}, config.label()), "");
    }
    const bool golden_stick = quant.checkpoint == CheckpointQuant::kGoldenStick;
    if (mf_names != golden_stick) {
        raise(ErrorCode::kInvalidModel,
              "{}: {}; a golden-stick A8W8 checkpoint has both quant_method osl (or none) and MindFormers tensor "
              "names (model.tok_embeddings.embedding_weight), and runs as stored (--quantization auto)",
              label,
              mf_names ? "the tensors have MindFormers names but the checkpoint is read as " + quant.format
                       : std::string("config.json says quant_method osl (golden-stick) but the tensors have HF "
                                     "names"));
    }
    return golden_stick;
}

std::unique_ptr<io::WeightSource> mindformers_deepseek_as_hf(std::unique_ptr<io::WeightSource> mf,
                                                             const DeepseekV3Config& c) {
    if (!c.q_lora_rank) {
        raise(ErrorCode::kUnsupported,
              "{}: a golden-stick A8W8 checkpoint without q_lora_rank (q_proj) is not supported; the MindFormers map "
              "moeserve follows has q2l_proj / l2q_proj only",
              mf->dir().string());
    }
    if (c.qk_rope_head_dim % 2 != 0) {
        raise(ErrorCode::kInvalidModel, "{}: qk_rope_head_dim {} must be even (rope rows come in pairs)",
              mf->dir().string(), c.qk_rope_head_dim);
    }
    Converter conv(*mf, c);
    conv.split_fused();
    const int64_t h = c.hidden_size;
    const std::initializer_list<DType> floats = {DType::kBF16, DType::kF16, DType::kF32};
    conv.alias("model.embed_tokens.weight", "model.tok_embeddings.embedding_weight", floats, Shape{c.vocab_size, h});
    conv.alias("model.norm.weight", "model.norm_out.weight", floats, Shape{h});
    if (!c.tie_word_embeddings) conv.alias("lm_head.weight", "lm_head.weight", floats, Shape{c.vocab_size, h});
    for (int64_t i = 0; i < c.num_hidden_layers; ++i) conv.layer(i);
    conv.check_all_used();
    return io::WeightSource::renamed(std::move(mf), conv.aliases_, std::move(conv.owned_));
}

}  // namespace moeserve::model
