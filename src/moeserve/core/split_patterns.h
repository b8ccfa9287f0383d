// Pre-tokenizer split patterns that two modules need: the tokenizer module runs them (a tiktoken
// folder names only its Python class, tiktoken.h), and the GGUF reader in model/formats writes
// them into the tokenizer.json it rebuilds from a file's tokenizer.ggml.pre name.
#pragma once

#include <string_view>

namespace moeserve {

// Kimi-K2's pattern (tokenization_kimi.py; llama.cpp's pre-tokenizer "kimi-k2"), for PCRE2. Two
// spellings differ from the Python source, which tiktoken's Rust engine runs:
// - the class intersections [X&&[^\p{Han}]] become a class guarded by a negative lookahead,
//   (?:(?!\p{sc=Han})[X]), the same set of characters;
// - \p{Han} becomes \p{sc=Han}: the Rust engine's \p{Han} is the Script property, and PCRE2's bare
//   script name means Script_Extensions (which would also take punctuation such as U+3002).
// tests/tokenizer/tiktoken_test.cpp checks the splits against Python's regex module running the
// original pattern.
constexpr std::string_view kKimiK2SplitPattern =
    R"([\p{sc=Han}]+)"
    R"(|[^\r\n\p{L}\p{N}]?(?:(?!\p{sc=Han})[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}])*)"
    R"((?:(?!\p{sc=Han})[\p{Ll}\p{Lm}\p{Lo}\p{M}])+(?i:'s|'t|'re|'ve|'m|'ll|'d)?)"
    R"(|[^\r\n\p{L}\p{N}]?(?:(?!\p{sc=Han})[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}])+)"
    R"((?:(?!\p{sc=Han})[\p{Ll}\p{Lm}\p{Lo}\p{M}])*(?i:'s|'t|'re|'ve|'m|'ll|'d)?)"
    R"(|\p{N}{1,3})"
    R"(| ?[^\s\p{L}\p{N}]+[\r\n]*)"
    R"(|\s*[\r\n]+)"
    R"(|\s+(?!\S))"
    R"(|\s+)";

}  // namespace moeserve
