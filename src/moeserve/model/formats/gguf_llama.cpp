// GGUF architecture llama with experts <-> model_type mixtral (gguf_arch.h): Mixtral as llama.cpp
// writes it. Its converter permutes the q/k rows of each head from Hugging Face's rotate-half
// order (i, i + d/2) to adjacent pairs (2i, 2i + 1), which llama.cpp's RoPE rotates. The reader
// keeps the rows as stored and sets rope_interleave, so that RoPE rotates those pairs: the
// scores are the same (q and k are permuted alike). The writer permutes. A llama file without
// experts is a dense model: refused.
#include <fmt/format.h>

#include "moeserve/core/error.h"
#include "moeserve/model/formats/gguf_arch.h"
#include "moeserve/model/mixtral/names.h"

namespace moeserve::model {

namespace {

nlohmann::json llama_config(const io::GgufCheckpoint& file, const std::string& a) {
    const io::GgufHeader& h = file.metadata();
    if (gguf_int_or(h, a + ".expert_count", 0) == 0) {
        raise(ErrorCode::kUnsupported,
              "{}: a llama GGUF without experts is a dense model; moeserve runs MoE models "
              "(llama with {}.expert_count: Mixtral)",
              h.file, a);
    }
    nlohmann::json c = gguf_gqa_config(file, a, "mixtral", "MixtralForCausalLM", 10000.0);
    const int64_t head_dim = c.at("head_dim");
    if (gguf_int_or(h, a + ".rope.dimension_count", head_dim) != head_dim) {
        raise(ErrorCode::kUnsupported, "{}: {}.rope.dimension_count differs from the head size {} (partial RoPE)",
              h.file, a, head_dim);
    }
    c.update({
        {"num_local_experts", h.get_int(a + ".expert_count")},
        {"num_experts_per_tok", h.get_int(a + ".expert_used_count")},
        {"intermediate_size", h.get_int(a + ".feed_forward_length")},
        {"rope_interleave", true},
        {"sliding_window", nullptr},
    });
    return c;
}

void llama_metadata(const io::HfConfig& c, const std::string& a, io::GgufWriter& w) {
    const auto refuse = [&](const std::string& what) {
        raise(ErrorCode::kUnsupported, "{}: writing a llama GGUF with {} is not supported", c.label(), what);
    };
    if (c.has("sliding_window")) refuse("a sliding_window");
    if (c.has("rope_scaling")) refuse("rope_scaling");
    if (c.get_bool("rope_interleave", false)) refuse("rows already in llama.cpp's order (rope_interleave)");
    const auto u32 = [](int64_t v) { return static_cast<uint32_t>(v); };
    gguf_set_gqa_metadata(c, a, 1e6, w);
    const int64_t heads = c.get_int("num_attention_heads");
    w.set_u32(a + ".rope.dimension_count", u32(c.get_int("head_dim", c.get_int("hidden_size") / heads)));
    w.set_u32(a + ".expert_count", u32(c.get_int("num_local_experts")));
    w.set_u32(a + ".expert_used_count", u32(c.get_int("num_experts_per_tok")));
}

// Rows of each of `heads` heads from rotate-half order to adjacent pairs: row h d + 2 j + i is
// row h d + i d / 2 + j (llama.cpp's converter's permutation).
Tensor permute_for_llama_rope(const Tensor& w, int64_t heads) {
    const int64_t rows = w.dim(0), cols = w.numel() / rows, d = rows / heads;
    Tensor out(DType::kF32, w.shape());
    for (int64_t h = 0; h < heads; ++h) {
        for (int64_t j = 0; j < d / 2; ++j) {
            for (int64_t i = 0; i < 2; ++i) {
                std::copy_n(w.as<float>() + (h * d + i * d / 2 + j) * cols, cols,
                            out.as<float>() + (h * d + 2 * j + i) * cols);
            }
        }
    }
    return out;
}

GgufTensorEntry stacked(const std::string& gguf, const std::string& layer_prefix, const std::string& proj,
                        int64_t experts) {
    GgufTensorEntry e{gguf, {}, true};
    for (int64_t x = 0; x < experts; ++x) {
        e.names.push_back(fmt::format("{}{}{}.{}.weight", layer_prefix, mixtral::kExperts, x, proj));
    }
    return e;
}

std::vector<GgufTensorEntry> llama_tensors(const io::HfConfig& config) {
    const int64_t layers = config.get_int("num_hidden_layers");
    const int64_t experts = config.get_int("num_local_experts");
    const int64_t heads = config.get_int("num_attention_heads"), kv_heads = config.get_int("num_key_value_heads");
    std::vector<GgufTensorEntry> t;
    gguf_embedding_entry(t);
    for (int64_t i = 0; i < layers; ++i) {
        const std::string b = fmt::format("blk.{}.", i);
        const std::string p = fmt::format("model.layers.{}.", i);
        t.push_back({b + "attn_norm.weight", {p + "input_layernorm.weight"}});
        const size_t q = t.size();
        gguf_attention_entries(t, b, p, false, false);  // q, k, v, output
        for (const auto& [entry, head_count] : {std::pair{q, heads}, std::pair{q + 1, kv_heads}}) {
            const int64_t n = head_count;  // a lambda cannot capture a structured binding (C++20)
            t[entry].convert = [name = t[entry].names[0], n](const io::WeightSource& s) {
                return permute_for_llama_rope(s.load_f32(name), n);
            };
        }
        t.push_back({b + "ffn_norm.weight", {p + "post_attention_layernorm.weight"}});
        t.push_back({b + "ffn_gate_inp.weight", {p + mixtral::kRouter + ".weight"}});
        t.push_back(stacked(b + "ffn_gate_exps.weight", p, mixtral::kProjections.gate, experts));
        t.push_back(stacked(b + "ffn_up_exps.weight", p, mixtral::kProjections.up, experts));
        t.push_back(stacked(b + "ffn_down_exps.weight", p, mixtral::kProjections.down, experts));
    }
    gguf_output_entries(t, config);
    return t;
}

}  // namespace

const GgufArchitecture& gguf_llama() {
    static const GgufArchitecture a{"llama", "mixtral", &llama_config, &llama_metadata, &llama_tensors};
    return a;
}

}  // namespace moeserve::model
