// GGUF architecture glm4moe <-> model_type glm4_moe (gguf_arch.h): GLM-4.5 / 4.6 / 4.5-Air as
// llama.cpp writes them. block_count counts the multi-token-prediction layers too
// (nextn_predict_layers), which moeserve does not run; the routing is sigmoid with the correction
// bias (exp_probs_b) over one group, as llama.cpp runs it.
#include <fmt/format.h>

#include "moeserve/core/error.h"
#include "moeserve/model/formats/gguf_arch.h"

namespace moeserve::model {

namespace {

constexpr int64_t kSigmoidGating = 2;  // llama.cpp's LLAMA_EXPERT_GATING_FUNC_TYPE_SIGMOID

nlohmann::json glm4moe_config(const io::GgufCheckpoint& file, const std::string& a) {
    const io::GgufHeader& h = file.metadata();
    const int64_t nextn = gguf_int_or(h, a + ".nextn_predict_layers", 0);
    if (gguf_int_or(h, a + ".expert_gating_func", kSigmoidGating) != kSigmoidGating) {
        raise(ErrorCode::kUnsupported, "{}: {}.expert_gating_func {} is not supported (glm4moe routes by sigmoid)",
              h.file, a, h.get_int(a + ".expert_gating_func"));
    }
    nlohmann::json c = gguf_gqa_config(file, a, "glm4_moe", "Glm4MoeForCausalLM", 10000.0);
    const int64_t head_dim = c.at("head_dim");
    const int64_t rotary = gguf_int_or(h, a + ".rope.dimension_count", head_dim / 2);
    const io::GgufValue* norm = h.find(a + ".expert_weights_norm");
    c.update({
        {"num_hidden_layers", h.get_int(a + ".block_count") - nextn},
        {"num_nextn_predict_layers", nextn},
        {"partial_rotary_factor", static_cast<double>(rotary) / static_cast<double>(head_dim)},
        {"n_routed_experts", h.get_int(a + ".expert_count")},
        {"num_experts_per_tok", h.get_int(a + ".expert_used_count")},
        {"n_shared_experts", h.get_int(a + ".expert_shared_count")},
        {"moe_intermediate_size", h.get_int(a + ".expert_feed_forward_length")},
        {"intermediate_size", h.get_int(a + ".feed_forward_length")},
        {"first_k_dense_replace", gguf_int_or(h, a + ".leading_dense_block_count", 0)},
        {"routed_scaling_factor", gguf_float_or(h, a + ".expert_weights_scale", 1.0)},
        {"norm_topk_prob", norm != nullptr && h.get_bool(a + ".expert_weights_norm")},
        {"n_group", 1},
        {"topk_group", 1},
        {"attention_bias", file.contains("blk.0.attn_q.bias")},
        {"use_qk_norm", file.contains("blk.0.attn_q_norm.weight")},
    });
    return c;
}

void glm4moe_metadata(const io::HfConfig& c, const std::string& a, io::GgufWriter& w) {
    const auto refuse = [&](const std::string& what) {
        raise(ErrorCode::kUnsupported, "{}: llama.cpp's glm4moe {}", c.label(), what);
    };
    if (c.get_int("n_group", 1) != 1) refuse("routes over one group; make it with --set n_group=1 --set topk_group=1");
    if (c.has("rope_scaling")) refuse("is written without rope_scaling here");
    const auto u32 = [](int64_t v) { return static_cast<uint32_t>(v); };
    gguf_set_gqa_metadata(c, a, 10000.0, w);
    const int64_t head_dim = c.get_int("head_dim", c.get_int("hidden_size") / c.get_int("num_attention_heads"));
    const auto rotary = static_cast<int64_t>(static_cast<double>(head_dim) * c.get_float("partial_rotary_factor", 0.5));
    w.set_u32(a + ".rope.dimension_count", u32(rotary));
    w.set_u32(a + ".expert_count", u32(c.get_int("n_routed_experts")));
    w.set_u32(a + ".expert_used_count", u32(c.get_int("num_experts_per_tok")));
    w.set_u32(a + ".expert_shared_count", u32(c.get_int("n_shared_experts")));
    w.set_u32(a + ".expert_feed_forward_length", u32(c.get_int("moe_intermediate_size")));
    w.set_u32(a + ".leading_dense_block_count", u32(c.get_int("first_k_dense_replace", 1)));
    w.set_f32(a + ".expert_weights_scale", static_cast<float>(c.get_float("routed_scaling_factor", 1.0)));
    w.set_bool(a + ".expert_weights_norm", c.get_bool("norm_topk_prob", true));
    w.set_u32(a + ".expert_gating_func", u32(kSigmoidGating));
}

void add_mlp(std::vector<GgufTensorEntry>& t, const std::string& b, const std::string& hf_prefix,
             const std::string& suffix) {
    for (const char* proj : {"gate", "up", "down"}) {
        t.push_back(
            {fmt::format("{}ffn_{}{}.weight", b, proj, suffix), {fmt::format("{}{}_proj.weight", hf_prefix, proj)}});
    }
}

std::vector<GgufTensorEntry> glm4moe_tensors(const io::HfConfig& config) {
    const int64_t layers = config.get_int("num_hidden_layers");
    const int64_t experts = config.get_int("n_routed_experts");
    const int64_t dense = config.get_int("first_k_dense_replace", 1);
    const bool bias = config.get_bool("attention_bias", false), qk_norm = config.get_bool("use_qk_norm", false);
    std::vector<GgufTensorEntry> t;
    gguf_embedding_entry(t);
    for (int64_t i = 0; i < layers; ++i) {
        const std::string b = fmt::format("blk.{}.", i);
        const std::string p = fmt::format("model.layers.{}.", i);
        t.push_back({b + "attn_norm.weight", {p + "input_layernorm.weight"}});
        gguf_attention_entries(t, b, p, bias, false);
        if (qk_norm) {
            t.push_back({b + "attn_q_norm.weight", {p + "self_attn.q_norm.weight"}});
            t.push_back({b + "attn_k_norm.weight", {p + "self_attn.k_norm.weight"}});
        }
        t.push_back({b + "post_attention_norm.weight", {p + "post_attention_layernorm.weight"}});
        if (i < dense) {
            add_mlp(t, b, p + "mlp.", "");
            continue;
        }
        t.push_back({b + "ffn_gate_inp.weight", {p + "mlp.gate.weight"}});
        t.push_back({b + "exp_probs_b.bias", {p + "mlp.gate.e_score_correction_bias"}});
        t.push_back(gguf_stacked_experts(b + "ffn_gate_exps.weight", p, "gate_proj", experts));
        t.push_back(gguf_stacked_experts(b + "ffn_up_exps.weight", p, "up_proj", experts));
        t.push_back(gguf_stacked_experts(b + "ffn_down_exps.weight", p, "down_proj", experts));
        add_mlp(t, b, p + "mlp.shared_experts.", "_shexp");
    }
    gguf_output_entries(t, config);
    return t;
}

}  // namespace

const GgufArchitecture& gguf_glm4moe() {
    static const GgufArchitecture a{"glm4moe", "glm4_moe", &glm4moe_config, &glm4moe_metadata, &glm4moe_tensors};
    return a;
}

}  // namespace moeserve::model
