// Normalizers of tokenizer.json ("normalizer"): Unicode normalization forms via utf8proc and
// Sequence. Anything else is an Error kUnsupported naming the type.
#pragma once

#include <memory>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <string_view>

namespace moeserve::tokenizer {

class Normalizer {
public:
    virtual ~Normalizer() = default;
    // Returns the normalized text. text is valid UTF-8; so is the result. Thread-safe.
    virtual std::string normalize(std::string_view text) const = 0;
};

// Builds the normalizer described by spec (the "normalizer" object of tokenizer.json). Returns
// nullptr for JSON null and for an empty Sequence (nothing to do). `where` prefixes errors.
std::unique_ptr<Normalizer> make_normalizer(const nlohmann::json& spec, std::string_view where);

}  // namespace moeserve::tokenizer
