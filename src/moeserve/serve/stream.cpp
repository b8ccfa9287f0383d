// ChoiceStream: vLLM's frontend stop-string semantics (match anywhere in the new text, cut before
// it unless include_stop_str_in_output, hold back len(longest stop) - 1 bytes while streaming).
#include "moeserve/serve/stream.h"

#include <algorithm>

namespace moeserve::serve {
namespace {

const char* reason_name(ipc::FinishReason r) {
    switch (r) {
        case ipc::FinishReason::kStop: return "stop";
        case ipc::FinishReason::kLength: return "length";
        case ipc::FinishReason::kAbort: return "abort";
        case ipc::FinishReason::kError: return "error";
        default: return "";
    }
}

// Largest n <= end that does not cut a UTF-8 character of s.
size_t char_boundary(const std::string& s, size_t end) {
    while (end > 0 && end < s.size() && (static_cast<unsigned char>(s[end]) & 0xC0) == 0x80) --end;
    return end;
}

}  // namespace

ChoiceStream::ChoiceStream(const tokenizer::Tokenizer& tokenizer,
                           const openai::GenerationParams& params)
    : tokenizer_(tokenizer), params_(params), detok_(tokenizer, params.skip_special_tokens) {
    if (!params.include_stop_str_in_output) {
        for (const auto& s : params.stop) hold_back_ = std::max(hold_back_, s.size() - 1);
    }
}

openai::TokenLogprob ChoiceStream::logprob_text(const ipc::TokenLogprobs& lp) const {
    openai::TokenLogprob t;
    t.token = tokenizer_.decode(std::span<const int32_t>(&lp.token_id, 1));
    t.logprob = lp.logprob;
    for (const auto& [id, value] : lp.top) {
        t.top.emplace_back(tokenizer_.decode(std::span<const int32_t>(&id, 1)), value);
    }
    return t;
}

void ChoiceStream::check_stop_strings(size_t previous_size) {
    size_t best = std::string::npos;
    const std::string* match = nullptr;
    for (const auto& s : params_.stop) {
        const size_t from = previous_size >= s.size() ? previous_size - s.size() + 1 : 0;
        const size_t pos = text_.find(s, from);
        if (pos != std::string::npos && pos < best) {
            best = pos;
            match = &s;
        }
    }
    if (!match) return;
    text_.resize(params_.include_stop_str_in_output ? best + match->size() : best);
    released_ = std::min(released_, text_.size());
    finished_ = true;
    stopped_by_string_ = true;
    finish_reason_ = "stop";
    stop_reason_ = *match;
}

ChoiceStream::Delta ChoiceStream::push(const ipc::RequestOutput& out) {
    Delta delta;
    if (finished_) return delta;
    const auto& ids = out.new_token_ids;
    for (size_t k = 0; k < ids.size() && !finished_; ++k) {
        ++num_tokens_;
        if (params_.logprobs && k < out.new_logprobs.size()) {
            delta.logprobs.push_back(logprob_text(out.new_logprobs[k]));
        }
        const bool is_stop_token = out.finish_reason == ipc::FinishReason::kStop &&
                                   out.stop_token_id && k + 1 == ids.size() &&
                                   ids[k] == *out.stop_token_id;
        if (is_stop_token && !params_.include_stop_str_in_output) continue;
        const size_t before = text_.size();
        text_ += detok_.push(ids[k]);
        if (!params_.stop.empty()) check_stop_strings(before);
    }
    if (!finished_ && out.finish_reason != ipc::FinishReason::kNone) {
        const size_t before = text_.size();
        text_ += detok_.flush();
        if (!params_.stop.empty()) check_stop_strings(before);
        if (!finished_) {
            finished_ = true;
            finish_reason_ = reason_name(out.finish_reason);
            if (out.stop_token_id &&
                std::find(params_.stop_token_ids.begin(), params_.stop_token_ids.end(),
                          *out.stop_token_id) != params_.stop_token_ids.end()) {
                stop_reason_ = *out.stop_token_id;
            }
        }
    }
    size_t end = text_.size();
    if (!finished_) end = char_boundary(text_, end > hold_back_ ? end - hold_back_ : 0);
    if (end > released_) {
        delta.text = text_.substr(released_, end - released_);
        released_ = end;
    }
    return delta;
}

}  // namespace moeserve::serve
