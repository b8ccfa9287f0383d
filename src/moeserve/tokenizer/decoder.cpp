// Decoder implementations: ByteLevel (HF decoders/byte_level.rs: a token whose characters are all
// in the byte-level alphabet becomes those bytes, any other token stays as its own UTF-8) and the
// no-decoder default.
#include "moeserve/tokenizer/decoder.h"

#include <nlohmann/json.hpp>

#include "moeserve/core/error.h"
#include "moeserve/tokenizer/byte_level.h"

namespace moeserve::tokenizer {
namespace {

class ByteLevelDecoder final : public Decoder {
public:
    void append_token(std::string_view token, bool /*is_first*/, std::string& out) const override {
        if (!alphabet_.decode(token, out)) out.append(token);
    }

private:
    ByteLevelAlphabet alphabet_;
};

class JoinWithSpacesDecoder final : public Decoder {
public:
    void append_token(std::string_view token, bool is_first, std::string& out) const override {
        if (!is_first) out.push_back(' ');
        out.append(token);
    }
};

}  // namespace

std::unique_ptr<Decoder> make_decoder(const nlohmann::json& spec, std::string_view where) {
    if (spec.is_null()) return std::make_unique<JoinWithSpacesDecoder>();
    const std::string type = spec.value("type", std::string());
    if (type == "ByteLevel") return std::make_unique<ByteLevelDecoder>();
    raise(ErrorCode::kUnsupported, "{}: decoder type '{}' is not supported (supported: ByteLevel)", where, type);
}

}  // namespace moeserve::tokenizer
