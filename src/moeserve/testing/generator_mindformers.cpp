#include "moeserve/testing/generator_mindformers.h"

#include <fmt/format.h>

#include <cstring>
#include <fstream>
#include <utility>

#include "moeserve/core/error.h"
#include "moeserve/io/safetensors_writer.h"
#include "moeserve/model/quantization.h"
#include "moeserve/testing/generator_parts.h"

namespace moeserve::testing::gen {

namespace {

using Named = std::vector<std::pair<std::string, Tensor>>;

std::vector<float> to_f32(const Tensor& t) {
    std::vector<float> f(static_cast<size_t>(t.numel()));
    for (size_t i = 0; i < f.size(); ++i) f[i] = value_at(t, static_cast<int64_t>(i));
    return f;
}

// OSL's per-input-channel smoothing, here random: t[k] = exp(0.3 z), z ~ N(0, 1), one stream per
// input (`key`), so linears that share an input share it.
std::vector<float> smoothing(const std::string& key, int64_t k, uint64_t seed) {
    Rng rng(seed ^ fnv1a(key + "#smooth"));
    std::vector<float> t(static_cast<size_t>(k));
    for (auto& v : t) v = std::exp(0.3f * rng.normal());
    return t;
}

// MindFormers row j of a [rows, ...] tensor is HF row src[j]: in each rope block [b, b + r) the
// HF even rows come first, then the odd ones (infer_trans_rope_weight).
std::vector<int64_t> rope_order(int64_t rows, const std::vector<int64_t>& blocks, int64_t r) {
    std::vector<int64_t> src(static_cast<size_t>(rows));
    for (int64_t j = 0; j < rows; ++j) src[size_t(j)] = j;
    for (int64_t b : blocks) {
        for (int64_t i = 0; i < r / 2; ++i) {
            src[size_t(b + i)] = b + 2 * i;
            src[size_t(b + r / 2 + i)] = b + 2 * i + 1;
        }
    }
    return src;
}

Tensor reorder_rows(Tensor t, const std::vector<int64_t>& src) {
    if (src.empty()) return t;
    Tensor out(t.dtype(), t.shape());
    const size_t row = t.nbytes() / src.size();
    for (size_t j = 0; j < src.size(); ++j) {
        std::memcpy(static_cast<char*>(out.data()) + j * row, static_cast<const char*>(t.data()) + size_t(src[j]) * row,
                    row);
    }
    return out;
}

// A static A8W8 linear from bf16 w [n, k]: the activation the kernel quantizes is x * t[k]
// (smooth: t, or none), the weight folded to W / t, calibrated on those rows; input_scale =
// s_x / t[k] in bf16, the divisor golden-stick stores; dequant_scale = s_x * s_w; quant_bias =
// rint(-z_x * sum_k W_q).
void add_static(Named& out, const std::string& mf, const Tensor& w, const StaticCalibration& calib,
                const std::vector<float>* smooth, const std::vector<int64_t>& rope, bool deq_int64) {
    const int64_t n = w.shape()[0], k = w.shape()[1];
    std::vector<float> f = to_f32(w);
    if (smooth != nullptr) {
        for (int64_t r = 0; r < n; ++r) {
            for (int64_t c = 0; c < k; ++c) f[size_t(r * k + c)] /= (*smooth)[size_t(c)];
        }
    }
    model::Int8Matrix m = model::quantize_matrix_int8(f.data(), n, k);
    Tensor deq(deq_int64 ? DType::kI64 : DType::kF32, {n});
    Tensor bias(DType::kI32, {n});
    for (int64_t r = 0; r < n; ++r) {
        const float d = calib.scale * m.scale.as<float>()[r];
        if (deq_int64) {
            uint32_t bits;
            std::memcpy(&bits, &d, 4);
            deq.as<int64_t>()[r] = static_cast<int64_t>(bits);
        } else {
            deq.as<float>()[r] = d;
        }
        int64_t sum = 0;
        for (int64_t c = 0; c < k; ++c) sum += m.data.as<int8_t>()[r * k + c];
        bias.as<int32_t>()[r] = static_cast<int32_t>(std::nearbyint(-double(calib.offset) * double(sum)));
    }
    const int64_t len = smooth != nullptr ? k : 1;
    Tensor scale(DType::kBF16, {len});
    Tensor zp(DType::kI8, {len});
    for (int64_t c = 0; c < len; ++c) {
        const float s = smooth != nullptr ? calib.scale / (*smooth)[size_t(c)] : calib.scale;
        scale.as<uint16_t>()[c] = f32_to_bf16(s);
        zp.as<int8_t>()[c] = static_cast<int8_t>(calib.offset);
    }
    out.emplace_back(mf + "._layer.weight", reorder_rows(std::move(m.data), rope));
    out.emplace_back(mf + "._layer.matmul.dequant_scale", reorder_rows(std::move(deq), rope));
    out.emplace_back(mf + "._layer.matmul.quant_bias", reorder_rows(std::move(bias), rope));
    out.emplace_back(mf + ".quant_op.input_scale", std::move(scale));
    out.emplace_back(mf + ".quant_op.input_zp", std::move(zp));
}

void add_dynamic(Named& out, const std::string& mf, const Tensor& w) {
    const std::vector<float> f = to_f32(w);
    model::Int8Matrix m = model::quantize_matrix_int8(f.data(), w.shape()[0], w.shape()[1]);
    out.emplace_back(mf + "._layer.weight", std::move(m.data));
    out.emplace_back(mf + "._layer.matmul.weight_scale", std::move(m.scale));
}

// Routed experts of one layer and projection, stacked as MindFormers keeps them.
struct ExpertStack {
    Tensor w;      // int8 [E, in, out]
    Tensor scale;  // f32 [E, out]
};

class Writer {
public:
    Writer(const std::vector<model::WeightSpec>& specs, const model::DeepseekV3Config& c, uint64_t seed,
           const TensorSource& source)
        : c_(c), seed_(seed), calib_(specs, seed, false, source) {}

    // Appends the MindFormers tensors of HF tensor `spec` (value t) to out.
    void add(const model::WeightSpec& spec, const Tensor& t, Named& out) {
        const std::string& n = spec.name;
        if (n == "model.embed_tokens.weight") return plain(out, "model.tok_embeddings.embedding_weight", t);
        if (n == "model.norm.weight") return plain(out, "model.norm_out.weight", t);
        if (n == "lm_head.weight") return plain(out, "lm_head.weight", t);
        const size_t dot = n.find('.', 13);  // after "model.layers.N"
        const std::string layer = n.substr(0, dot + 1), rest = n.substr(dot + 1);
        const std::string a = layer + "attention.", f = layer + "feed_forward.";
        if (rest == "input_layernorm.weight") return plain(out, layer + "attention_norm.weight", t);
        if (rest == "post_attention_layernorm.weight") return plain(out, layer + "ffn_norm.weight", t);
        if (rest == "self_attn.q_a_layernorm.weight") return plain(out, a + "lq_norm.weight", t);
        if (rest == "self_attn.kv_a_layernorm.weight") return plain(out, a + "lkv_norm.weight", t);
        if (rest == "mlp.gate.weight") return plain(out, f + "routed_experts.router.dense.weight", t);
        if (rest == "mlp.gate.e_score_correction_bias") {
            return plain(out, f + "routed_experts.router.e_score_correction_bias", t);
        }
        const int64_t r = c_.qk_rope_head_dim, lkv = c_.kv_lora_rank, heads = c_.num_attention_heads;
        const int64_t nope = c_.qk_nope_head_dim, v = c_.v_head_dim;
        const std::string module = n.substr(0, n.size() - 7);  // without ".weight"
        const int64_t rows = spec.shape[0], k = spec.shape[1];
        if (rest == "self_attn.q_a_proj.weight" || rest == "self_attn.kv_a_proj_with_mqa.weight") {
            // one input (input_layernorm's output), one smoothing and one calibration
            const std::vector<float> t_k = smoothing(layer + "input_layernorm", k, seed_);
            const bool kv = rest == "self_attn.kv_a_proj_with_mqa.weight";
            return add_static(out, a + (kv ? "kv2l" : "q2l_proj"), t, calib_.calibrate(module, &t_k), &t_k,
                              kv ? rope_order(rows, {lkv}, r) : std::vector<int64_t>{}, false);
        }
        if (rest == "self_attn.q_b_proj.weight") {
            const std::vector<float> t_k = smoothing(layer + "q_a_layernorm", k, seed_);
            std::vector<int64_t> blocks;
            for (int64_t h = 0; h < heads; ++h) blocks.push_back(h * (nope + r) + nope);
            return add_static(out, a + "l2q_proj", t, calib_.calibrate(module, &t_k), &t_k, rope_order(rows, blocks, r),
                              false);
        }
        if (rest == "self_attn.o_proj.weight") {
            // per-tensor ([1]) and the int64 dequant_scale: the other forms the loader reads
            return add_static(out, a + "wo", t, calib_.calibrate(module), nullptr, {}, true);
        }
        if (rest == "self_attn.kv_b_proj.weight") {
            Tensor kn(DType::kBF16, {heads * nope, lkv}), vv(DType::kBF16, {heads * v, lkv});
            const size_t row = static_cast<size_t>(lkv) * 2;
            for (int64_t h = 0; h < heads; ++h) {
                std::memcpy(static_cast<char*>(kn.data()) + size_t(h * nope) * row,
                            static_cast<const char*>(t.data()) + size_t(h * (nope + v)) * row, size_t(nope) * row);
                std::memcpy(static_cast<char*>(vv.data()) + size_t(h * v) * row,
                            static_cast<const char*>(t.data()) + size_t(h * (nope + v) + nope) * row, size_t(v) * row);
            }
            out.emplace_back(a + "lkv2kv_k_nope.weight", std::move(kn));
            out.emplace_back(a + "lkv2kv_v.weight", std::move(vv));
            return;
        }
        static const std::pair<const char*, const char*> kProj[] = {
            {"gate_proj", "w1"}, {"up_proj", "w3"}, {"down_proj", "w2"}};
        for (const auto& [hf, mf] : kProj) {
            const std::string tail = std::string(hf) + ".weight";
            if (rest == "mlp." + tail) return add_dynamic(out, f + mf, t);
            if (rest == "mlp.shared_experts." + tail) return add_dynamic(out, f + "shared_experts." + mf, t);
            if (rest.rfind("mlp.experts.", 0) == 0 && gen::ends_with(rest, "." + tail)) {
                return add_expert(out, f + "routed_experts.ffn." + mf, std::stoll(rest.substr(12)), t);
            }
        }
        raise(ErrorCode::kInternal, "mindspore-a8w8 writer: no MindFormers name for '{}'", n);
    }

private:
    static void plain(Named& out, const std::string& name, const Tensor& t) { out.emplace_back(name, t.clone()); }

    // expert e's [out, in] weight into the stack's [e, in, out]; the stack is written after the last
    void add_expert(Named& out, const std::string& mf, int64_t e, const Tensor& t) {
        const int64_t o = t.shape()[0], in = t.shape()[1], count = c_.n_routed_experts;
        ExpertStack& s = stacks_[mf];
        if (s.w.empty()) {
            s.w = Tensor(DType::kI8, {count, in, o});
            s.scale = Tensor(DType::kF32, {count, o});
        }
        const std::vector<float> f = to_f32(t);
        const model::Int8Matrix m = model::quantize_matrix_int8(f.data(), o, in);
        int8_t* dst = s.w.as<int8_t>() + e * in * o;
        for (int64_t i = 0; i < in; ++i) {
            for (int64_t j = 0; j < o; ++j) dst[i * o + j] = m.data.as<int8_t>()[j * in + i];
        }
        std::memcpy(s.scale.as<float>() + e * o, m.scale.data(), static_cast<size_t>(o) * 4);
        if (e + 1 == count) {
            out.emplace_back(mf + "._layer.weight", std::move(s.w));
            out.emplace_back(mf + "._layer.matmul.weight_scale", std::move(s.scale));
            stacks_.erase(mf);
        }
    }

    const model::DeepseekV3Config& c_;
    uint64_t seed_;
    Calibrator calib_;
    std::map<std::string, ExpertStack> stacks_;
};

}  // namespace

void write_mindformers_a8w8(const std::vector<model::WeightSpec>& specs, const model::DeepseekV3Config& c,
                            uint64_t seed, const TensorSource& source, int num_shards,
                            const std::filesystem::path& out_dir, GeneratedModel& result) {
    if (!c.q_lora_rank) {
        raise(ErrorCode::kInvalidArgument, "--quantization mindspore-a8w8 needs q_lora_rank (MindFormers' q2l_proj)");
    }
    Writer writer(specs, c, seed, source);
    Named tensors;
    // The MTP layer (num_nextn_predict_layers) is left out, as the MindFormers reader leaves it out
    // (mindformers_checkpoint.h): it has no MindFormers names here.
    const std::string mtp_layer = fmt::format("model.layers.{}.", c.num_hidden_layers);
    for (const model::WeightSpec& spec : specs) {
        if (spec.name.rfind(mtp_layer, 0) == 0) continue;
        const Tensor t = source.weight(spec);
        result.num_parameters += t.numel();
        writer.add(spec, t, tensors);
    }
    if (num_shards < 1 || num_shards > static_cast<int>(tensors.size())) {
        raise(ErrorCode::kInvalidArgument, "--shards must be in [1, {}]; got {}", tensors.size(), num_shards);
    }
    const size_t per_shard = (tensors.size() + size_t(num_shards) - 1) / size_t(num_shards);
    nlohmann::json weight_map = nlohmann::json::object();
    for (int shard = 0; shard < num_shards; ++shard) {
        // file names are moeserve's own: the published checkpoint's list is not in the spec
        const std::string file = num_shards == 1
                                     ? std::string("ms_a8w8.safetensors")
                                     : fmt::format("ms_a8w8-{:05d}-of-{:05d}.safetensors", shard + 1, num_shards);
        io::SafetensorsWriter w;
        for (size_t i = size_t(shard) * per_shard; i < std::min(tensors.size(), size_t(shard + 1) * per_shard); ++i) {
            result.num_bytes += static_cast<int64_t>(tensors[i].second.nbytes());
            result.num_tensors += 1;
            weight_map[tensors[i].first] = file;
            w.add(tensors[i].first, std::move(tensors[i].second));
        }
        w.write(out_dir / file);
    }
    if (num_shards > 1) {
        const nlohmann::json index = {{"metadata", {{"total_size", result.num_bytes}}}, {"weight_map", weight_map}};
        std::ofstream f(out_dir / "ms_a8w8_quant.safetensors.index.json");
        f << index.dump(2) << "\n";
        if (!f) raise(ErrorCode::kIo, "{}: write failed", (out_dir / "ms_a8w8_quant.safetensors.index.json").string());
    }
}

}  // namespace moeserve::testing::gen
