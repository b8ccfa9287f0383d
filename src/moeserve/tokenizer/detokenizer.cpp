// IncrementalDetokenizer: append each token's bytes, emit all but a trailing unfinished UTF-8
// sequence. Lossy conversion of the emitted prefix plus the held tail equals converting the whole
// (see utf8_incomplete_tail), so the stream matches decode() exactly.
#include "moeserve/tokenizer/detokenizer.h"

#include "moeserve/core/utf8.h"

namespace moeserve::tokenizer {

std::string IncrementalDetokenizer::push(TokenId id) {
    if (tokenizer_->append_token_bytes(id, skip_special_tokens_, !seen_token_, pending_)) {
        seen_token_ = true;
    }
    size_t tail = utf8_incomplete_tail(pending_);
    std::string text;
    utf8_append_lossy(std::string_view(pending_).substr(0, pending_.size() - tail), text);
    pending_.erase(0, pending_.size() - tail);
    return text;
}

std::string IncrementalDetokenizer::flush() {
    std::string text;
    utf8_append_lossy(pending_, text);
    pending_.clear();
    return text;
}

}  // namespace moeserve::tokenizer
