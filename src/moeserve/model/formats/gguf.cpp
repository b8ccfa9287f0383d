#include "moeserve/model/formats/gguf.h"

#include <fmt/format.h>

#include <map>

#include "moeserve/core/error.h"

namespace moeserve::model {

namespace {

// One GGUF architecture: its name in general.architecture, the model_type it loads as, and its
// hyperparameters as config.json fields (tensor names come from gguf_tensor_table).
struct GgufArchitecture {
    std::string gguf;
    std::string model_type;
    nlohmann::json (*config)(const io::GgufCheckpoint& file, const std::string& arch) = nullptr;
    void (*metadata)(const io::HfConfig& config, const std::string& arch, io::GgufWriter& writer) = nullptr;
};

// An integer key that may also be a per-layer array with one value (head_count_kv).
int64_t int_or_uniform_array(const io::GgufHeader& h, const std::string& key) {
    const io::GgufValue* v = h.find(key);
    if (v != nullptr && v->as_array() != nullptr) {
        const io::GgufArray& a = *v->as_array();
        const int64_t first = a.size() > 0 ? a.int_at(0).value_or(-1) : -1;
        for (size_t i = 0; i < a.size(); ++i) {
            if (first < 0 || a.int_at(i).value_or(-1) != first) {
                raise(ErrorCode::kUnsupported,
                      "{}: {} differs between layers (or is not an integer array); moeserve "
                      "runs one value for every layer",
                      h.file, key);
            }
        }
        if (first < 0) raise(ErrorCode::kInvalidModel, "{}: {} is an empty array", h.file, key);
        return first;
    }
    return h.get_int(key);
}

nlohmann::json qwen3moe_config(const io::GgufCheckpoint& file, const std::string& a) {
    const io::GgufHeader& h = file.metadata();
    if (!file.contains("token_embd.weight")) {
        raise(ErrorCode::kInvalidModel, "{}: tensor 'token_embd.weight' is missing (it gives the vocabulary size)",
              h.file);
    }
    const Shape& embd = file.info("token_embd.weight").shape;
    const int64_t hidden = h.get_int(a + ".embedding_length");
    const int64_t heads = h.get_int(a + ".attention.head_count");
    const int64_t head_dim =
        h.find(a + ".attention.key_length") != nullptr ? h.get_int(a + ".attention.key_length") : hidden / heads;
    if (h.find(a + ".attention.value_length") != nullptr && h.get_int(a + ".attention.value_length") != head_dim) {
        raise(ErrorCode::kUnsupported, "{}: {}.attention.value_length {} differs from key_length {}", h.file, a,
              h.get_int(a + ".attention.value_length"), head_dim);
    }
    const int64_t expert_ff = h.get_int(a + ".expert_feed_forward_length");
    nlohmann::json c = {
        {"model_type", "qwen3_moe"},
        {"architectures", {"Qwen3MoeForCausalLM"}},
        {"vocab_size", embd.rank() == 2 ? embd[0] : 0},
        {"hidden_size", hidden},
        {"num_hidden_layers", h.get_int(a + ".block_count")},
        {"num_attention_heads", heads},
        {"num_key_value_heads", int_or_uniform_array(h, a + ".attention.head_count_kv")},
        {"head_dim", head_dim},
        {"num_experts", h.get_int(a + ".expert_count")},
        {"num_experts_per_tok", h.get_int(a + ".expert_used_count")},
        {"moe_intermediate_size", expert_ff},
        {"intermediate_size",
         h.find(a + ".feed_forward_length") != nullptr ? h.get_int(a + ".feed_forward_length") : expert_ff},
        {"max_position_embeddings", h.get_int(a + ".context_length")},
        {"rms_norm_eps", h.get_float(a + ".attention.layer_norm_rms_epsilon")},
        {"rope_theta", h.find(a + ".rope.freq_base") != nullptr ? h.get_float(a + ".rope.freq_base") : 10000.0},
        // llama.cpp's qwen3moe graph: every layer MoE, softmax top-k renormalized, no biases
        // besides an optional attention output one (not run here, refused by the tensor check)
        {"decoder_sparse_step", 1},
        {"mlp_only_layers", nlohmann::json::array()},
        {"norm_topk_prob", true},
        {"attention_bias", file.contains("blk.0.attn_q.bias")},
        {"tie_word_embeddings", !file.contains("output.weight")},
        {"torch_dtype", "bfloat16"},
    };
    if (const io::GgufValue* v = h.find(a + ".rope.scaling.type")) {
        const std::string kind = v->as_string() != nullptr ? *v->as_string() : "";
        if (kind == "linear" || kind == "yarn") {
            nlohmann::json s = {{"rope_type", kind}, {"factor", h.get_float(a + ".rope.scaling.factor")}};
            if (kind == "yarn") {
                s["original_max_position_embeddings"] = h.get_int(a + ".rope.scaling.original_context_length");
            }
            c["rope_scaling"] = s;
        } else if (kind != "none") {
            raise(ErrorCode::kUnsupported, "{}: {}.rope.scaling.type '{}' is not supported (none, linear, yarn)",
                  h.file, a, io::gguf_printable(kind));
        }
    }
    for (const char* key : {"tokenizer.ggml.bos_token_id", "tokenizer.ggml.eos_token_id"}) {
        if (h.find(key) != nullptr) c[std::string(key).substr(15, 3) + "_token_id"] = h.get_int(key);
    }
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
    const int64_t heads = c.get_int("num_attention_heads");
    const int64_t head_dim = c.get_int("head_dim", c.get_int("hidden_size") / heads);
    w.set_u32(a + ".context_length", u32(c.get_int("max_position_embeddings")));
    w.set_u32(a + ".embedding_length", u32(c.get_int("hidden_size")));
    w.set_u32(a + ".block_count", u32(c.get_int("num_hidden_layers")));
    w.set_u32(a + ".feed_forward_length", u32(c.get_int("intermediate_size")));
    w.set_u32(a + ".attention.head_count", u32(heads));
    w.set_u32(a + ".attention.head_count_kv", u32(c.get_int("num_key_value_heads")));
    w.set_f32(a + ".rope.freq_base", static_cast<float>(c.get_float("rope_theta", 10000.0)));
    w.set_f32(a + ".attention.layer_norm_rms_epsilon", static_cast<float>(c.get_float("rms_norm_eps")));
    w.set_u32(a + ".expert_used_count", u32(c.get_int("num_experts_per_tok")));
    w.set_u32(a + ".attention.key_length", u32(head_dim));
    w.set_u32(a + ".attention.value_length", u32(head_dim));
    w.set_u32(a + ".expert_count", u32(c.get_int("num_experts")));
    w.set_u32(a + ".expert_feed_forward_length", u32(c.get_int("moe_intermediate_size")));
}

const std::vector<GgufArchitecture>& gguf_architectures() {
    static const std::vector<GgufArchitecture> table = {
        {"qwen3moe", "qwen3_moe", &qwen3moe_config, &qwen3moe_metadata},
    };
    return table;
}

const GgufArchitecture* find_by_model_type(const std::string& model_type) {
    for (const GgufArchitecture& a : gguf_architectures()) {
        if (a.model_type == model_type) return &a;
    }
    return nullptr;
}

}  // namespace

bool is_gguf_path(const std::filesystem::path& path) {
    std::error_code ec;
    return path.extension() == ".gguf" && !std::filesystem::is_directory(path, ec);
}

std::string gguf_architecture_of(const std::string& model_type) {
    const GgufArchitecture* a = find_by_model_type(model_type);
    return a != nullptr ? a->gguf : "";
}

nlohmann::json gguf_config_json(const io::GgufCheckpoint& file) {
    const io::GgufHeader& h = file.metadata();
    const std::string& arch = h.get_string("general.architecture");
    for (const GgufArchitecture& a : gguf_architectures()) {
        if (a.gguf == arch) return a.config(file, arch);
    }
    std::string names;
    for (const GgufArchitecture& a : gguf_architectures()) names += (names.empty() ? "" : ", ") + a.gguf;
    raise(ErrorCode::kUnsupported, "{}: general.architecture '{}' is not supported; supported: {}", h.file,
          io::gguf_printable(arch), names);
}

std::vector<GgufTensorEntry> gguf_tensor_table(const io::HfConfig& config) {
    const std::string model_type = config.get_string("model_type", "");
    if (find_by_model_type(model_type) == nullptr) {
        raise(ErrorCode::kUnsupported, "{}: model_type '{}' has no GGUF mapping (supported: qwen3_moe)", config.label(),
              model_type);
    }
    const int64_t layers = config.get_int("num_hidden_layers");
    const int64_t experts = config.get_int("num_experts");
    const bool bias = config.get_bool("attention_bias", false);
    std::vector<GgufTensorEntry> t;
    t.push_back({"token_embd.weight", {"model.embed_tokens.weight"}});
    for (int64_t i = 0; i < layers; ++i) {
        const std::string b = fmt::format("blk.{}.", i);
        const std::string p = fmt::format("model.layers.{}.", i);
        t.push_back({b + "attn_norm.weight", {p + "input_layernorm.weight"}});
        for (const auto& [g, hf] : std::vector<std::pair<std::string, std::string>>{
                 {"attn_q", "q_proj"}, {"attn_k", "k_proj"}, {"attn_v", "v_proj"}, {"attn_output", "o_proj"}}) {
            t.push_back({fmt::format("{}{}.weight", b, g), {fmt::format("{}self_attn.{}.weight", p, hf)}});
            if (bias && hf != "o_proj") {
                t.push_back({fmt::format("{}{}.bias", b, g), {fmt::format("{}self_attn.{}.bias", p, hf)}});
            }
        }
        t.push_back({b + "attn_q_norm.weight", {p + "self_attn.q_norm.weight"}});
        t.push_back({b + "attn_k_norm.weight", {p + "self_attn.k_norm.weight"}});
        t.push_back({b + "ffn_norm.weight", {p + "post_attention_layernorm.weight"}});
        t.push_back({b + "ffn_gate_inp.weight", {p + "mlp.gate.weight"}});
        for (const auto& [g, hf] : std::vector<std::pair<std::string, std::string>>{
                 {"ffn_gate_exps", "gate_proj"}, {"ffn_up_exps", "up_proj"}, {"ffn_down_exps", "down_proj"}}) {
            GgufTensorEntry e{b + g + ".weight", {}, true};
            for (int64_t x = 0; x < experts; ++x)
                e.names.push_back(fmt::format("{}mlp.experts.{}.{}.weight", p, x, hf));
            t.push_back(std::move(e));
        }
    }
    t.push_back({"output_norm.weight", {"model.norm.weight"}});
    t.push_back({"output.weight", {"lm_head.weight"}, false, !config.get_bool("tie_word_embeddings", false)});
    return t;
}

void set_gguf_model_metadata(const io::HfConfig& config, io::GgufWriter& writer) {
    const GgufArchitecture* a = find_by_model_type(config.get_string("model_type", ""));
    if (a == nullptr) {
        raise(ErrorCode::kUnsupported, "{}: model_type '{}' has no GGUF mapping (supported: qwen3_moe)", config.label(),
              config.get_string("model_type", ""));
    }
    writer.set_string("general.architecture", a->gguf);
    a->metadata(config, a->gguf, writer);
}

GgufModel open_gguf_model(const std::filesystem::path& path) {
    auto file = std::make_shared<const io::GgufCheckpoint>(path);
    const std::string label = path.string();
    io::HfConfig config(gguf_config_json(*file), label);
    std::map<std::string, io::GgufRef> names;
    for (const GgufTensorEntry& e : gguf_tensor_table(config)) {
        if (!file->contains(e.gguf)) {
            if (!e.required) continue;
            raise(ErrorCode::kInvalidModel, "{}: tensor '{}' is missing ({} needs it)", label, e.gguf,
                  file->metadata().get_string("general.architecture"));
        }
        if (!e.stacked) {
            names[e.names[0]] = {e.gguf, -1};
            continue;
        }
        const Shape& s = file->info(e.gguf).shape;
        const auto n = static_cast<int64_t>(e.names.size());
        if (s.rank() != 3 || s[0] != n) {
            raise(ErrorCode::kInvalidModel, "{}: tensor '{}' has shape {}; expected [expert_count = {}, rows, cols]",
                  label, e.gguf, s.str(), n);
        }
        for (int64_t x = 0; x < n; ++x) names[e.names[static_cast<size_t>(x)]] = {e.gguf, x};
    }
    // a tensor the table does not know would be silently left out of the forward: refuse it
    std::map<std::string, bool> known;
    for (const auto& [name, ref] : names) known[ref.tensor] = true;
    for (const std::string& t : file->tensor_names()) {
        if (known.count(t) == 0) {
            raise(ErrorCode::kUnsupported, "{}: tensor '{}' is not part of moeserve's {} model (not supported)", label,
                  io::gguf_printable(t), file->metadata().get_string("general.architecture"));
        }
    }
    auto weights = std::shared_ptr<const io::WeightSource>(io::WeightSource::from_gguf(file, std::move(names)));
    std::map<std::string, int> types;
    for (const std::string& t : file->tensor_names()) types[std::string(ggml_type_name(file->info(t).type))] += 1;
    std::string description =
        fmt::format("GGUF {}, {} file{}, tensors:", file->metadata().get_string("general.architecture"),
                    file->num_files(), file->num_files() == 1 ? "" : "s");
    for (const auto& [type, count] : types) description += fmt::format(" {} x {}", type, count);
    description += " (dot products on the stored blocks, activations q8_0 / q8_K)";
    return {std::move(file), std::move(config), std::move(weights), std::move(description)};
}

}  // namespace moeserve::model
