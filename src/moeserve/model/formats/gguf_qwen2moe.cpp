// GGUF architecture qwen2moe <-> model_type qwen2_moe (gguf_arch.h): Qwen1.5-MoE / Qwen2-MoE as
// llama.cpp runs them, a MoE block on every layer (softmax top-k, not renormalized), q/k/v biases,
// and the shared expert with its sigmoid gate (ffn_*_shexp, ffn_gate_inp_shexp).
#include <fmt/format.h>

#include <algorithm>

#include "moeserve/core/error.h"
#include "moeserve/model/formats/gguf_arch.h"

namespace moeserve::model {

namespace {

nlohmann::json qwen2moe_config(const io::GgufCheckpoint& file, const std::string& a) {
    const io::GgufHeader& h = file.metadata();
    nlohmann::json c = gguf_gqa_config(file, a, "qwen2_moe", "Qwen2MoeForCausalLM", 10000.0);
    if (c.at("head_dim").get<int64_t>() * c.at("num_attention_heads").get<int64_t>() != c.at("hidden_size")) {
        raise(ErrorCode::kUnsupported, "{}: {}.attention.key_length differs from embedding_length / head_count", h.file,
              a);
    }
    c.erase("head_dim");  // Qwen2-MoE's config has none: hidden_size / heads
    const int64_t expert_ff = h.get_int(a + ".expert_feed_forward_length");
    c.update({
        {"num_experts", h.get_int(a + ".expert_count")},
        {"num_experts_per_tok", h.get_int(a + ".expert_used_count")},
        {"moe_intermediate_size", expert_ff},
        {"shared_expert_intermediate_size", h.get_int(a + ".expert_shared_feed_forward_length")},
        {"intermediate_size", gguf_int_or(h, a + ".feed_forward_length", expert_ff)},
        // llama.cpp's qwen2moe graph: every layer MoE, softmax top-k weights not renormalized
        {"decoder_sparse_step", 1},
        {"mlp_only_layers", nlohmann::json::array()},
        {"norm_topk_prob", false},
    });
    return c;
}

void qwen2moe_metadata(const io::HfConfig& c, const std::string& a, io::GgufWriter& w) {
    const auto refuse = [&](const std::string& what) {
        raise(ErrorCode::kUnsupported, "{}: llama.cpp's qwen2moe {}", c.label(), what);
    };
    if (!c.get_int_list("mlp_only_layers").empty() || c.get_int("decoder_sparse_step", 1) != 1) {
        refuse("has a MoE block on every layer; make it with --set mlp_only_layers=[]");
    }
    if (c.get_bool("norm_topk_prob", false)) refuse("does not renormalize the top-k weights (norm_topk_prob)");
    if (c.has("rope_scaling")) refuse("is written without rope_scaling here");
    const auto u32 = [](int64_t v) { return static_cast<uint32_t>(v); };
    gguf_set_gqa_metadata(c, a, 10000.0, w);
    w.set_u32(a + ".expert_count", u32(c.get_int("num_experts")));
    w.set_u32(a + ".expert_used_count", u32(c.get_int("num_experts_per_tok")));
    w.set_u32(a + ".expert_feed_forward_length", u32(c.get_int("moe_intermediate_size")));
    w.set_u32(a + ".expert_shared_feed_forward_length", u32(c.get_int("shared_expert_intermediate_size")));
}

std::vector<GgufTensorEntry> qwen2moe_tensors(const io::HfConfig& config) {
    const int64_t layers = config.get_int("num_hidden_layers");
    const int64_t experts = config.get_int("num_experts");
    std::vector<GgufTensorEntry> t;
    gguf_embedding_entry(t);
    for (int64_t i = 0; i < layers; ++i) {
        const std::string b = fmt::format("blk.{}.", i);
        const std::string p = fmt::format("model.layers.{}.", i);
        t.push_back({b + "attn_norm.weight", {p + "input_layernorm.weight"}});
        gguf_attention_entries(t, b, p, true, false);
        t.push_back({b + "ffn_norm.weight", {p + "post_attention_layernorm.weight"}});
        t.push_back({b + "ffn_gate_inp.weight", {p + "mlp.gate.weight"}});
        t.push_back(gguf_stacked_experts(b + "ffn_gate_exps.weight", p, "gate_proj", experts));
        t.push_back(gguf_stacked_experts(b + "ffn_up_exps.weight", p, "up_proj", experts));
        t.push_back(gguf_stacked_experts(b + "ffn_down_exps.weight", p, "down_proj", experts));
        // [1, hidden] in the checkpoint, the vector [hidden] llama.cpp reads (F32: rank 1)
        GgufTensorEntry gate{b + "ffn_gate_inp_shexp.weight", {p + "mlp.shared_expert_gate.weight"}};
        gate.convert = [name = gate.names[0]](const io::WeightSource& s) {
            Tensor g = s.load_f32(name);
            Tensor v(DType::kF32, {g.numel()});
            std::copy_n(g.as<float>(), g.numel(), v.as<float>());
            return v;
        };
        t.push_back(std::move(gate));
        t.push_back({b + "ffn_gate_shexp.weight", {p + "mlp.shared_expert.gate_proj.weight"}});
        t.push_back({b + "ffn_up_shexp.weight", {p + "mlp.shared_expert.up_proj.weight"}});
        t.push_back({b + "ffn_down_shexp.weight", {p + "mlp.shared_expert.down_proj.weight"}});
    }
    gguf_output_entries(t, config);
    return t;
}

}  // namespace

const GgufArchitecture& gguf_qwen2moe() {
    static const GgufArchitecture a{"qwen2moe", "qwen2_moe", &qwen2moe_config, &qwen2moe_metadata, &qwen2moe_tensors};
    return a;
}

}  // namespace moeserve::model
