// tiktoken tokenizers (a `tiktoken.model` file instead of tokenizer.json; Kimi-K2's, Moonlight's):
// read as the tokenizer.json Hugging Face's TikTokenConverter would write for them, so the BPE,
// pre-tokenizer and decoder code of the tokenizer.json path runs them unchanged.
//   tiktoken.model: one "BASE64 RANK" line per token, the token's bytes and its merge rank (= id).
//   The pre-tokenization pattern lives in the model's Python tokenizer class, not in a file: a
//   table here holds it per class (tiktoken_pattern), written for PCRE2.
//   Special tokens: the num_reserved ids right after the ranks, named by tokenizer_config.json's
//   added_tokens_decoder where it names them and "<|reserved_token_ID|>" elsewhere (as the Kimi
//   class builds them).
#pragma once

#include <cstdint>
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "moeserve/tokenizer/tokenizer_json.h"

namespace moeserve::tokenizer {

// Tokens and ranks of a tiktoken.model text; Error kInvalidModel naming `where` (and the line) for a
// line that is not "BASE64 RANK", a repeated token, or ranks that are not 0..N-1 each once.
std::vector<std::pair<std::string, int64_t>> parse_tiktoken_ranks(std::string_view text, std::string_view where);

// The pattern of the tokenizer class tokenizer_config.json's auto_map names for AutoTokenizer
// ("tokenization_kimi.TikTokenTokenizer"), or nullopt for a class this table does not know.
std::optional<std::string_view> tiktoken_pattern(std::string_view tokenizer_class);
// The classes tiktoken_pattern knows, comma-separated (for refusals).
std::string tiktoken_classes();

// The tokenizer.json of a tiktoken tokenizer: the byte-level vocabulary (ids = ranks), the merges
// that reproduce tiktoken's lowest-rank-first merging (every split of a token into two tokens,
// ordered by the token's rank, then the parts' ranks), Split(pattern, Isolated) then ByteLevel
// without its regex, the ByteLevel decoder, and the special tokens above. added_tokens_decoder:
// tokenizer_config.json's object (ids as keys), or null.
TokenizerJson tiktoken_tokenizer_json(const std::vector<std::pair<std::string, int64_t>>& ranks,
                                      std::string_view pattern, const nlohmann::json& added_tokens_decoder,
                                      int64_t num_reserved);

}  // namespace moeserve::tokenizer
