// Tokenizer: a Hugging Face tokenizer.json (+ tokenizer_config.json) that encodes and decodes
// exactly as HF `tokenizers`/transformers do for the supported components (NFC-style normalizers,
// Split/ByteLevel/Digits pre-tokenizers, BPE, ByteLevel decoder, added tokens).
// Depends on core only (PCRE2, utf8proc and nlohmann-json stay inside the implementation).
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "moeserve/tokenizer/added_tokens.h"
#include "moeserve/tokenizer/tokenizer_json.h"

namespace moeserve::tokenizer {

using TokenId = int32_t;

class Tokenizer {
public:
    // Loads dir/tokenizer.json and, if present, dir/tokenizer_config.json; without a
    // tokenizer.json, a tiktoken tokenizer (dir/tiktoken.model, tiktoken.h) whose class
    // tokenizer_config.json's auto_map names. Raises Error kNotFound when neither file is there,
    // kInvalidModel for malformed files and kUnsupported naming the file and the component type
    // (or tiktoken class) we do not implement. Takes ~0.2 s for a 150k-token vocabulary.
    static Tokenizer from_dir(const std::filesystem::path& dir);
    // The same from the files' contents; config_json may be empty. `where` names them in errors.
    static Tokenizer from_json(std::string_view tokenizer_json, std::string_view config_json,
                               std::string_view where = "tokenizer.json");

    ~Tokenizer();
    Tokenizer(Tokenizer&&) noexcept;
    Tokenizer& operator=(Tokenizer&&) noexcept;

    // Token ids of text (valid UTF-8, else Error kInvalidArgument). Added/special tokens written
    // in the text become their ids, as HF does by default. add_special_tokens adds what
    // transformers' tokenizer class adds (BOS for DeepSeek-V3's LlamaTokenizerFast, nothing for
    // Qwen3). Thread-safe.
    std::vector<TokenId> encode(std::string_view text, bool add_special_tokens = true) const;

    // Text of ids; ids unknown to the vocabulary are skipped (as HF does), bytes that do not form
    // UTF-8 become U+FFFD. skip_special_tokens drops added tokens marked special. Thread-safe.
    std::string decode(std::span<const TokenId> ids, bool skip_special_tokens = false) const;

    // Appends the raw bytes id decodes to (maybe a partial UTF-8 character) to out; returns false
    // and appends nothing if id is unknown or skipped as special. is_first: no token before it.
    // decode() is the lossy UTF-8 of the concatenation; IncrementalDetokenizer streams it.
    bool append_token_bytes(TokenId id, bool skip_special_tokens, bool is_first, std::string& out) const;

    std::optional<std::string> id_to_token(TokenId id) const;
    std::optional<TokenId> token_to_id(std::string_view token) const;
    // Number of distinct ids: the model vocabulary plus added tokens outside it (len(tokenizer)).
    int32_t vocab_size() const;
    // True if id is an added token marked special.
    bool is_special(TokenId id) const;

    // From tokenizer_config.json (bos_token etc. may be strings or {"content": ...} objects).
    std::optional<TokenId> bos_token_id() const;
    std::optional<TokenId> eos_token_id() const;
    std::optional<TokenId> pad_token_id() const;
    const std::optional<std::string>& bos_token() const;
    const std::optional<std::string>& eos_token() const;
    const std::optional<std::string>& pad_token() const;
    // The raw Jinja chat template of tokenizer_config.json (the "default" one if it is a list).
    const std::optional<std::string>& chat_template() const;
    // Whether encode(text, true) prepends the BOS token / appends the EOS token.
    bool adds_bos_token() const;
    bool adds_eos_token() const;

    const std::vector<AddedToken>& added_tokens() const;

private:
    struct Impl;
    explicit Tokenizer(std::unique_ptr<Impl> impl);
    static Tokenizer from_tiktoken(const std::filesystem::path& model_path, const std::filesystem::path& config_path);
    static Tokenizer load(TokenizerJson parsed, std::string_view config_json, std::string_view where,
                          std::string_view config_where);
    std::unique_ptr<Impl> impl_;
};

// The tokenizer.json text a tiktoken folder (dir/tiktoken.model and its tokenizer_config.json) reads
// as: what from_dir runs for it, for a writer that needs the file (the GGUF writer). Throws as
// from_dir does.
std::string tiktoken_folder_tokenizer_json(const std::filesystem::path& dir);

}  // namespace moeserve::tokenizer
