// Streaming detokenization: feed generated ids one at a time and get text that is always whole
// UTF-8 characters; the pieces concatenate to Tokenizer::decode of all ids.
#pragma once

#include <cstdint>
#include <string>

#include "moeserve/tokenizer/tokenizer.h"

namespace moeserve::tokenizer {

class IncrementalDetokenizer {
public:
    // tokenizer must outlive this object.
    explicit IncrementalDetokenizer(const Tokenizer& tokenizer, bool skip_special_tokens = false)
        : tokenizer_(&tokenizer), skip_special_tokens_(skip_special_tokens) {}

    // Adds id and returns the text that became complete (maybe empty: bytes of an unfinished
    // character are held back until it completes). Not thread-safe; one per stream.
    std::string push(TokenId id);

    // Returns whatever is held back (an unfinished character becomes U+FFFD) and resets the
    // byte buffer. After flush, push continues the same sequence.
    std::string flush();

private:
    const Tokenizer* tokenizer_;
    bool skip_special_tokens_;
    bool seen_token_ = false;
    std::string pending_;  // bytes of an unfinished UTF-8 character (at most 3)
};

}  // namespace moeserve::tokenizer
