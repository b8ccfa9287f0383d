// Added tokens of tokenizer.json ("added_tokens"): matched in the text before pre-tokenization,
// leftmost-longest, honouring lstrip/rstrip/single_word, in two passes (tokens with
// normalized=false on the raw text, normalized=true ones on the normalized text), as HF's
// AddedVocabulary does.
#pragma once

#include <cstdint>
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace moeserve::tokenizer {

class Bpe;
class Normalizer;

struct AddedToken {
    int32_t id = -1;
    std::string content;
    bool special = false;      // skipped by decode(skip_special_tokens=true)
    bool lstrip = false;       // also swallows whitespace on its left
    bool rstrip = false;       // also swallows whitespace on its right
    bool single_word = false;  // only matches when not inside a word
    bool normalized = false;   // matched against the normalized text instead of the raw text
};

// One piece of a split text: a matched added token (id >= 0) or plain text (id = -1).
struct AddedTokenSplit {
    size_t begin = 0;
    size_t end = 0;
    int32_t id = -1;
};

class AddedVocabulary {
public:
    AddedVocabulary() = default;
    // Parses the "added_tokens" array; `where` prefixes errors. Tokens with normalized=true are
    // matched on normalized text, so (as in HF) their contents are normalized with normalizer
    // (may be null) for matching.
    // NOTE: ids follow HF's AddedVocabulary::add_tokens, not the file's "id" field: a content in
    // the model vocabulary keeps the model's id, a new content gets the next id after the model
    // vocabulary and the added tokens so far. For consistent files (Qwen3, DeepSeek-V3) the two
    // agree; for inconsistent ones this reproduces HF.
    static AddedVocabulary from_json(const nlohmann::json& added_tokens, const Bpe& model, const Normalizer* normalizer,
                                     std::string_view where);

    // Splits text (valid UTF-8) on the tokens whose `normalized` flag equals normalized_pass.
    // The splits tile text in order; empty text gives one empty plain split.
    std::vector<AddedTokenSplit> split(std::string_view text, bool normalized_pass) const;

    const std::vector<AddedToken>& tokens() const { return tokens_; }
    const AddedToken* find_by_id(int32_t id) const;
    std::optional<int32_t> find_by_content(std::string_view content) const;

private:
    // A byte trie over the contents of one pass's tokens, for leftmost-longest matching.
    struct Trie {
        struct Node {
            std::vector<std::pair<uint8_t, int32_t>> children;  // byte -> node index
            int32_t token = -1;                                 // index into tokens_, or -1
        };
        std::vector<Node> nodes{Node{}};
        bool first_bytes[256] = {};
        void insert(std::string_view content, int32_t token);
        // Length and token index of the longest token starting at text[pos]; {0, -1} if none.
        std::pair<size_t, int32_t> longest_at(std::string_view text, size_t pos) const;
    };

    std::vector<AddedToken> tokens_;
    std::unordered_map<int32_t, size_t> by_id_;
    std::unordered_map<std::string, int32_t> by_content_;
    Trie raw_trie_;
    Trie normalized_trie_;
};

}  // namespace moeserve::tokenizer
