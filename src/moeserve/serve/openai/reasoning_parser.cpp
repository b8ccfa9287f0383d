#include "moeserve/serve/openai/reasoning_parser.h"

#include "moeserve/serve/openai/harmony_parser.h"
#include "moeserve/serve/openai/text_scan.h"

namespace moeserve::serve::openai {

ReasoningParser::ReasoningParser(Format format, Start start) : format_(format), state_(start) {
    if (format == Format::kGptOss) {
        harmony_ = std::make_unique<HarmonyParser>(HarmonyParser::Options{.reasoning = true, .tool_calls = false});
    }
}
ReasoningParser::~ReasoningParser() = default;
ReasoningParser::ReasoningParser(ReasoningParser&&) noexcept = default;
ReasoningParser& ReasoningParser::operator=(ReasoningParser&&) noexcept = default;

ReasoningDelta ReasoningParser::push(std::string_view text) {
    if (harmony_) {
        HarmonyDelta d = harmony_->push(text);
        return {std::move(d.reasoning), std::move(d.content)};
    }
    buffer_.append(text);
    return advance(false);
}

ReasoningDelta ReasoningParser::finish() {
    if (harmony_) {
        HarmonyDelta d = harmony_->finish();
        return {std::move(d.reasoning), std::move(d.content)};
    }
    return advance(true);
}

ReasoningDelta ReasoningParser::advance(bool at_end) {
    ReasoningDelta out;
    while (true) {
        if (state_ == Start::kContent) {
            out.content += buffer_;
            buffer_.clear();
            return out;
        }
        if (state_ == Start::kOpen) {
            // Spaces, then either <think> (reasoning follows) or anything else (the format decides).
            size_t p = 0;
            while (p < buffer_.size() && is_json_space(buffer_[p])) ++p;
            const std::string_view rest = std::string_view(buffer_).substr(p);
            if (rest.substr(0, kThinkStart.size()) == kThinkStart) {
                buffer_.erase(0, p + kThinkStart.size());
                state_ = Start::kReasoning;
                continue;
            }
            const bool may_open = rest.size() < kThinkStart.size() && kThinkStart.substr(0, rest.size()) == rest;
            if (may_open && !at_end) return out;  // wait: this may be the start of <think>
            state_ = format_ == Format::kDeepSeekR1 ? Start::kReasoning : Start::kContent;
            continue;
        }
        // In reasoning: up to </think>.
        const size_t end = buffer_.find(kThinkEnd);
        if (end == std::string::npos) {
            const size_t keep = at_end ? 0 : partial_marker(buffer_, kThinkEnd);
            out.reasoning += buffer_.substr(0, buffer_.size() - keep);
            buffer_.erase(0, buffer_.size() - keep);
            return out;
        }
        out.reasoning += buffer_.substr(0, end);
        buffer_.erase(0, end + kThinkEnd.size());
        state_ = Start::kContent;
    }
}

ReasoningParser::Start ReasoningParser::start_of(std::string_view prompt) {
    while (!prompt.empty() && is_json_space(prompt.back())) prompt.remove_suffix(1);
    const auto ends_with = [&](std::string_view m) {
        return prompt.size() >= m.size() && prompt.substr(prompt.size() - m.size()) == m;
    };
    if (ends_with(kThinkStart)) return Start::kReasoning;
    if (ends_with(kThinkEnd)) return Start::kContent;
    return Start::kOpen;
}

std::vector<std::string> reasoning_parser_names() { return {"deepseek_r1", "qwen3", "openai_gptoss"}; }

bool reasoning_format_of(const std::string& name, ReasoningParser::Format& format) {
    if (name == "deepseek_r1")
        format = ReasoningParser::Format::kDeepSeekR1;
    else if (name == "qwen3")
        format = ReasoningParser::Format::kQwen3;
    else if (name == "openai_gptoss")
        format = ReasoningParser::Format::kGptOss;
    else
        return false;
    return true;
}

}  // namespace moeserve::serve::openai
