// A GGUF file's tokenizer (tokenizer.ggml.*, tokenizer.chat_template) as the tokenizer.json and
// tokenizer_config.json the tokenizer module already reads (Tokenizer::from_json), and the inverse
// for the writer. Supported: tokenizer.ggml.model "gpt2" (byte-level BPE) with the pre-tokenizers
// llama.cpp names "qwen2" (Qwen2/Qwen3), "deepseek-v3", "gpt-4o" (gpt-oss's o200k) and "kimi-k2";
// each name stands for its split regexes, rebuilt here. Token types: 1 normal (in the BPE
// vocabulary), 3 control (an added special token), 4 user-defined (an added non-special token), 5
// unused (a padding id: in no vocabulary). Depends on io.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "moeserve/io/gguf_header.h"
#include "moeserve/io/gguf_writer.h"

namespace moeserve::model {

struct TokenizerFiles {
    std::string tokenizer_json;
    std::string config_json;
};

// From the metadata `h`; nullopt when it has no tokenizer.ggml.model. Throws kUnsupported naming the file and
// the key for a tokenizer model or pre-tokenizer other than the above, kInvalidModel for missing
// or mismatched arrays (tokens vs token_type lengths, a bos/eos id outside the vocabulary).
std::optional<TokenizerFiles> gguf_tokenizer_files(const io::GgufHeader& h);

// Sets tokenizer.ggml.* (and tokenizer.chat_template when the config has one) from the two files,
// with `vocab_size` token entries (ids with no token become "[PAD<id>]", type 5). Throws
// kUnsupported naming `label` for a tokenizer this cannot express.
void set_gguf_tokenizer_metadata(std::string_view tokenizer_json, std::string_view config_json, int64_t vocab_size,
                                 const std::string& label, io::GgufWriter& writer);

}  // namespace moeserve::model
