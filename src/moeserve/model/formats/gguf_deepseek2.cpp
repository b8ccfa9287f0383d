// GGUF architecture deepseek2 (DeepSeek-V2 / V3 / R1 files) <-> model_type deepseek_v3
// (gguf_arch.h). The keys and tensor names are llama.cpp's: MLA as q_a / q_b (or q), kv_a_mqa and
// kv_b split per head into attn_k_b / attn_v_b (gguf_kv_b.h), the router's correction bias as
// exp_probs_b, the shared experts as *_shexp, leading dense layers.
#include <fmt/format.h>

#include "moeserve/core/error.h"
#include "moeserve/model/formats/gguf_arch.h"

namespace moeserve::model {

namespace {

// llama.cpp's expert_gating_func values
constexpr int64_t kGatingSoftmax = 1;
constexpr int64_t kGatingSigmoid = 2;

std::string scoring_func(const io::GgufHeader& h, const std::string& a) {
    // absent in DeepSeek-V2 files written before the key existed: softmax, as llama.cpp reads them
    const int64_t gating = gguf_int_or(h, a + ".expert_gating_func", kGatingSoftmax);
    if (gating == kGatingSoftmax) return "softmax";
    if (gating == kGatingSigmoid) return "sigmoid";
    raise(ErrorCode::kUnsupported, "{}: {}.expert_gating_func {} is not supported (1 softmax, 2 sigmoid)", h.file, a,
          gating);
}

nlohmann::json deepseek2_config(const io::GgufCheckpoint& file, const std::string& a) {
    const io::GgufHeader& h = file.metadata();
    const int64_t heads = h.get_int(a + ".attention.head_count");
    const int64_t rope_dim = h.get_int(a + ".rope.dimension_count");
    // MLA files (llama.cpp since it split kv_b) give the per-head sizes as *_mla; older ones as
    // key_length / value_length
    const bool mla_keys = h.find(a + ".attention.key_length_mla") != nullptr;
    const int64_t qk_head = h.get_int(a + (mla_keys ? ".attention.key_length_mla" : ".attention.key_length"));
    const int64_t v_head = h.get_int(a + (mla_keys ? ".attention.value_length_mla" : ".attention.value_length"));
    if (qk_head <= rope_dim) {
        raise(ErrorCode::kInvalidModel, "{}: the key head size {} must exceed {}.rope.dimension_count {}", h.file,
              qk_head, a, rope_dim);
    }
    const int64_t nextn = gguf_int_or(h, a + ".nextn_predict_layers", 0);
    const int64_t n_group = gguf_int_or(h, a + ".expert_group_count", 1);
    const int64_t dense = gguf_int_or(h, a + ".leading_dense_block_count", 0);
    const bool bias = file.contains(fmt::format("blk.{}.exp_probs_b.bias", dense));
    nlohmann::json c = {
        {"model_type", "deepseek_v3"},
        {"architectures", {"DeepseekV3ForCausalLM"}},
        {"vocab_size", gguf_vocab_size(file)},
        {"hidden_size", h.get_int(a + ".embedding_length")},
        {"num_hidden_layers", h.get_int(a + ".block_count") - nextn},
        {"num_nextn_predict_layers", nextn},
        {"num_attention_heads", heads},
        {"num_key_value_heads", heads},
        {"q_lora_rank", h.find(a + ".attention.q_lora_rank") != nullptr
                            ? nlohmann::json(h.get_int(a + ".attention.q_lora_rank"))
                            : nlohmann::json(nullptr)},
        {"kv_lora_rank", h.get_int(a + ".attention.kv_lora_rank")},
        {"qk_nope_head_dim", qk_head - rope_dim},
        {"qk_rope_head_dim", rope_dim},
        {"v_head_dim", v_head},
        {"intermediate_size", h.get_int(a + ".feed_forward_length")},
        {"moe_intermediate_size", h.get_int(a + ".expert_feed_forward_length")},
        {"n_routed_experts", h.get_int(a + ".expert_count")},
        {"num_experts_per_tok", h.get_int(a + ".expert_used_count")},
        {"n_shared_experts", gguf_int_or(h, a + ".expert_shared_count", 0)},
        {"first_k_dense_replace", dense},
        {"moe_layer_freq", 1},
        {"routed_scaling_factor", gguf_float_or(h, a + ".expert_weights_scale", 1.0)},
        {"norm_topk_prob", h.find(a + ".expert_weights_norm") != nullptr && h.get_bool(a + ".expert_weights_norm")},
        {"scoring_func", scoring_func(h, a)},
        {"n_group", n_group},
        {"topk_group", gguf_int_or(h, a + ".expert_group_used_count", n_group)},
        {"topk_method", bias ? "noaux_tc" : (n_group > 1 ? "group_limited_greedy" : "greedy")},
        {"hidden_act", "silu"},
        {"max_position_embeddings", h.get_int(a + ".context_length")},
        {"rms_norm_eps", h.get_float(a + ".attention.layer_norm_rms_epsilon")},
        {"rope_theta", gguf_float_or(h, a + ".rope.freq_base", 10000.0)},
        // llama.cpp rotates adjacent pairs (its "norm" rope) on the checkpoint's own weights, as
        // DeepSeek's interleaved rope does
        {"rope_interleave", true},
        {"attention_bias", false},
        {"tie_word_embeddings", !file.contains("output.weight")},
        {"torch_dtype", "bfloat16"},
    };
    if (auto rope = gguf_rope_scaling(h, a, true)) c["rope_scaling"] = std::move(*rope);
    gguf_special_token_ids(h, c);
    return c;
}

void check_writable(const io::HfConfig& c) {
    const auto refuse = [&](const char* why) {
        raise(ErrorCode::kUnsupported, "{}: cannot be written as a deepseek2 GGUF: {}", c.label(), why);
    };
    if (c.get_int("moe_layer_freq", 1) != 1) refuse("moe_layer_freq != 1 (llama.cpp has MoE on every later layer)");
    if (c.get_bool("attention_bias", false)) refuse("attention_bias (llama.cpp's deepseek2 has none)");
    if (!c.get_bool("rope_interleave", true)) refuse("rope_interleave false");
    if (c.has("rope_scaling")) {
        const nlohmann::json& r = c.json()["rope_scaling"];
        const std::string type = r.value("rope_type", r.value("type", std::string("default")));
        if (type != "yarn") refuse("rope_scaling other than yarn");
        if (r.value("mscale", 1.0) != r.value("mscale_all_dim", 0.0)) refuse("yarn mscale != mscale_all_dim");
    }
}

void deepseek2_metadata(const io::HfConfig& c, const std::string& a, io::GgufWriter& w) {
    check_writable(c);
    const auto u32 = [](int64_t v) { return static_cast<uint32_t>(v); };
    const int64_t rope = c.get_int("qk_rope_head_dim");
    const int64_t kv_lora = c.get_int("kv_lora_rank");
    w.set_u32(a + ".context_length", u32(c.get_int("max_position_embeddings")));
    w.set_u32(a + ".embedding_length", u32(c.get_int("hidden_size")));
    // The MTP layers (the draft head) are the last blocks, as llama.cpp counts them.
    const int64_t nextn = c.get_int("num_nextn_predict_layers", 0);
    w.set_u32(a + ".block_count", u32(c.get_int("num_hidden_layers") + nextn));
    if (nextn > 0) w.set_u32(a + ".nextn_predict_layers", u32(nextn));
    w.set_u32(a + ".feed_forward_length", u32(c.get_int("intermediate_size")));
    w.set_u32(a + ".attention.head_count", u32(c.get_int("num_attention_heads")));
    w.set_u32(a + ".attention.head_count_kv", 1);  // MLA as llama.cpp runs it: one latent "head"
    w.set_f32(a + ".rope.freq_base", static_cast<float>(c.get_float("rope_theta", 10000.0)));
    w.set_f32(a + ".attention.layer_norm_rms_epsilon", static_cast<float>(c.get_float("rms_norm_eps")));
    w.set_u32(a + ".expert_used_count", u32(c.get_int("num_experts_per_tok")));
    w.set_u32(a + ".leading_dense_block_count", u32(c.get_int("first_k_dense_replace")));
    w.set_u32(a + ".vocab_size", u32(c.get_int("vocab_size")));
    if (const auto q = c.get_optional_int("q_lora_rank")) w.set_u32(a + ".attention.q_lora_rank", u32(*q));
    w.set_u32(a + ".attention.kv_lora_rank", u32(kv_lora));
    w.set_u32(a + ".attention.key_length", u32(kv_lora + rope));
    w.set_u32(a + ".attention.value_length", u32(kv_lora));
    w.set_u32(a + ".attention.key_length_mla", u32(c.get_int("qk_nope_head_dim") + rope));
    w.set_u32(a + ".attention.value_length_mla", u32(c.get_int("v_head_dim")));
    w.set_u32(a + ".expert_feed_forward_length", u32(c.get_int("moe_intermediate_size")));
    w.set_u32(a + ".expert_count", u32(c.get_int("n_routed_experts")));
    w.set_u32(a + ".expert_shared_count", u32(c.get_int("n_shared_experts")));
    w.set_f32(a + ".expert_weights_scale", static_cast<float>(c.get_float("routed_scaling_factor", 1.0)));
    w.set_bool(a + ".expert_weights_norm", c.get_bool("norm_topk_prob", false));
    w.set_u32(a + ".expert_gating_func",
              c.get_string("scoring_func", "softmax") == "sigmoid" ? kGatingSigmoid : kGatingSoftmax);
    w.set_u32(a + ".expert_group_count", u32(c.get_int("n_group", 1)));
    w.set_u32(a + ".expert_group_used_count", u32(c.get_int("topk_group", 1)));
    w.set_u32(a + ".rope.dimension_count", u32(rope));
    if (c.has("rope_scaling")) {
        const nlohmann::json& r = c.json()["rope_scaling"];
        w.set_string(a + ".rope.scaling.type", "yarn");
        w.set_f32(a + ".rope.scaling.factor", r.value("factor", 1.0f));
        w.set_u32(a + ".rope.scaling.original_context_length",
                  u32(r.value("original_max_position_embeddings", int64_t{0})));
        w.set_f32(a + ".rope.scaling.yarn_log_multiplier", 0.1f * r.value("mscale_all_dim", 0.0f));
        w.set_f32(a + ".rope.scaling.yarn_beta_fast", r.value("beta_fast", 32.0f));
        w.set_f32(a + ".rope.scaling.yarn_beta_slow", r.value("beta_slow", 1.0f));
    }
}

void attention_tensors(const io::HfConfig& c, const std::string& b, const std::string& p,
                       std::vector<GgufTensorEntry>& t) {
    const std::string s = p + "self_attn.";
    t.push_back({b + "attn_norm.weight", {p + "input_layernorm.weight"}});
    if (c.get_optional_int("q_lora_rank")) {
        t.push_back({b + "attn_q_a.weight", {s + "q_a_proj.weight"}});
        t.push_back({b + "attn_q_a_norm.weight", {s + "q_a_layernorm.weight"}});
        t.push_back({b + "attn_q_b.weight", {s + "q_b_proj.weight"}});
    } else {
        t.push_back({b + "attn_q.weight", {s + "q_proj.weight"}});
    }
    t.push_back({b + "attn_kv_a_mqa.weight", {s + "kv_a_proj_with_mqa.weight"}});
    t.push_back({b + "attn_kv_a_norm.weight", {s + "kv_a_layernorm.weight"}});
    const int64_t heads = c.get_int("num_attention_heads");
    const int64_t nope = c.get_int("qk_nope_head_dim");
    t.push_back({b + "attn_k_b.weight", {s + "kv_b_proj.weight"}, false, true, KvbPart::kKeys, heads, nope});
    t.push_back({b + "attn_v_b.weight", {s + "kv_b_proj.weight"}, false, true, KvbPart::kValues, heads, nope});
    t.push_back({b + "attn_output.weight", {s + "o_proj.weight"}});
    t.push_back({b + "ffn_norm.weight", {p + "post_attention_layernorm.weight"}});
}

void moe_tensors(const io::HfConfig& c, const std::string& b, const std::string& p, std::vector<GgufTensorEntry>& t) {
    t.push_back({b + "ffn_gate_inp.weight", {p + "mlp.gate.weight"}});
    if (c.get_string("topk_method", "") == "noaux_tc") {
        t.push_back({b + "exp_probs_b.bias", {p + "mlp.gate.e_score_correction_bias"}});
    }
    const int64_t experts = c.get_int("n_routed_experts");
    t.push_back(gguf_stacked_experts(b + "ffn_gate_exps.weight", p, "gate_proj", experts));
    t.push_back(gguf_stacked_experts(b + "ffn_up_exps.weight", p, "up_proj", experts));
    t.push_back(gguf_stacked_experts(b + "ffn_down_exps.weight", p, "down_proj", experts));
    if (c.get_int("n_shared_experts", 0) > 0) {
        for (const char* proj : {"gate", "up", "down"}) {
            t.push_back({fmt::format("{}ffn_{}_shexp.weight", b, proj),
                         {fmt::format("{}mlp.shared_experts.{}_proj.weight", p, proj)}});
        }
    }
}

// The first MTP layer (block num_hidden_layers; the draft head of --speculative-config
// deepseek_mtp): a decoder layer with its nextn tensors, llama.cpp's names. Its own copy of the
// embedding (nextn.embed_tokens) is not read: the draft head uses the model's.
void mtp_tensors(const io::HfConfig& c, int64_t layer, std::vector<GgufTensorEntry>& t) {
    const std::string b = fmt::format("blk.{}.", layer);
    const std::string p = fmt::format("model.layers.{}.", layer);
    attention_tensors(c, b, p, t);
    moe_tensors(c, b, p, t);
    t.push_back({b + "nextn.eh_proj.weight", {p + "eh_proj.weight"}});
    t.push_back({b + "nextn.enorm.weight", {p + "enorm.weight"}});
    t.push_back({b + "nextn.hnorm.weight", {p + "hnorm.weight"}});
    t.push_back({b + "nextn.shared_head_norm.weight", {p + "shared_head.norm.weight"}});
    t.push_back({b + "nextn.shared_head_head.weight", {p + "shared_head.head.weight"}});
}

std::vector<GgufTensorEntry> deepseek2_tensors(const io::HfConfig& c) {
    const int64_t layers = c.get_int("num_hidden_layers");
    const int64_t dense = c.get_int("first_k_dense_replace", 0);
    std::vector<GgufTensorEntry> t;
    t.push_back({"token_embd.weight", {"model.embed_tokens.weight"}});
    for (int64_t i = 0; i < layers; ++i) {
        const std::string b = fmt::format("blk.{}.", i);
        const std::string p = fmt::format("model.layers.{}.", i);
        attention_tensors(c, b, p, t);
        if (i < dense) {
            for (const char* proj : {"gate", "up", "down"}) {
                t.push_back({fmt::format("{}ffn_{}.weight", b, proj), {fmt::format("{}mlp.{}_proj.weight", p, proj)}});
            }
        } else {
            moe_tensors(c, b, p, t);
        }
    }
    t.push_back({"output_norm.weight", {"model.norm.weight"}});
    t.push_back({"output.weight", {"lm_head.weight"}, false, !c.get_bool("tie_word_embeddings", false)});
    if (c.get_int("num_nextn_predict_layers", 0) > 0) mtp_tensors(c, layers, t);
    return t;
}

}  // namespace

const GgufArchitecture& gguf_deepseek2() {
    static const GgufArchitecture a{"deepseek2",         "deepseek_v3",      &deepseek2_config,
                                    &deepseek2_metadata, &deepseek2_tensors, {"kimi_k2"}};
    return a;
}

}  // namespace moeserve::model
