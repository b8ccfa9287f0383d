// Decoders of tokenizer.json ("decoder"): turn tokens back into bytes, one token at a time, so the
// streaming detokenizer and decode() share one path. The final bytes are made valid UTF-8 lossily.
#pragma once

#include <memory>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <string_view>

namespace moeserve::tokenizer {

class Decoder {
public:
    virtual ~Decoder() = default;
    // Appends the bytes token stands for to out; is_first tells whether it is the first token of
    // the decoded sequence. The result may be invalid UTF-8 until the sequence is complete.
    virtual void append_token(std::string_view token, bool is_first, std::string& out) const = 0;
};

// Builds the decoder described by spec; JSON null gives HF's default (tokens joined by spaces).
// Types other than ByteLevel raise Error kUnsupported naming the type.
std::unique_ptr<Decoder> make_decoder(const nlohmann::json& spec, std::string_view where);

}  // namespace moeserve::tokenizer
