// GGUF architecture qwen3moe <-> model_type qwen3_moe (gguf_arch.h).
#include <fmt/format.h>

#include "moeserve/core/error.h"
#include "moeserve/model/formats/gguf_arch.h"

namespace moeserve::model {

namespace {

nlohmann::json qwen3moe_config(const io::GgufCheckpoint& file, const std::string& a) {
    const io::GgufHeader& h = file.metadata();
    nlohmann::json c = gguf_gqa_config(file, a, "qwen3_moe", "Qwen3MoeForCausalLM", 10000.0);
    const int64_t expert_ff = h.get_int(a + ".expert_feed_forward_length");
    c.update({
        {"num_experts", h.get_int(a + ".expert_count")},
        {"num_experts_per_tok", h.get_int(a + ".expert_used_count")},
        {"moe_intermediate_size", expert_ff},
        {"intermediate_size", gguf_int_or(h, a + ".feed_forward_length", expert_ff)},
        // llama.cpp's qwen3moe graph: every layer MoE, softmax top-k renormalized, no biases
        // besides an optional attention output one (not run here, refused by the tensor check)
        {"decoder_sparse_step", 1},
        {"mlp_only_layers", nlohmann::json::array()},
        {"norm_topk_prob", true},
        {"attention_bias", file.contains("blk.0.attn_q.bias")},
    });
    return c;
}

void qwen3moe_metadata(const io::HfConfig& c, const std::string& a, io::GgufWriter& w) {
    if (!c.get_int_list("mlp_only_layers").empty() || c.get_int("decoder_sparse_step", 1) != 1) {
        raise(ErrorCode::kUnsupported,
              "{}: llama.cpp's qwen3moe has a MoE block on every layer; this config has dense "
              "layers (mlp_only_layers / decoder_sparse_step); make it with --set mlp_only_layers=[]",
              c.label());
    }
    if (!c.get_bool("norm_topk_prob", false)) {
        raise(ErrorCode::kUnsupported,
              "{}: llama.cpp's qwen3moe renormalizes the top-k weights; norm_topk_prob must "
              "be true",
              c.label());
    }
    if (c.has("rope_scaling")) {
        raise(ErrorCode::kUnsupported, "{}: writing rope_scaling to GGUF is not supported", c.label());
    }
    const auto u32 = [](int64_t v) { return static_cast<uint32_t>(v); };
    gguf_set_gqa_metadata(c, a, 10000.0, w);
    w.set_u32(a + ".expert_used_count", u32(c.get_int("num_experts_per_tok")));
    w.set_u32(a + ".expert_count", u32(c.get_int("num_experts")));
    w.set_u32(a + ".expert_feed_forward_length", u32(c.get_int("moe_intermediate_size")));
}

std::vector<GgufTensorEntry> qwen3moe_tensors(const io::HfConfig& config) {
    const int64_t layers = config.get_int("num_hidden_layers");
    const int64_t experts = config.get_int("num_experts");
    const bool bias = config.get_bool("attention_bias", false);
    std::vector<GgufTensorEntry> t;
    gguf_embedding_entry(t);
    for (int64_t i = 0; i < layers; ++i) {
        const std::string b = fmt::format("blk.{}.", i);
        const std::string p = fmt::format("model.layers.{}.", i);
        t.push_back({b + "attn_norm.weight", {p + "input_layernorm.weight"}});
        gguf_attention_entries(t, b, p, bias, false);
        t.push_back({b + "attn_q_norm.weight", {p + "self_attn.q_norm.weight"}});
        t.push_back({b + "attn_k_norm.weight", {p + "self_attn.k_norm.weight"}});
        t.push_back({b + "ffn_norm.weight", {p + "post_attention_layernorm.weight"}});
        t.push_back({b + "ffn_gate_inp.weight", {p + "mlp.gate.weight"}});
        t.push_back(gguf_stacked_experts(b + "ffn_gate_exps.weight", p, "gate_proj", experts));
        t.push_back(gguf_stacked_experts(b + "ffn_up_exps.weight", p, "up_proj", experts));
        t.push_back(gguf_stacked_experts(b + "ffn_down_exps.weight", p, "down_proj", experts));
    }
    gguf_output_entries(t, config);
    return t;
}

}  // namespace

const GgufArchitecture& gguf_qwen3moe() {
    static const GgufArchitecture a{"qwen3moe", "qwen3_moe", &qwen3moe_config, &qwen3moe_metadata, &qwen3moe_tensors};
    return a;
}

}  // namespace moeserve::model
