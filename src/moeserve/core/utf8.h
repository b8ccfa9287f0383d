// UTF-8 helpers (the tokenizer, chat templates, grammars): code point iteration, validation, Rust-compatible lossy
// conversion (one U+FFFD per maximal invalid subpart) and detection of an incomplete tail.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace moeserve {

// Length in bytes of the valid UTF-8 sequence starting at text[pos], or 0 if the bytes there are
// not a complete valid sequence (invalid lead, bad continuation, overlong, surrogate, truncated).
size_t utf8_valid_sequence_length(std::string_view text, size_t pos);

// Decodes the code point starting at text[pos]; precondition: text is valid UTF-8 there.
// Sets *length to the sequence length.
char32_t utf8_decode(std::string_view text, size_t pos, size_t* length);

// Appends the UTF-8 encoding of cp (cp <= 0x10FFFF) to out.
void utf8_append(char32_t cp, std::string& out);

// True if text is entirely valid UTF-8. Returns the offset of the first bad byte in *bad_offset.
bool utf8_is_valid(std::string_view text, size_t* bad_offset = nullptr);

// Appends bytes to out, replacing each maximal invalid subpart with U+FFFD, exactly as Rust's
// String::from_utf8_lossy (which Hugging Face decoders use).
void utf8_append_lossy(std::string_view bytes, std::string& out);

// Number of trailing bytes that form a valid but unfinished UTF-8 sequence (0..3). Lossy
// conversion of bytes[0, n - tail) followed by the rest gives the same result as converting all
// bytes at once, so a streaming decoder can hold these bytes back until more arrive.
size_t utf8_incomplete_tail(std::string_view bytes);

// Unicode White_Space, as Rust's char::is_whitespace.
bool is_unicode_whitespace(char32_t cp);

}  // namespace moeserve
