#include "moeserve/serve/output_processor.h"

#include <algorithm>

namespace moeserve::serve {

namespace {

// The largest n <= len at a UTF-8 character boundary of text.
size_t char_boundary(const std::string& text, size_t len) {
    while (len > 0 && len < text.size() && (static_cast<unsigned char>(text[len]) & 0xC0) == 0x80) --len;
    return len;
}

}  // namespace

void OutputProcessor::add_request(const std::string& request_id, const OutputOptions& options) {
    State s{options, tokenizer::IncrementalDetokenizer(tokenizer_, options.skip_special_tokens), {}, 0, 0, 0};
    std::erase_if(s.options.stop, [](const std::string& x) { return x.empty(); });
    for (const auto& stop : s.options.stop) s.max_stop_len = std::max(s.max_stop_len, stop.size());
    states_.insert_or_assign(request_id, std::move(s));
}

std::optional<std::string> OutputProcessor::find_stop(State& s) const {
    if (s.options.stop.empty()) return std::nullopt;
    // A stop string may straddle the old and the new text.
    const size_t from = s.num_checked >= s.max_stop_len ? s.num_checked - s.max_stop_len + 1 : 0;
    size_t best = std::string::npos;
    const std::string* hit = nullptr;
    for (const auto& stop : s.options.stop) {
        const size_t pos = s.text.find(stop, from);
        if (pos != std::string::npos && (pos < best || (pos == best && stop.size() > hit->size()))) {
            best = pos;
            hit = &stop;
        }
    }
    s.num_checked = s.text.size();
    if (!hit) return std::nullopt;
    s.text.resize(best + (s.options.include_stop_str_in_output ? hit->size() : 0));
    return *hit;
}

OutputProcessor::Processed OutputProcessor::process(std::span<const ipc::RequestOutput> outputs) {
    Processed out;
    for (const auto& o : outputs) {
        const auto it = states_.find(o.request_id);
        if (it == states_.end()) continue;
        State& s = it->second;
        TextDelta d;
        d.request_id = o.request_id;
        d.token_ids = o.new_token_ids;
        d.logprobs = o.new_logprobs;
        d.prompt_logprobs = o.prompt_logprobs;
        d.num_prompt_tokens = o.num_prompt_tokens;
        d.num_cached_tokens = o.num_cached_tokens;
        d.error = o.error;
        d.finish_reason = o.finish_reason;
        d.stop_token_id = o.stop_token_id;
        d.finished = o.finish_reason != ipc::FinishReason::kNone;
        for (size_t i = 0; i < o.new_token_ids.size(); ++i) {
            const bool is_stop_token =
                o.stop_token_id && i + 1 == o.new_token_ids.size() && o.new_token_ids[i] == *o.stop_token_id;
            if (is_stop_token && !s.options.include_stop_str_in_output) continue;
            s.text += s.detok.push(o.new_token_ids[i]);
        }
        if (d.finished) s.text += s.detok.flush();
        if (auto stop = find_stop(s)) {
            if (!d.finished) out.engine_aborts.push_back(o.request_id);
            d.finished = true;
            d.finish_reason = ipc::FinishReason::kStop;
            d.stop_string = std::move(stop);
            d.stop_token_id.reset();
        }
        size_t end = s.text.size();
        if (!d.finished && !s.options.include_stop_str_in_output && s.max_stop_len > 1) {
            end = char_boundary(s.text, end >= s.max_stop_len - 1 ? end - (s.max_stop_len - 1) : 0);
        }
        if (end > s.num_sent) {
            d.text = s.text.substr(s.num_sent, end - s.num_sent);
            s.num_sent = end;
        }
        if (d.finished) states_.erase(it);
        out.deltas.push_back(std::move(d));
    }
    return out;
}

}  // namespace moeserve::serve
