// Chunk-by-chunk timing of one streamed response (rules in stream_reader.h).
#include "moeserve/bench/stream_reader.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

namespace moeserve::bench {

namespace {

double seconds(std::chrono::steady_clock::duration d) { return std::chrono::duration<double>(d).count(); }

// The string at j[key] if it is one, else "".
std::string string_at(const nlohmann::json& j, const char* key) {
    const auto it = j.find(key);
    return it != j.end() && it->is_string() ? it->get<std::string>() : std::string();
}

}  // namespace

void StreamReader::feed(std::string_view bytes, TimePoint now) {
    payloads_.clear();
    sse_.feed(bytes, &payloads_);
    for (const std::string& p : payloads_) take(p, now);
}

void StreamReader::take(const std::string& payload, TimePoint now) {
    if (payload == "[DONE]" || !error_.empty()) return;
    const auto j = nlohmann::json::parse(payload, nullptr, /*allow_exceptions=*/false);
    if (!j.is_object()) {
        error_ = fmt::format("malformed stream chunk (not a JSON object): {}", payload.substr(0, 200));
        return;
    }
    if (const auto e = j.find("error"); e != j.end() && !e->is_null()) {
        const std::string msg = e->is_object() ? string_at(*e, "message") : e->dump();
        error_ = fmt::format("error chunk in stream: {}", msg.empty() ? e->dump() : msg);
        return;
    }
    last_any_ = now;
    if (const auto u = j.find("usage"); u != j.end() && u->is_object()) {
        if (const auto ct = u->find("completion_tokens"); ct != u->end() && ct->is_number_integer()) {
            output_tokens_ = ct->get<int64_t>();
        }
    }
    const auto choices = j.find("choices");
    if (choices == j.end() || !choices->is_array() || choices->empty() || !(*choices)[0].is_object()) {
        return;
    }
    const auto& choice = (*choices)[0];
    std::string text;
    if (backend_ == Backend::kOpenAiChat) {
        const auto delta = choice.find("delta");
        if (delta == choice.end() || !delta->is_object()) return;
        text = string_at(*delta, "content");
        if (text.empty() && string_at(*delta, "reasoning_content").empty()) return;
    } else {
        text = string_at(choice, "text");
    }
    if (!got_content_) {
        got_content_ = true;
        ttft_s_ = seconds(now - start_);
    } else {
        itl_s_.push_back(seconds(now - last_content_));
    }
    last_content_ = now;
    text_ += text;
}

void StreamReader::finish(RequestOutput& out) {
    payloads_.clear();
    sse_.finish(&payloads_);
    for (const std::string& p : payloads_) take(p, last_any_ > last_content_ ? last_any_ : last_content_);
    out.generated_text = std::move(text_);
    out.output_tokens = output_tokens_;
    out.ttft_s = ttft_s_;
    out.itl_s = std::move(itl_s_);
    if (!error_.empty()) {
        out.success = false;
        out.error = error_;
    } else if (!got_content_) {
        out.success = false;
        out.error = "Never received a valid chunk to calculate TTFT. This response will be marked as failed!";
    } else {
        out.success = true;
        out.error.clear();
    }
    const TimePoint last = backend_ == Backend::kOpenAiChat ? last_any_ : last_content_;
    out.latency_s = got_content_ ? seconds(last - start_) : 0.0;
}

}  // namespace moeserve::bench
