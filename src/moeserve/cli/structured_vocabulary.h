// The vocabulary structured outputs compile grammars against: the bytes of every token id of the
// model, decoded by the model's tokenizer (the engine itself never sees the tokenizer).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "moeserve/structured/vocabulary.h"

namespace moeserve::cli {

// Reads model_dir/tokenizer.json: ids [0, vocab_size) with their bytes (special tokens and ids the
// tokenizer does not know get none: a grammar never allows them); EOS = eos_token_ids plus the
// tokenizer's eos token. Null (structured outputs off) when the tokenizer cannot be loaded.
std::shared_ptr<const structured::Vocabulary> load_structured_vocabulary(const std::string& model_dir,
                                                                         int64_t vocab_size,
                                                                         std::vector<int32_t> eos_token_ids,
                                                                         std::string* error);

}  // namespace moeserve::cli
