// GGUF architecture gpt-oss <-> model_type gpt_oss (gguf_arch.h). llama.cpp stores the experts
// split and output-major (ffn_gate_exps / ffn_up_exps [E, inter, hidden], ffn_down_exps
// [E, hidden, inter], each with a bias), where the Hugging Face checkpoint interleaves gate and up
// in one input-major gate_up_proj: the writer converts (GgufTensorEntry::convert), the reader
// maps the split tensors onto per-expert names that gpt_oss/experts.cpp loads.
#include <fmt/format.h>

#include "moeserve/core/error.h"
#include "moeserve/model/formats/gguf_arch.h"

namespace moeserve::model {

namespace {

// llama.cpp's gpt-oss graph fixes the unit's constants (llama-graph.cpp: alpha 1.702, limit 7).
constexpr double kLlamaCppSwigluLimit = 7.0;

nlohmann::json gpt_oss_config(const io::GgufCheckpoint& file, const std::string& a) {
    const io::GgufHeader& h = file.metadata();
    if (h.find(a + ".attention.sliding_window_pattern") != nullptr) {
        raise(ErrorCode::kUnsupported,
              "{}: {}.attention.sliding_window_pattern is not supported (moeserve reads gpt-oss's alternating "
              "pattern, sliding first)",
              h.file, a);
    }
    nlohmann::json c = gguf_gqa_config(file, a, "gpt_oss", "GptOssForCausalLM", 150000.0);
    nlohmann::json layer_types = nlohmann::json::array();
    for (int64_t i = 0; i < c.at("num_hidden_layers").get<int64_t>(); ++i) {
        layer_types.push_back(i % 2 == 0 ? "sliding_attention" : "full_attention");
    }
    c.update({
        {"num_local_experts", h.get_int(a + ".expert_count")},
        {"num_experts_per_tok", h.get_int(a + ".expert_used_count")},
        {"intermediate_size", h.get_int(a + ".expert_feed_forward_length")},
        {"sliding_window", h.get_int(a + ".attention.sliding_window")},
        {"layer_types", layer_types},
        {"swiglu_limit", kLlamaCppSwigluLimit},
        {"attention_bias", true},
        {"tie_word_embeddings", false},
    });
    if (c.contains("rope_scaling")) {
        c["rope_scaling"]["truncate"] = false;  // gpt-oss's own YaRN (its config.json), which GGUF does not record
    }
    return c;
}

void gpt_oss_metadata(const io::HfConfig& c, const std::string& a, io::GgufWriter& w) {
    const auto refuse = [&](const std::string& what) {
        raise(ErrorCode::kUnsupported, "{}: llama.cpp's gpt-oss has no {}", c.label(), what);
    };
    if (c.get_float("swiglu_limit", kLlamaCppSwigluLimit) != kLlamaCppSwigluLimit) refuse("swiglu_limit but 7");
    const nlohmann::json& types = c.json().value("layer_types", nlohmann::json::array());
    for (size_t i = 0; i < types.size(); ++i) {
        if (types[i] != (i % 2 == 0 ? "sliding_attention" : "full_attention"))
            refuse("layer pattern but sliding, full, ...");
    }
    const auto u32 = [](int64_t v) { return static_cast<uint32_t>(v); };
    gguf_set_gqa_metadata(c, a, 150000.0, w);
    w.set_u32(a + ".expert_feed_forward_length", u32(c.get_int("intermediate_size")));
    w.set_u32(a + ".attention.sliding_window", u32(c.get_int("sliding_window")));
    w.set_u32(a + ".expert_count", u32(c.get_int("num_local_experts")));
    w.set_u32(a + ".expert_used_count", u32(c.get_int("num_experts_per_tok")));
    if (c.has("rope_scaling")) {
        const nlohmann::json& r = c.json()["rope_scaling"];
        if (r.value("rope_type", r.value("type", "")) != "yarn") refuse("rope_scaling other than yarn");
        w.set_string(a + ".rope.scaling.type", "yarn");
        w.set_f32(a + ".rope.scaling.factor", r.value("factor", 1.0f));
        w.set_u32(a + ".rope.scaling.original_context_length", u32(r.value("original_max_position_embeddings", 4096)));
    }
}

// Columns `parity` (0: gate, 1: up) of gate_up_proj [E, hidden, 2 inter], output-major: [E, inter, hidden].
Tensor split_gate_up(const Tensor& gate_up, int64_t parity) {
    const int64_t e = gate_up.dim(0), hidden = gate_up.dim(1), inter = gate_up.dim(2) / 2;
    Tensor out(DType::kF32, {e, inter, hidden});
    for (int64_t x = 0; x < e; ++x) {
        for (int64_t r = 0; r < inter; ++r) {
            for (int64_t c = 0; c < hidden; ++c) {
                out.as<float>()[(x * inter + r) * hidden + c] =
                    gate_up.as<float>()[(x * hidden + c) * 2 * inter + 2 * r + parity];
            }
        }
    }
    return out;
}

// Columns `parity` of gate_up_proj_bias [E, 2 inter]: [E, inter].
Tensor split_gate_up_bias(const Tensor& bias, int64_t parity) {
    const int64_t e = bias.dim(0), inter = bias.dim(1) / 2;
    Tensor out(DType::kF32, {e, inter});
    for (int64_t i = 0; i < e * inter; ++i) out.as<float>()[i] = bias.as<float>()[2 * i + parity];
    return out;
}

// down_proj [E, inter, hidden] output-major: [E, hidden, inter].
Tensor transpose_down(const Tensor& down) {
    const int64_t e = down.dim(0), inter = down.dim(1), hidden = down.dim(2);
    Tensor out(DType::kF32, {e, hidden, inter});
    for (int64_t x = 0; x < e; ++x) {
        for (int64_t r = 0; r < inter; ++r) {
            for (int64_t c = 0; c < hidden; ++c) {
                out.as<float>()[(x * hidden + c) * inter + r] = down.as<float>()[(x * inter + r) * hidden + c];
            }
        }
    }
    return out;
}

void add_expert_entries(std::vector<GgufTensorEntry>& t, const std::string& b, const std::string& p, int64_t experts) {
    const std::string stacked = p + "mlp.experts.";
    for (int64_t parity : {0, 1}) {
        const std::string proj = parity == 0 ? "gate" : "up";
        GgufTensorEntry w =
            gguf_stacked_experts(fmt::format("{}ffn_{}_exps.weight", b, proj), p, proj + "_proj", experts);
        w.convert = [stacked, parity](const io::WeightSource& s) {
            return split_gate_up(s.load_f32(stacked + "gate_up_proj"), parity);
        };
        t.push_back(std::move(w));
        GgufTensorEntry bias{fmt::format("{}ffn_{}_exps.bias", b, proj), {stacked + proj + "_proj_bias"}};
        bias.convert = [stacked, parity](const io::WeightSource& s) {
            return split_gate_up_bias(s.load_f32(stacked + "gate_up_proj_bias"), parity);
        };
        t.push_back(std::move(bias));
    }
    GgufTensorEntry down = gguf_stacked_experts(b + "ffn_down_exps.weight", p, "down_proj", experts);
    down.convert = [stacked](const io::WeightSource& s) { return transpose_down(s.load_f32(stacked + "down_proj")); };
    t.push_back(std::move(down));
    t.push_back({b + "ffn_down_exps.bias", {stacked + "down_proj_bias"}});
}

std::vector<GgufTensorEntry> gpt_oss_tensors(const io::HfConfig& config) {
    const int64_t layers = config.get_int("num_hidden_layers");
    const int64_t experts = config.get_int("num_local_experts");
    std::vector<GgufTensorEntry> t;
    gguf_embedding_entry(t);
    for (int64_t i = 0; i < layers; ++i) {
        const std::string b = fmt::format("blk.{}.", i);
        const std::string p = fmt::format("model.layers.{}.", i);
        t.push_back({b + "attn_norm.weight", {p + "input_layernorm.weight"}});
        gguf_attention_entries(t, b, p, true, true);
        t.push_back({b + "attn_sinks.weight", {p + "self_attn.sinks"}});
        t.push_back({b + "post_attention_norm.weight", {p + "post_attention_layernorm.weight"}});
        t.push_back({b + "ffn_gate_inp.weight", {p + "mlp.router.weight"}});
        t.push_back({b + "ffn_gate_inp.bias", {p + "mlp.router.bias"}});
        add_expert_entries(t, b, p, experts);
    }
    gguf_output_entries(t, config);
    return t;
}

}  // namespace

const GgufArchitecture& gguf_gpt_oss() {
    static const GgufArchitecture a{"gpt-oss", "gpt_oss", &gpt_oss_config, &gpt_oss_metadata, &gpt_oss_tensors};
    return a;
}

}  // namespace moeserve::model
