// The files a command reads from --model / --tokenizer, where a GGUF file stands in for a model
// directory: its metadata gives the config (model/formats/gguf.h) and the tokenizer
// (model/formats/gguf_tokenizer.h). Commands call these instead of reading DIR/config.json or
// Tokenizer::from_dir themselves.
#pragma once

#include <string>

#include "moeserve/model/registry.h"
#include "moeserve/tokenizer/tokenizer.h"

namespace moeserve::cli {

// Tokenizer::from_dir(path), or for a .gguf file the tokenizer of its metadata (Error
// kInvalidModel naming the file when it has none: pass --tokenizer DIR).
tokenizer::Tokenizer load_model_tokenizer(const std::string& path);
// The tokenizer of an opened model: --tokenizer's folder when given, else the model's (a GGUF
// file's metadata as read when it was opened).
tokenizer::Tokenizer load_model_tokenizer(const std::string& tokenizer_flag, const model::ModelSource& model);

}  // namespace moeserve::cli
