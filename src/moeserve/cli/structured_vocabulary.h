// The vocabulary structured outputs compile grammars against: the bytes of every token id of the
// model, decoded by the model's tokenizer (the engine itself never sees the tokenizer).
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <memory>
#include <string>

#include "moeserve/structured/vocabulary.h"

namespace moeserve::cli {

// Reads model_dir's tokenizer (tokenizer.json, or a GGUF file's metadata; model_files.h): ids [0, vocab_size) with
// their bytes (special tokens and ids the tokenizer does not know get none: a grammar never allows them); EOS =
// model_eos_token_ids of config (the config.json in config_dir) and the tokenizer, without generation_config.json (a
// request's own stop ids, which hold those, are allowed where its grammar is complete anyway).
// Null (structured outputs off) when the tokenizer cannot be loaded.
std::shared_ptr<const structured::Vocabulary> load_structured_vocabulary(const std::string& model_dir,
                                                                         int64_t vocab_size,
                                                                         const nlohmann::json& config,
                                                                         const std::string& config_dir,
                                                                         std::string* error);

}  // namespace moeserve::cli
