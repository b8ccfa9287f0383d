// tokenizer_config.json (transformers' side of a tokenizer): special token strings, the chat
// template and the BOS/EOS switches, parsed into a typed struct.
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace moeserve::tokenizer {

struct TokenizerConfig {
    std::string tokenizer_class;  // e.g. "LlamaTokenizerFast", "Qwen2TokenizerFast"
    std::optional<std::string> bos_token;
    std::optional<std::string> eos_token;
    std::optional<std::string> pad_token;
    std::optional<std::string> chat_template;
    std::optional<bool> add_bos_token;
    std::optional<bool> add_eos_token;

    // Parses the file's contents (empty text gives defaults); `where` prefixes errors.
    static TokenizerConfig parse(std::string_view json_text, std::string_view where);
};

}  // namespace moeserve::tokenizer
