// Fast reading of tokenizer.json: a SAX pass streams model.vocab and model.merges (the bulk of a
// 10 MB file) straight into vectors and builds a small JSON tree of everything else, so loading
// avoids a DOM of 300k nodes.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace moeserve::tokenizer {

struct TokenizerJson {
    nlohmann::json doc;                                       // the whole file except model.vocab and model.merges
    std::vector<std::pair<std::string, int64_t>> vocab;       // in file order
    std::vector<std::pair<std::string, std::string>> merges;  // rank order
    bool has_vocab = false;
    bool has_merges = false;
};

// Parses text; raises Error kInvalidModel naming `where` if it is not JSON, or if vocab is not
// an object of integers or merges not a list of "left right" strings / [left, right] pairs.
TokenizerJson parse_tokenizer_json(std::string_view text, std::string_view where);

// The tokenizer.json text of `t` (doc with model.vocab and model.merges put back), which
// parse_tokenizer_json reads back to an equal TokenizerJson.
std::string tokenizer_json_text(const TokenizerJson& t);

// Splits a merge written as "left right" (exactly one space, as HF requires); false if malformed.
bool split_merge_string(std::string_view merge, std::pair<std::string, std::string>* out);

}  // namespace moeserve::tokenizer
