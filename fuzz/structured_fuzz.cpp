// Fuzzes the structured-output front ends and matcher: the first byte picks GBNF, regex or JSON
// Schema; whatever compiles is run over the rest of the input as generated text, with a token
// mask over a small vocabulary at each step. Errors must be moeserve::Error, never a crash.
#include <cstddef>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

#include "moeserve/core/error.h"
#include "moeserve/structured/convert.h"
#include "moeserve/structured/matcher.h"

using namespace moeserve::structured;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    if (size < 2) return 0;
    static const auto vocab = std::make_shared<const Vocabulary>(
        std::vector<std::string>{"a", "b",  "ab", "{",  "}",    "\"",   "\":",      ",",    "[",    "]", "0",
                                 "1", "12", " ",  "\\", "\xC3", "\xA9", "\xC3\xA9", "true", "null", ""},
        std::vector<TokenId>{20});
    const std::string text(reinterpret_cast<const char*>(data) + 1, size - 1);
    // The spec is the input up to the first NUL; the rest is fed to the matcher.
    const size_t cut = text.find('\0');
    const std::string spec = text.substr(0, cut);
    const std::string rest = cut == std::string::npos ? "" : text.substr(cut + 1);
    try {
        std::string gbnf;
        switch (data[0] % 3) {
            case 0:
                gbnf = spec;
                break;
            case 1:
                gbnf = regex_to_gbnf(spec, "regex");
                break;
            default: {
                const auto j = nlohmann::ordered_json::parse(spec, nullptr, false);
                if (j.is_discarded()) return 0;
                gbnf = json_schema_to_gbnf(j, "schema");
            }
        }
        GrammarMatcher m(std::make_shared<const CompiledGrammar>(parse_gbnf(gbnf), vocab));
        std::vector<uint32_t> mask;
        for (size_t i = 0; i < rest.size() && i < 64; ++i) {
            m.fill_next_token_bitmask(mask);
            const auto t = static_cast<TokenId>(static_cast<uint8_t>(rest[i]) % vocab->size());
            const bool allowed = (mask[static_cast<size_t>(t >> 5)] >> (t & 31)) & 1;
            if (m.accept_token(t) != allowed) __builtin_trap();  // the mask and the matcher disagree
        }
    } catch (const moeserve::Error&) {
    }
    return 0;
}
