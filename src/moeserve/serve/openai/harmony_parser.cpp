// The harmony reader: a three-state machine (header, body, between messages) that holds back
// only what may still be the start of a marker.
#include "moeserve/serve/openai/harmony_parser.h"

#include <algorithm>
#include <array>

#include "moeserve/serve/openai/text_scan.h"

namespace moeserve::serve::openai {
namespace {

constexpr std::string_view kStart = "<|start|>";
constexpr std::string_view kChannel = "<|channel|>";
constexpr std::string_view kConstrain = "<|constrain|>";
constexpr std::string_view kMessage = "<|message|>";
constexpr std::string_view kEnd = "<|end|>";
constexpr std::string_view kCall = "<|call|>";
constexpr std::string_view kReturn = "<|return|>";
constexpr std::string_view kFunctions = "functions.";

// What ends a header without a body, and what ends a body (<|start|>: the model began the next
// message without ending this one).
constexpr std::array<std::string_view, 3> kHeaderEnds = {kEnd, kCall, kReturn};
constexpr std::array<std::string_view, 4> kBodyEnds = {kEnd, kCall, kReturn, kStart};

struct Found {
    size_t pos = std::string::npos;
    std::string_view marker;
};

template <size_t N>
Found first_of(std::string_view text, const std::array<std::string_view, N>& markers) {
    Found found;
    for (std::string_view m : markers) {
        const size_t pos = text.find(m);
        if (pos < found.pos) found = {pos, m};
    }
    return found;
}

template <size_t N>
size_t partial_of_any(std::string_view text, const std::array<std::string_view, N>& markers) {
    size_t keep = 0;
    for (std::string_view m : markers) keep = std::max(keep, partial_marker(text, m));
    return keep;
}

bool has_marker(std::string_view text) {
    for (std::string_view m : {kStart, kChannel, kConstrain, kMessage, kEnd, kCall, kReturn}) {
        if (text.find(m) != std::string_view::npos) return true;
    }
    return false;
}

std::string_view trim_spaces(std::string_view s) {
    while (!s.empty() && is_json_space(s.front())) s.remove_prefix(1);
    while (!s.empty() && is_json_space(s.back())) s.remove_suffix(1);
    return s;
}

// A header word: up to a space or the next marker.
std::string_view word_at(std::string_view text, size_t pos) {
    size_t end = pos;
    while (end < text.size() && !is_json_space(text[end]) && text[end] != '<') ++end;
    return text.substr(pos, end - pos);
}

struct Header {
    std::string_view channel;
    std::string_view recipient;
};

// The channel and the recipient of `<|start|>ROLE to=R<|channel|>C <|constrain|>T`, any order,
// each part optional. Only the last message start counts (a header that restarted).
Header parse_header(std::string_view text) {
    if (const size_t start = text.rfind(kStart); start != std::string_view::npos) {
        text.remove_prefix(start + kStart.size());
    }
    Header h;
    if (const size_t c = text.find(kChannel); c != std::string_view::npos)
        h.channel = word_at(text, c + kChannel.size());
    for (size_t at = text.find("to="); at != std::string_view::npos; at = text.find("to=", at + 1)) {
        if (at == 0 || is_json_space(text[at - 1]) || text[at - 1] == '>') {
            h.recipient = word_at(text, at + 3);
            break;
        }
    }
    return h;
}

}  // namespace

HarmonyDelta HarmonyParser::push(std::string_view text) {
    buffer_.append(text);
    return advance(false);
}

HarmonyDelta HarmonyParser::finish() { return advance(true); }

HarmonyDelta HarmonyParser::advance(bool at_end) {
    HarmonyDelta out;
    while (true) {
        bool progressed = false;
        switch (state_) {
            case State::kHeader:
                progressed = read_header(at_end, out);
                break;
            case State::kBody:
                progressed = read_body(at_end, out);
                break;
            case State::kBetween:
                progressed = read_between(at_end);
                break;
        }
        if (!progressed) return out;
    }
}

bool HarmonyParser::read_header(bool at_end, HarmonyDelta& out) {
    const size_t message = buffer_.find(kMessage);
    const Found end = first_of(buffer_, kHeaderEnds);
    if (message != std::string::npos && message < end.pos) {
        open_message(std::string_view(buffer_).substr(0, message), out);
        buffer_.erase(0, message + kMessage.size());
        state_ = State::kBody;
        return true;
    }
    if (end.pos == std::string::npos && !at_end) return false;  // the header is still coming
    // A header that ended without a body, or the output ended inside one: nothing to say, unless
    // the text has no marker at all (a model that did not write harmony): then it is content.
    const size_t cut = end.pos == std::string::npos ? buffer_.size() : end.pos;
    if (!has_marker(std::string_view(buffer_).substr(0, cut))) out.content.append(buffer_, 0, cut);
    buffer_.erase(0, end.pos == std::string::npos ? buffer_.size() : end.pos + end.marker.size());
    state_ = State::kBetween;
    return end.pos != std::string::npos;
}

void HarmonyParser::open_message(std::string_view header, HarmonyDelta& out) {
    const Header h = parse_header(header);
    if (h.recipient.substr(0, kFunctions.size()) == kFunctions) {
        const std::string_view name = h.recipient.substr(kFunctions.size());
        route_ = options_.tool_calls && !name.empty() ? Route::kCall : Route::kDrop;
        if (route_ == Route::kCall) {
            call_text_.clear();
            args_sent_ = 0;
            out.calls.push_back({num_calls_, new_tool_call_id(), std::string(name), ""});
        }
    } else if (!h.recipient.empty() || h.channel == "analysis") {
        // Thoughts, and messages to the built-in tools (browser, python), which are not calls here.
        route_ = options_.reasoning ? Route::kReasoning : Route::kDrop;
    } else {
        route_ = Route::kContent;  // final, a commentary preamble, or no channel named
    }
}

bool HarmonyParser::read_body(bool at_end, HarmonyDelta& out) {
    const Found end = first_of(buffer_, kBodyEnds);
    if (end.pos == std::string::npos) {
        const size_t keep = at_end ? 0 : partial_of_any(buffer_, kBodyEnds);
        emit_body(std::string_view(buffer_).substr(0, buffer_.size() - keep), out);
        buffer_.erase(0, buffer_.size() - keep);
        if (at_end) {  // unterminated: the message ends with the output
            close_message(out);
            state_ = State::kBetween;
        }
        return false;
    }
    emit_body(std::string_view(buffer_).substr(0, end.pos), out);
    buffer_.erase(0, end.pos + end.marker.size());
    close_message(out);
    state_ = end.marker == kStart ? State::kHeader : State::kBetween;
    return true;
}

void HarmonyParser::emit_body(std::string_view text, HarmonyDelta& out) {
    switch (route_) {
        case Route::kReasoning:
            out.reasoning.append(text);
            return;
        case Route::kContent:
            out.content.append(text);
            return;
        case Route::kDrop:
            return;
        case Route::kCall:
            break;
    }
    // Arguments: the body without surrounding spaces; trailing ones wait (more may follow them).
    call_text_.append(text);
    const std::string_view args = trim_spaces(call_text_);
    if (args.size() > args_sent_) {
        out.calls.push_back({num_calls_, std::nullopt, std::nullopt, std::string(args.substr(args_sent_))});
        args_sent_ = args.size();
    }
}

void HarmonyParser::close_message(HarmonyDelta& out) {
    if (route_ == Route::kCall) {
        if (args_sent_ == 0) out.calls.push_back({num_calls_, std::nullopt, std::nullopt, "{}"});
        ++num_calls_;
    }
    route_ = Route::kDrop;
}

bool HarmonyParser::read_between(bool at_end) {
    if (buffer_.empty()) return false;
    if (buffer_.compare(0, kStart.size(), kStart) == 0) {
        buffer_.erase(0, kStart.size());
        state_ = State::kHeader;
        return true;
    }
    if (!at_end && buffer_.size() < kStart.size() && kStart.substr(0, buffer_.size()) == buffer_) return false;
    state_ = State::kHeader;  // a message without <|start|> (lenient): its header begins here
    return true;
}

}  // namespace moeserve::serve::openai
