#include "moeserve/model/formats/gguf_tokenizer.h"

#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include <vector>

#include "moeserve/core/error.h"

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

// A token's text for tokenizer_config.json (bos_token etc.), or null.
Json token_or_null(const io::GgufHeader& h, const std::vector<std::string>& tokens, const std::string& key) {
    if (h.find(key) == nullptr) return nullptr;
    const int64_t id = h.get_int(key);
    if (id < 0 || id >= static_cast<int64_t>(tokens.size())) {
        raise(ErrorCode::kInvalidModel, "{}: {} = {} is outside the {} tokens", h.file, key, id, tokens.size());
    }
    return tokens[static_cast<size_t>(id)];
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
    if (pre != "qwen2") {
        raise(ErrorCode::kUnsupported, "{}: tokenizer.ggml.pre '{}' is not supported (qwen2 only); pass --tokenizer",
              h.file, io::gguf_printable(pre));
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
    std::vector<std::string> tokens;
    tokens.reserve(tok.size());
    Json vocab = Json::object();
    Json added = Json::array();
    for (size_t i = 0; i < tok.size(); ++i) {
        tokens.emplace_back(tok.string_at(i));
        const int64_t type = types.int_at(i).value_or(-1);
        if (type == kNormal) {
            vocab[tokens.back()] = i;
        } else if (type == kControl || type == kUserDefined) {
            added.push_back({{"id", i},
                             {"content", tokens.back()},
                             {"single_word", false},
                             {"lstrip", false},
                             {"rstrip", false},
                             {"normalized", false},
                             {"special", type == kControl}});
        } else if (type != kUnused) {
            raise(ErrorCode::kUnsupported, "{}: tokenizer.ggml.token_type[{}] = {} is not supported (1, 3, 4, 5)",
                  h.file, i, type);
        }
    }
    Json merge_pairs = Json::array();
    for (size_t i = 0; i < merges.size(); ++i) {
        const std::string_view m = merges.string_at(i);
        const size_t space = m.find(' ');
        if (space == std::string_view::npos) {
            raise(ErrorCode::kInvalidModel, "{}: tokenizer.ggml.merges[{}] has no space", h.file, i);
        }
        merge_pairs.push_back({std::string(m.substr(0, space)), std::string(m.substr(space + 1))});
    }
    const Json tokenizer = {{"version", "1.0"},
                            {"truncation", nullptr},
                            {"padding", nullptr},
                            {"added_tokens", added},
                            {"normalizer", {{"type", "NFC"}}},
                            {"pre_tokenizer", qwen2_pre_tokenizer()},
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
    if (h.find("tokenizer.chat_template") != nullptr) config["chat_template"] = h.get_string("tokenizer.chat_template");
    return TokenizerFiles{tokenizer.dump(), config.dump()};
}

void set_gguf_tokenizer_metadata(std::string_view tokenizer_json, std::string_view config_json, int64_t vocab_size,
                                 const std::string& label, io::GgufWriter& writer) {
    const Json t = Json::parse(tokenizer_json);
    const Json c = config_json.empty() ? Json::object() : Json::parse(config_json);
    const Json& model = t.at("model");
    const Json* pre = t.contains("pre_tokenizer") ? &t.at("pre_tokenizer") : nullptr;
    const bool qwen2 = model.value("type", "") == "BPE" && pre != nullptr && pre->value("type", "") == "Sequence" &&
                       pre->at("pretokenizers").size() == 2 &&
                       pre->at("pretokenizers")[0].value("type", "") == "Split" &&
                       pre->at("pretokenizers")[0].at("pattern").value("Regex", "") == kQwen2Regex;
    if (!qwen2) {
        raise(ErrorCode::kUnsupported, "{}: only Qwen2/Qwen3's byte-level BPE tokenizer can be written to GGUF", label);
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
    writer.set_string("tokenizer.ggml.pre", "qwen2");
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
