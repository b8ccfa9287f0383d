#include "moeserve/model/formats/gguf.h"

#include <fmt/format.h>

#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <map>
#include <set>

#include "moeserve/core/error.h"
#include "moeserve/kernels/ops.h"
#include "moeserve/model/formats/gguf_arch.h"

namespace moeserve::model {

namespace {

const std::vector<const GgufArchitecture*>& gguf_architectures() {
    static const std::vector<const GgufArchitecture*> table = {&gguf_qwen3moe(), &gguf_qwen2moe(),  &gguf_llama(),
                                                               &gguf_glm4moe(),  &gguf_deepseek2(), &gguf_gpt_oss()};
    return table;
}

std::string supported_model_types() {
    std::string names;
    for (const GgufArchitecture* a : gguf_architectures()) names += (names.empty() ? "" : ", ") + a->model_type;
    return names;
}

const GgufArchitecture* find_by_model_type(const std::string& model_type) {
    for (const GgufArchitecture* a : gguf_architectures()) {
        if (a->model_type == model_type || std::find(a->also_written_from.begin(), a->also_written_from.end(),
                                                     model_type) != a->also_written_from.end()) {
            return a;
        }
    }
    return nullptr;
}

}  // namespace

int64_t gguf_int_or_uniform_array(const io::GgufHeader& h, const std::string& key) {
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

int64_t gguf_int_or(const io::GgufHeader& h, const std::string& key, int64_t fallback) {
    return h.find(key) != nullptr ? h.get_int(key) : fallback;
}

double gguf_float_or(const io::GgufHeader& h, const std::string& key, double fallback) {
    return h.find(key) != nullptr ? h.get_float(key) : fallback;
}

int64_t gguf_vocab_size(const io::GgufCheckpoint& file) {
    if (!file.contains("token_embd.weight")) {
        raise(ErrorCode::kInvalidModel, "{}: tensor 'token_embd.weight' is missing (it gives the vocabulary size)",
              file.metadata().file);
    }
    const Shape& embd = file.info("token_embd.weight").shape;
    return embd.rank() == 2 ? embd[0] : 0;
}

std::optional<nlohmann::json> gguf_rope_scaling(const io::GgufHeader& h, const std::string& a, bool deepseek_mscale) {
    const io::GgufValue* v = h.find(a + ".rope.scaling.type");
    if (v == nullptr) return std::nullopt;
    const std::string kind = v->as_string() != nullptr ? *v->as_string() : "";
    if (kind == "none") return std::nullopt;
    if (kind != "linear" && kind != "yarn") {
        raise(ErrorCode::kUnsupported, "{}: {}.rope.scaling.type '{}' is not supported (none, linear, yarn)", h.file, a,
              io::gguf_printable(kind));
    }
    nlohmann::json s = {{"rope_type", kind}, {"factor", h.get_float(a + ".rope.scaling.factor")}};
    if (kind == "yarn") {
        s["original_max_position_embeddings"] = h.get_int(a + ".rope.scaling.original_context_length");
        s["beta_fast"] = gguf_float_or(h, a + ".rope.scaling.yarn_beta_fast", 32.0);
        s["beta_slow"] = gguf_float_or(h, a + ".rope.scaling.yarn_beta_slow", 1.0);
        if (deepseek_mscale && h.find(a + ".rope.scaling.yarn_log_multiplier") != nullptr) {
            // llama.cpp's converter writes 0.1 * mscale_all_dim; DeepSeek's configs set mscale to the same
            const double m = h.get_float(a + ".rope.scaling.yarn_log_multiplier") / 0.1;
            s["mscale"] = m;
            s["mscale_all_dim"] = m;
        }
    }
    return s;
}

void gguf_special_token_ids(const io::GgufHeader& h, nlohmann::json& config) {
    if (h.find("tokenizer.ggml.bos_token_id") != nullptr)
        config["bos_token_id"] = h.get_int("tokenizer.ggml.bos_token_id");
    if (h.find("tokenizer.ggml.eos_token_id") != nullptr)
        config["eos_token_id"] = h.get_int("tokenizer.ggml.eos_token_id");
}

GgufTensorEntry gguf_stacked_experts(const std::string& gguf, const std::string& layer_prefix,
                                     const std::string& hf_proj, int64_t experts) {
    GgufTensorEntry e{gguf, {}, true};
    for (int64_t x = 0; x < experts; ++x)
        e.names.push_back(fmt::format("{}mlp.experts.{}.{}.weight", layer_prefix, x, hf_proj));
    return e;
}

nlohmann::json gguf_gqa_config(const io::GgufCheckpoint& file, const std::string& a, const std::string& model_type,
                               const std::string& hf_class, double default_theta) {
    const io::GgufHeader& h = file.metadata();
    const int64_t hidden = h.get_int(a + ".embedding_length");
    const int64_t heads = h.get_int(a + ".attention.head_count");
    const int64_t head_dim = gguf_int_or(h, a + ".attention.key_length", hidden / heads);
    if (gguf_int_or(h, a + ".attention.value_length", head_dim) != head_dim) {
        raise(ErrorCode::kUnsupported, "{}: {}.attention.value_length {} differs from key_length {}", h.file, a,
              h.get_int(a + ".attention.value_length"), head_dim);
    }
    nlohmann::json c = {
        {"model_type", model_type},
        {"architectures", {hf_class}},
        {"vocab_size", gguf_vocab_size(file)},
        {"hidden_size", hidden},
        {"num_hidden_layers", h.get_int(a + ".block_count")},
        {"num_attention_heads", heads},
        {"num_key_value_heads", gguf_int_or_uniform_array(h, a + ".attention.head_count_kv")},
        {"head_dim", head_dim},
        {"max_position_embeddings", h.get_int(a + ".context_length")},
        {"rms_norm_eps", h.get_float(a + ".attention.layer_norm_rms_epsilon")},
        {"rope_theta", gguf_float_or(h, a + ".rope.freq_base", default_theta)},
        {"tie_word_embeddings", !file.contains("output.weight")},
        {"torch_dtype", "bfloat16"},
    };
    if (auto rope = gguf_rope_scaling(h, a, false)) c["rope_scaling"] = std::move(*rope);
    gguf_special_token_ids(h, c);
    return c;
}

void gguf_set_gqa_metadata(const io::HfConfig& c, const std::string& a, double default_theta, io::GgufWriter& w) {
    const auto u32 = [](int64_t v) { return static_cast<uint32_t>(v); };
    const int64_t heads = c.get_int("num_attention_heads");
    const int64_t head_dim = c.get_int("head_dim", c.get_int("hidden_size") / heads);
    w.set_u32(a + ".context_length", u32(c.get_int("max_position_embeddings")));
    w.set_u32(a + ".embedding_length", u32(c.get_int("hidden_size")));
    w.set_u32(a + ".block_count", u32(c.get_int("num_hidden_layers")));
    w.set_u32(a + ".feed_forward_length", u32(c.get_int("intermediate_size")));
    w.set_u32(a + ".attention.head_count", u32(heads));
    w.set_u32(a + ".attention.head_count_kv", u32(c.get_int("num_key_value_heads")));
    w.set_u32(a + ".attention.key_length", u32(head_dim));
    w.set_u32(a + ".attention.value_length", u32(head_dim));
    w.set_f32(a + ".rope.freq_base", static_cast<float>(c.get_float("rope_theta", default_theta)));
    w.set_f32(a + ".attention.layer_norm_rms_epsilon", static_cast<float>(c.get_float("rms_norm_eps")));
}

void gguf_attention_entries(std::vector<GgufTensorEntry>& t, const std::string& b, const std::string& p, bool qkv_bias,
                            bool o_bias) {
    for (const auto& [g, hf] : std::vector<std::pair<std::string, std::string>>{
             {"attn_q", "q_proj"}, {"attn_k", "k_proj"}, {"attn_v", "v_proj"}, {"attn_output", "o_proj"}}) {
        t.push_back({fmt::format("{}{}.weight", b, g), {fmt::format("{}self_attn.{}.weight", p, hf)}});
        if (hf == "o_proj" ? o_bias : qkv_bias) {
            t.push_back({fmt::format("{}{}.bias", b, g), {fmt::format("{}self_attn.{}.bias", p, hf)}});
        }
    }
}

void gguf_embedding_entry(std::vector<GgufTensorEntry>& t) {
    t.push_back({"token_embd.weight", {"model.embed_tokens.weight"}});
}

void gguf_output_entries(std::vector<GgufTensorEntry>& t, const io::HfConfig& config) {
    t.push_back({"output_norm.weight", {"model.norm.weight"}});
    t.push_back({"output.weight", {"lm_head.weight"}, false, !config.get_bool("tie_word_embeddings", false)});
}

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
    for (const GgufArchitecture* a : gguf_architectures()) {
        if (a->gguf == arch) return a->config(file, arch);
    }
    std::string names;
    for (const GgufArchitecture* a : gguf_architectures()) names += (names.empty() ? "" : ", ") + a->gguf;
    raise(ErrorCode::kUnsupported, "{}: general.architecture '{}' is not supported; supported: {}", h.file,
          io::gguf_printable(arch), names);
}

std::vector<GgufTensorEntry> gguf_tensor_table(const io::HfConfig& config) {
    const std::string model_type = config.get_string("model_type", "");
    const GgufArchitecture* a = find_by_model_type(model_type);
    if (a == nullptr) {
        raise(ErrorCode::kUnsupported, "{}: model_type '{}' has no GGUF mapping (supported: {})", config.label(),
              model_type, supported_model_types());
    }
    return a->tensors(config);
}

void set_gguf_model_metadata(const io::HfConfig& config, io::GgufWriter& writer) {
    const GgufArchitecture* a = find_by_model_type(config.get_string("model_type", ""));
    if (a == nullptr) {
        raise(ErrorCode::kUnsupported, "{}: model_type '{}' has no GGUF mapping (supported: {})", config.label(),
              config.get_string("model_type", ""), supported_model_types());
    }
    writer.set_string("general.architecture", a->gguf);
    a->metadata(config, a->gguf, writer);
}

namespace {

// Where the table's checkpoint tensors are: in the file (names) or made from it (owned).
struct GgufMapping {
    std::map<std::string, io::GgufRef> names;
    std::map<std::string, Tensor> owned;
    std::set<std::string> read;  // the file's tensors the model reads
};

Tensor dequantized(const io::GgufCheckpoint& file, const std::string& tensor) {
    const io::GgufTensor t = file.tensor(tensor);  // refuses unsupported types, naming them
    Tensor out(DType::kF32, t.info->shape);
    kernels::ops().dequantize_gguf(t.info->type, t.bytes.data(), out.as<float>(), out.numel());
    return out;
}

void map_entry(const io::GgufCheckpoint& file, const GgufTensorEntry& e, const std::string& label, GgufMapping& m) {
    if (!file.contains(e.gguf)) {
        if (!e.required) return;
        raise(ErrorCode::kInvalidModel, "{}: tensor '{}' is missing ({} needs it)", label, e.gguf,
              file.metadata().get_string("general.architecture"));
    }
    m.read.insert(e.gguf);
    if (!e.stacked) {
        m.names[e.names[0]] = {e.gguf, -1};
        return;
    }
    const Shape& s = file.info(e.gguf).shape;
    const auto n = static_cast<int64_t>(e.names.size());
    if (s.rank() != 3 || s[0] != n) {
        raise(ErrorCode::kInvalidModel, "{}: tensor '{}' has shape {}; expected [expert_count = {}, rows, cols]", label,
              e.gguf, s.str(), n);
    }
    for (int64_t x = 0; x < n; ++x) m.names[e.names[static_cast<size_t>(x)]] = {e.gguf, x};
}

// kv_b_proj from attn_k_b + attn_v_b (joined in f32: decode absorbs it in f32 anyway), or from
// the single attn_kv_b of older files.
void map_kv_b(const io::GgufCheckpoint& file, const GgufTensorEntry& keys, const GgufTensorEntry& values,
              const std::string& label, GgufMapping& m) {
    const std::string& name = keys.names[0];
    if (file.contains(keys.gguf) && file.contains(values.gguf)) {
        m.owned[name] = join_kv_b(dequantized(file, keys.gguf), dequantized(file, values.gguf),
                                  fmt::format("{}: {} / {}", label, keys.gguf, values.gguf));
        m.read.insert(keys.gguf);
        m.read.insert(values.gguf);
        return;
    }
    std::string joined = keys.gguf;
    joined.replace(joined.find("attn_k_b"), 8, "attn_kv_b");
    if (!file.contains(joined)) {
        raise(ErrorCode::kInvalidModel, "{}: tensors '{}' and '{}' (or the older '{}') are missing", label, keys.gguf,
              values.gguf, joined);
    }
    m.names[name] = {joined, -1};
    m.read.insert(joined);
}

// A tensor the table does not know would be silently left out of the forward: refuse it. The
// layers past num_hidden_layers are a multi-token-prediction head the model does not run.
void check_every_tensor_read(const io::GgufCheckpoint& file, const io::HfConfig& config, const GgufMapping& m,
                             const std::string& label) {
    const int64_t layers = config.get_int("num_hidden_layers");
    for (const std::string& t : file.tensor_names()) {
        if (m.read.count(t) != 0) continue;
        int64_t block = -1;
        if (std::sscanf(t.c_str(), "blk.%" SCNd64 ".", &block) == 1 && block >= layers &&
            block < layers + config.get_int("num_nextn_predict_layers", 0)) {
            continue;
        }
        raise(ErrorCode::kUnsupported, "{}: tensor '{}' is not part of moeserve's {} model (not supported)", label,
              io::gguf_printable(t), file.metadata().get_string("general.architecture"));
    }
}

std::string describe(const io::GgufCheckpoint& file, const GgufMapping& m) {
    std::map<std::string, int> types;
    for (const std::string& t : m.read) types[std::string(ggml_type_name(file.info(t).type))] += 1;
    std::string out = fmt::format("GGUF {}, {} file{}, tensors:", file.metadata().get_string("general.architecture"),
                                  file.num_files(), file.num_files() == 1 ? "" : "s");
    std::string packed;  // the types the backend repacks at load (kernels::Ops::gguf_pack)
    for (const std::string& t : m.read) {
        const GgmlType type = file.info(t).type;
        const kernels::GgufMatrix probe{type, nullptr, 8, ggml_traits(type).block_size, 0};
        const std::string name(ggml_type_name(type));
        if (kernels::ops().gguf_packed_bytes(probe) > 0 && packed.find(name) == std::string::npos) {
            packed += (packed.empty() ? "" : ", ") + name;
        }
    }
    for (const auto& [type, count] : types) out += fmt::format(" {} x {}", type, count);
    out += " (dot products on the stored blocks, activations q8_0 / q8_K";
    if (!packed.empty()) out += fmt::format("; {} repacked in groups of 8 rows", packed);
    if (!m.owned.empty()) out += fmt::format("; {} split tensors joined in f32", m.owned.size());
    return out + ")";
}

}  // namespace

GgufModel open_gguf_model(const std::filesystem::path& path) {
    auto file = std::make_shared<const io::GgufCheckpoint>(path);
    io::HfConfig config(gguf_config_json(*file), path.string());
    return map_gguf_model(std::move(file), config);
}

GgufModel map_gguf_model(std::shared_ptr<const io::GgufCheckpoint> file, const io::HfConfig& config) {
    const std::string& label = config.label();
    const std::vector<GgufTensorEntry> table = gguf_tensor_table(config);
    GgufMapping m;
    for (size_t i = 0; i < table.size(); ++i) {
        if (!table[i].kv_b) {
            map_entry(*file, table[i], label, m);
            continue;
        }
        MOESERVE_CHECK(table[i].kv_b == KvbPart::kKeys && i + 1 < table.size() &&
                           table[i + 1].kv_b == KvbPart::kValues && table[i + 1].names == table[i].names,
                       "gguf tensor table: {} is not followed by its value half", table[i].gguf);
        map_kv_b(*file, table[i], table[i + 1], label, m);
        ++i;
    }
    check_every_tensor_read(*file, config, m, label);
    std::string description = describe(*file, m);
    auto weights = std::shared_ptr<const io::WeightSource>(
        io::WeightSource::from_gguf(file, std::move(m.names), std::move(m.owned)));
    return {std::move(file), config, std::move(weights), std::move(description)};
}

}  // namespace moeserve::model
