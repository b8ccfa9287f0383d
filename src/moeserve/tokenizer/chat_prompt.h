// A tokenizer's chat prompt: its chat template rendered with the tokenizer's special tokens, as
// transformers' tokenizer.apply_chat_template does. The one place that adds bos_token /
// eos_token to the template's variables and encodes without the tokenizer's own special tokens;
// `generate --chat`, generate's "messages" lines and the server's chat routes all use it.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "moeserve/tokenizer/chat_template/chat_template.h"
#include "moeserve/tokenizer/tokenizer.h"

namespace moeserve::tokenizer {

// render_chat with the tokenizer's bos_token and eos_token (when it has them) among the
// template's variables, over any of the same name in `extra`. Same errors as render_chat.
std::string render_chat_prompt(const Tokenizer& tokenizer, const ChatTemplate& chat_template,
                               const nlohmann::ordered_json& messages, bool add_generation_prompt,
                               nlohmann::ordered_json extra = nlohmann::ordered_json::object());

// The rendered prompt's token ids, encoded with add_special_tokens = false: the template adds
// any BOS itself (apply_chat_template(tokenize=True)).
std::vector<TokenId> encode_chat_prompt(const Tokenizer& tokenizer, const ChatTemplate& chat_template,
                                        const nlohmann::ordered_json& messages, bool add_generation_prompt,
                                        nlohmann::ordered_json extra = nlohmann::ordered_json::object());

}  // namespace moeserve::tokenizer
