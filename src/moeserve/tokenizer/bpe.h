// The BPE model of tokenizer.json ("model": {"type": "BPE"}): vocabulary, ranked merges and the
// per-word merge loop of HF tokenizers (lowest rank first, then leftmost), O(n log n) per word.
#pragma once

#include <cstdint>
#include <memory>
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace moeserve::tokenizer {

// Reusable buffers for Bpe::tokenize, so a long encode does not allocate per word. Owned by the
// caller; one per thread.
struct BpeScratch {
    struct Symbol {
        int32_t id;
        int32_t prev;  // index of the previous live symbol, -1 at the start
        int32_t next;  // index of the next live symbol, -1 at the end
        int32_t len;   // bytes of the word covered; 0 once merged into its left neighbour
    };
    struct Candidate {
        int32_t rank;
        int32_t pos;
        int32_t new_id;
    };
    std::vector<Symbol> symbols;
    std::vector<Candidate> heap;
};

class Bpe {
public:
    // Builds the model from the "model" object; raises Error kInvalidModel (naming `where`) for
    // merges whose parts or result are not in the vocabulary, kUnsupported for dropout > 0.
    static Bpe from_json(const nlohmann::json& model, std::string_view where);
    // The same from a model object whose vocab and merges were streamed out separately (see
    // tokenizer_json.h); model holds the other fields (unk_token, byte_fallback, ...).
    static Bpe from_parts(const nlohmann::json& model, std::vector<std::pair<std::string, int64_t>> vocab,
                          const std::vector<std::pair<std::string, std::string>>& merges, std::string_view where);
    ~Bpe();
    Bpe(Bpe&&) noexcept;
    Bpe& operator=(Bpe&&) noexcept;

    // Appends the ids of word (one pre-tokenized piece, valid UTF-8) to out. Characters missing
    // from the vocabulary become byte-fallback tokens, the unk token, or are dropped, as in HF.
    // Thread-safe given a scratch per thread.
    void tokenize(std::string_view word, BpeScratch& scratch, std::vector<int32_t>& out) const;

    std::optional<int32_t> token_to_id(std::string_view token) const;
    // The token for id, or nullptr if the vocabulary has no such id.
    const std::string* id_to_token(int32_t id) const;
    // Number of entries in the vocabulary (not counting added tokens).
    int32_t num_tokens() const;
    // One past the largest id in the vocabulary.
    int32_t id_end() const;

private:
    struct Impl;
    explicit Bpe(std::unique_ptr<Impl> impl);
    std::unique_ptr<Impl> impl_;
};

}  // namespace moeserve::tokenizer
