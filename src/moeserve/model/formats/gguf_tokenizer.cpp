#include "moeserve/model/formats/gguf_tokenizer.h"

#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include <vector>

#include "moeserve/core/error.h"
#include "moeserve/core/split_patterns.h"

namespace moeserve::model {

namespace {

using Json = nlohmann::json;

// Qwen2's (and Qwen3's) pre-tokenizer split, llama.cpp's pre-tokenizer name "qwen2".
constexpr std::string_view kQwen2Regex =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

enum TokenType : int32_t { kNormal = 1, kControl = 3, kUserDefined = 4, kUnused = 5 };

Json byte_level() {
    return {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", false}, {"use_regex", false}};
}

Json qwen2_pre_tokenizer() {
    return {{"type", "Sequence"},
            {"pretokenizers",
             {{{"type", "Split"},
               {"pattern", {{"Regex", std::string(kQwen2Regex)}}},
               {"behavior", "Isolated"},
               {"invert", false}},
              byte_level()}}};
}

// DeepSeek-V3's (and R1's) pre-tokenizer splits, llama.cpp's pre-tokenizer name "deepseek-v3":
// digits in runs of up to three, CJK runs, then words and punctuation.
constexpr std::string_view kDeepseekDigits = R"(\p{N}{1,3})";
constexpr std::string_view kDeepseekCjk = "[\u4e00-\u9fa5\u3040-\u309f\u30a0-\u30ff]+";
constexpr std::string_view kDeepseekWords =
    "[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\r\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+|"
    " ?[\\p{P}\\p{S}]+[\r\n]*|\\s*[\r\n]+|\\s+(?!\\S)|\\s+";

Json isolated_split(std::string_view regex) {
    return {
        {"type", "Split"}, {"pattern", {{"Regex", std::string(regex)}}}, {"behavior", "Isolated"}, {"invert", false}};
}

Json deepseek_v3_pre_tokenizer() {
    Json byte_level_trimmed = byte_level();
    byte_level_trimmed["trim_offsets"] = true;
    return {{"type", "Sequence"},
            {"pretokenizers",
             {isolated_split(kDeepseekDigits), isolated_split(kDeepseekCjk), isolated_split(kDeepseekWords),
              byte_level_trimmed}}};
}

// GPT-4o's o200k split (gpt-oss's o200k_harmony too), llama.cpp's pre-tokenizer name "gpt-4o",
// as their tokenizer.json writes it: the matches kept (Removed, inverted), no normalizer.
constexpr std::string_view kO200kRegex =
    R"([^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?|)"
    R"([^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|)"
    R"(\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

Json o200k_pre_tokenizer() {
    Json byte_level_trimmed = byte_level();
    byte_level_trimmed["trim_offsets"] = true;
    return {{"type", "Sequence"},
            {"pretokenizers",
             {{{"type", "Split"},
               {"pattern", {{"Regex", std::string(kO200kRegex)}}},
               {"behavior", "Removed"},
               {"invert", true}},
              byte_level_trimmed}}};
}

// Kimi-K2's split (llama.cpp's pre-tokenizer name "kimi-k2"), as moeserve's tiktoken reader
// writes a Kimi folder's tokenizer.json (tiktoken_tokenizer_json): the pattern's matches isolated,
// then the byte-level alphabet without its own regex.
Json kimi_k2_pre_tokenizer() {
    Json byte_level_trimmed = byte_level();
    byte_level_trimmed["trim_offsets"] = true;
    return {{"type", "Sequence"}, {"pretokenizers", {isolated_split(kKimiK2SplitPattern), byte_level_trimmed}}};
}

// The byte-level BPE tokenizers a GGUF file can name (tokenizer.ggml.pre): the normalizer and
// pre-tokenizer of their tokenizer.json. Reading rebuilds them from the name; writing finds the
// name whose pair equals the tokenizer.json's.
struct KnownPreTokenizer {
    std::string name;
    Json normalizer, pre_tokenizer;
};

const std::vector<KnownPreTokenizer>& known_pre_tokenizers() {
    static const std::vector<KnownPreTokenizer> table = {
        {"qwen2", {{"type", "NFC"}}, qwen2_pre_tokenizer()},
        {"deepseek-v3", {{"type", "Sequence"}, {"normalizers", Json::array()}}, deepseek_v3_pre_tokenizer()},
        {"gpt-4o", Json(), o200k_pre_tokenizer()},
        {"kimi-k2", Json(), kimi_k2_pre_tokenizer()},
    };
    return table;
}

std::string known_pre_names() {
    std::string out;
    for (const KnownPreTokenizer& k : known_pre_tokenizers()) out += (out.empty() ? "" : ", ") + k.name;
    return out;
}

// A token's text for tokenizer_config.json (bos_token etc.), or null.
Json token_or_null(const io::GgufHeader& h, const std::vector<std::string>& tokens, const std::string& key) {
    if (h.find(key) == nullptr) return nullptr;
    const int64_t id = h.get_int(key);
    if (id < 0 || id >= static_cast<int64_t>(tokens.size())) {
        raise(ErrorCode::kInvalidModel, "{}: {} = {} is outside the {} tokens", h.file, key, id, tokens.size());
    }
    return tokens[static_cast<size_t>(id)];
}

// tokenizer.json's "merges": each GGUF merge "a b" as the pair [a, b].
Json merge_pairs_json(const io::GgufHeader& h, const io::GgufArray& merges) {
    Json merge_pairs = Json::array();
    for (size_t i = 0; i < merges.size(); ++i) {
        const std::string_view m = merges.string_at(i);
        const size_t space = m.find(' ');
        if (space == std::string_view::npos) {
            raise(ErrorCode::kInvalidModel, "{}: tokenizer.ggml.merges[{}] has no space", h.file, i);
        }
        merge_pairs.push_back({std::string(m.substr(0, space)), std::string(m.substr(space + 1))});
    }
    return merge_pairs;
}

// tokenizer_config.json from the GGUF's special-token ids, BOS/EOS flags and chat template.
Json tokenizer_config_json(const io::GgufHeader& h, const std::vector<std::string>& tokens) {
    Json config = {
        {"add_bos_token",
         h.find("tokenizer.ggml.add_bos_token") != nullptr && h.get_bool("tokenizer.ggml.add_bos_token")},
        {"add_eos_token",
         h.find("tokenizer.ggml.add_eos_token") != nullptr && h.get_bool("tokenizer.ggml.add_eos_token")},
        {"bos_token", token_or_null(h, tokens, "tokenizer.ggml.bos_token_id")},
        {"eos_token", token_or_null(h, tokens, "tokenizer.ggml.eos_token_id")},
        {"pad_token", token_or_null(h, tokens, "tokenizer.ggml.padding_token_id")},
        {"unk_token", nullptr},
        {"clean_up_tokenization_spaces", false},
        {"model_max_length", 131072},
    };
    if (config["add_bos_token"].get<bool>() || config["add_eos_token"].get<bool>()) {
        // llama.cpp adds BOS / EOS as these keys say; of transformers' classes, the Llama one
        // honours add_bos_token / add_eos_token (DeepSeek-V3's tokenizer is one)
        config["tokenizer_class"] = "LlamaTokenizerFast";
    }
    if (h.find("tokenizer.chat_template") != nullptr) config["chat_template"] = h.get_string("tokenizer.chat_template");
    return config;
}

}  // namespace

std::optional<TokenizerFiles> gguf_tokenizer_files(const io::GgufHeader& h) {
    if (h.find("tokenizer.ggml.model") == nullptr) return std::nullopt;
    const std::string& model = h.get_string("tokenizer.ggml.model");
    if (model != "gpt2") {
        raise(ErrorCode::kUnsupported, "{}: tokenizer.ggml.model '{}' is not supported (gpt2 only); pass --tokenizer",
              h.file, io::gguf_printable(model));
    }
    const std::string pre = h.find("tokenizer.ggml.pre") != nullptr ? h.get_string("tokenizer.ggml.pre") : "";
    const KnownPreTokenizer* known = nullptr;
    for (const KnownPreTokenizer& k : known_pre_tokenizers()) {
        if (k.name == pre) known = &k;
    }
    if (known == nullptr) {
        raise(ErrorCode::kUnsupported, "{}: tokenizer.ggml.pre '{}' is not supported ({}); pass --tokenizer", h.file,
              io::gguf_printable(pre), known_pre_names());
    }
    const io::GgufArray& tok = h.get_array("tokenizer.ggml.tokens");
    const io::GgufArray& types = h.get_array("tokenizer.ggml.token_type");
    const io::GgufArray& merges = h.get_array("tokenizer.ggml.merges");
    if (tok.type() != io::GgufValueType::kString || merges.type() != io::GgufValueType::kString ||
        types.size() != tok.size()) {
        raise(ErrorCode::kInvalidModel,
              "{}: tokenizer.ggml.tokens / merges must be string arrays and token_type as long as tokens ({} vs {})",
              h.file, types.size(), tok.size());
    }
    size_t last_normal = 0;
    for (size_t i = 0; i < types.size(); ++i) {
        if (types.int_at(i).value_or(-1) == kNormal) last_normal = i;
    }
    std::vector<std::string> tokens;
    tokens.reserve(tok.size());
    Json vocab = Json::object();
    Json added = Json::array();
    for (size_t i = 0; i < tok.size(); ++i) {
        tokens.emplace_back(tok.string_at(i));
        const int64_t type = types.int_at(i).value_or(-1);
        // A special token inside the BPE vocabulary's id range is one of its entries too, as
        // tokenizer.json lists it (DeepSeek's <｜begin▁of▁sentence｜> is id 0 of the vocab and an added
        // token); past the range it is only an added token (Qwen's <|im_start|>).
        if (type == kNormal || ((type == kControl || type == kUserDefined) && i < last_normal)) {
            vocab[tokens.back()] = i;
        }
        if (type == kControl || type == kUserDefined) {
            added.push_back({{"id", i},
                             {"content", tokens.back()},
                             {"single_word", false},
                             {"lstrip", false},
                             {"rstrip", false},
                             {"normalized", false},
                             {"special", type == kControl}});
        } else if (type != kUnused && type != kNormal) {
            raise(ErrorCode::kUnsupported, "{}: tokenizer.ggml.token_type[{}] = {} is not supported (1, 3, 4, 5)",
                  h.file, i, type);
        }
    }
    const Json merge_pairs = merge_pairs_json(h, merges);
    const Json tokenizer = {{"version", "1.0"},
                            {"truncation", nullptr},
                            {"padding", nullptr},
                            {"added_tokens", added},
                            {"normalizer", known->normalizer},
                            {"pre_tokenizer", known->pre_tokenizer},
                            {"post_processor", byte_level()},
                            {"decoder", byte_level()},
                            {"model",
                             {{"type", "BPE"},
                              {"dropout", nullptr},
                              {"unk_token", nullptr},
                              {"continuing_subword_prefix", ""},
                              {"end_of_word_suffix", ""},
                              {"fuse_unk", false},
                              {"byte_fallback", false},
                              {"ignore_merges", false},
                              {"vocab", vocab},
                              {"merges", merge_pairs}}}};
    const Json config = tokenizer_config_json(h, tokens);
    return TokenizerFiles{tokenizer.dump(), config.dump()};
}

void set_gguf_tokenizer_metadata(std::string_view tokenizer_json, std::string_view config_json, int64_t vocab_size,
                                 const std::string& label, io::GgufWriter& writer) {
    const Json t = Json::parse(tokenizer_json);
    const Json c = config_json.empty() ? Json::object() : Json::parse(config_json);
    const Json& model = t.at("model");
    const Json normalizer = t.contains("normalizer") ? t.at("normalizer") : Json();
    const Json pre = t.contains("pre_tokenizer") ? t.at("pre_tokenizer") : Json();
    const KnownPreTokenizer* known = nullptr;
    for (const KnownPreTokenizer& k : known_pre_tokenizers()) {
        if (model.value("type", "") == "BPE" && k.normalizer == normalizer && k.pre_tokenizer == pre) known = &k;
    }
    if (known == nullptr) {
        raise(ErrorCode::kUnsupported,
              "{}: only the byte-level BPE tokenizers of Qwen2/Qwen3, DeepSeek-V3, GPT-4o/gpt-oss and Kimi-K2 ({}) "
              "can be written to GGUF",
              label, known_pre_names());
    }
    std::vector<std::string> tokens(static_cast<size_t>(vocab_size));
    std::vector<int32_t> types(static_cast<size_t>(vocab_size), kUnused);
    const auto put = [&](int64_t id, const std::string& text, int32_t type) {
        if (id < 0 || id >= vocab_size) {
            raise(ErrorCode::kInvalidModel, "{}: token '{}' has id {} outside the model's {} rows", label, text, id,
                  vocab_size);
        }
        tokens[static_cast<size_t>(id)] = text;
        types[static_cast<size_t>(id)] = type;
    };
    for (const auto& [text, id] : model.at("vocab").items()) put(id.get<int64_t>(), text, kNormal);
    for (const Json& a : t.at("added_tokens")) {
        put(a.at("id").get<int64_t>(), a.at("content").get<std::string>(),
            a.value("special", false) ? kControl : kUserDefined);
    }
    for (size_t i = 0; i < tokens.size(); ++i) {
        if (types[i] == kUnused) tokens[i] = fmt::format("[PAD{}]", i);
    }
    std::vector<std::string> merges;
    for (const Json& m : model.at("merges")) {
        merges.push_back(m.is_string() ? m.get<std::string>()
                                       : m[0].get<std::string>() + " " + m[1].get<std::string>());
    }
    writer.set_string("tokenizer.ggml.model", "gpt2");
    writer.set_string("tokenizer.ggml.pre", known->name);
    writer.set("tokenizer.ggml.tokens",
               io::GgufValue::of<io::GgufValueType::kArray>(io::GgufArray::of_strings(tokens)));
    writer.set("tokenizer.ggml.token_type",
               io::GgufValue::of<io::GgufValueType::kArray>(io::GgufArray::of_int32(types)));
    writer.set("tokenizer.ggml.merges",
               io::GgufValue::of<io::GgufValueType::kArray>(io::GgufArray::of_strings(merges)));
    const auto id_of = [&](const char* field) -> std::optional<uint32_t> {
        if (!c.contains(field) || c.at(field).is_null()) return std::nullopt;
        const Json& v = c.at(field);
        const std::string text = v.is_string() ? v.get<std::string>() : v.value("content", "");
        for (size_t i = 0; i < tokens.size(); ++i) {
            if (tokens[i] == text && types[i] != kUnused) return static_cast<uint32_t>(i);
        }
        raise(ErrorCode::kInvalidModel, "{}: {} '{}' is not a token", label, field, text);
    };
    if (auto id = id_of("bos_token")) writer.set_u32("tokenizer.ggml.bos_token_id", *id);
    if (auto id = id_of("eos_token")) writer.set_u32("tokenizer.ggml.eos_token_id", *id);
    if (auto id = id_of("pad_token")) writer.set_u32("tokenizer.ggml.padding_token_id", *id);
    writer.set("tokenizer.ggml.add_bos_token",
               io::GgufValue::of<io::GgufValueType::kBool>(c.value("add_bos_token", false)));
    if (c.contains("chat_template") && c.at("chat_template").is_string()) {
        writer.set_string("tokenizer.chat_template", c.at("chat_template").get<std::string>());
    }
}

}  // namespace moeserve::model
