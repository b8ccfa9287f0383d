#include "moeserve/tokenizer/chat_prompt.h"

#include <utility>

namespace moeserve::tokenizer {

std::string render_chat_prompt(const Tokenizer& tokenizer, const ChatTemplate& chat_template,
                               const nlohmann::ordered_json& messages, bool add_generation_prompt,
                               nlohmann::ordered_json extra) {
    if (tokenizer.bos_token()) extra["bos_token"] = *tokenizer.bos_token();
    if (tokenizer.eos_token()) extra["eos_token"] = *tokenizer.eos_token();
    return render_chat(chat_template, messages, add_generation_prompt, extra);
}

std::vector<TokenId> encode_chat_prompt(const Tokenizer& tokenizer, const ChatTemplate& chat_template,
                                        const nlohmann::ordered_json& messages, bool add_generation_prompt,
                                        nlohmann::ordered_json extra) {
    const std::string text =
        render_chat_prompt(tokenizer, chat_template, messages, add_generation_prompt, std::move(extra));
    return tokenizer.encode(text, /*add_special_tokens=*/false);
}

}  // namespace moeserve::tokenizer
