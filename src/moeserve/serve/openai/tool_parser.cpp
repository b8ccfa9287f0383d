// The tool-call parsers (hermes, deepseek_v3, kimi_k2, glm45, openai): small state machines over the
// streamed text that hold back only what could still be the start of a marker.
#include "moeserve/serve/openai/tool_parser.h"

#include <nlohmann/json.hpp>

#include <random>

#include "moeserve/serve/openai/harmony_parser.h"
#include "moeserve/serve/openai/text_scan.h"

namespace moeserve::serve::openai {
namespace {

using Json = nlohmann::ordered_json;

std::string_view trim(std::string_view s) {
    while (!s.empty() && is_json_space(s.front())) s.remove_prefix(1);
    while (!s.empty() && is_json_space(s.back())) s.remove_suffix(1);
    return s;
}

// Finds the extent of one JSON value in a growing text, character by character, without parsing
// it: where it starts, and where it ends once it has (a container's closing bracket, a string's
// closing quote, or the delimiter after a number / literal).
class JsonValueScanner {
public:
    // Scans text[pos_, text.size()); text only ever grows between calls.
    void scan(std::string_view text) {
        for (; pos_ < text.size() && !done_; ++pos_) {
            const char c = text[pos_];
            if (!started_) {
                if (is_json_space(c)) continue;
                started_ = true;
                begin_ = pos_;
                if (c == '{' || c == '[')
                    ++depth_;
                else if (c == '"')
                    in_string_ = true;
                else
                    primitive_ = true;
                continue;
            }
            if (in_string_) {
                if (escape_)
                    escape_ = false;
                else if (c == '\\')
                    escape_ = true;
                else if (c == '"') {
                    in_string_ = false;
                    if (depth_ == 0) finish_at(pos_ + 1);
                }
            } else if (primitive_) {
                if (c == ',' || c == '}' || c == ']' || is_json_space(c)) {
                    done_ = true;
                    end_ = pos_;
                    return;
                }
            } else if (c == '"') {
                in_string_ = true;
            } else if (c == '{' || c == '[') {
                ++depth_;
            } else if (c == '}' || c == ']') {
                if (--depth_ == 0) finish_at(pos_ + 1);
            }
        }
    }
    bool started() const { return started_; }
    bool done() const { return done_; }
    size_t begin() const { return begin_; }
    // End of the value when done; else how far it has been read.
    size_t end() const { return done_ ? end_ : pos_; }
    // A primitive's end is only known at its delimiter; the text ending also ends it.
    void finish_text(size_t size) {
        if (started_ && primitive_ && !done_) finish_at(size);
    }

private:
    void finish_at(size_t end) {
        done_ = true;
        end_ = end;
        pos_ = end - 1;  // the loop's ++ lands on end
    }
    size_t pos_ = 0, begin_ = 0, end_ = 0;
    int depth_ = 0;
    bool started_ = false, done_ = false, in_string_ = false, escape_ = false, primitive_ = false;
};

// Position just after `"key"` + optional spaces + `:` + optional spaces, or npos.
size_t after_key(std::string_view text, std::string_view key) {
    const std::string quoted = "\"" + std::string(key) + "\"";
    for (size_t at = text.find(quoted); at != std::string_view::npos; at = text.find(quoted, at + 1)) {
        size_t p = at + quoted.size();
        while (p < text.size() && is_json_space(text[p])) ++p;
        if (p < text.size() && text[p] == ':') return p + 1;
    }
    return std::string_view::npos;
}

// What both formats share: the text not yet looked at (buffer_) and, inside a call, the call's
// text up to its end marker (call_).
class MarkedToolParser : public ToolParser {
public:
    ToolParseDelta push(std::string_view text) final {
        buffer_.append(text);
        return advance(false);
    }
    ToolParseDelta finish() final { return advance(true); }

protected:
    virtual ToolParseDelta advance(bool at_end) = 0;

    // Moves buffer_ into call_ up to end_marker (consumed with it). True once the marker came;
    // until then, unless at_end, a tail that may be the marker's start waits in buffer_.
    bool take_call_text(std::string_view end_marker, bool at_end) {
        const size_t end = buffer_.find(end_marker);
        const bool closed = end != std::string::npos;
        call_.append(buffer_, 0, closed ? end : buffer_.size());
        buffer_.erase(0, closed ? end + end_marker.size() : buffer_.size());
        if (!closed && !at_end) {
            const size_t keep = partial_marker(call_, end_marker);
            buffer_ = call_.substr(call_.size() - keep);
            call_.resize(call_.size() - keep);
        }
        return closed;
    }

    std::string buffer_;  // text not yet looked at
    std::string call_;    // the current call's text, between its markers
};

// hermes: <tool_call>{"name": "f", "arguments": {...}}</tool_call>, repeated.
class HermesParser : public MarkedToolParser {
private:
    static constexpr std::string_view kBegin = "<tool_call>";
    static constexpr std::string_view kEnd = "</tool_call>";

    ToolParseDelta advance(bool at_end) override {
        ToolParseDelta out;
        while (true) {
            if (!in_call_) {
                const size_t begin = buffer_.find(kBegin);
                if (begin == std::string::npos) {
                    const size_t keep = at_end ? 0 : partial_marker(buffer_, kBegin);
                    if (num_calls_ == 0) out.content += buffer_.substr(0, buffer_.size() - keep);
                    buffer_.erase(0, buffer_.size() - keep);
                    return out;
                }
                if (num_calls_ == 0) out.content += buffer_.substr(0, begin);
                buffer_.erase(0, begin + kBegin.size());
                start_call();
            }
            const bool closed = take_call_text(kEnd, at_end);
            if (!closed && !at_end) {
                stream_call(out);
                return out;
            }
            end_call(out);
            if (!closed) return out;
        }
    }

    void start_call() {
        in_call_ = true;
        call_.clear();
        scanner_ = JsonValueScanner();
        args_at_ = std::string::npos;
        args_sent_ = 0;
        name_sent_ = false;
    }

    // Releases the name once it is whole, then the arguments as far as they are read.
    void stream_call(ToolParseDelta& out) {
        if (!name_sent_) {
            const size_t at = after_key(call_, "name");
            if (at == std::string::npos) return;
            JsonValueScanner name;
            name.scan(std::string_view(call_).substr(at));
            if (!name.done()) return;
            const Json parsed = Json::parse(call_.substr(at + name.begin(), name.end() - name.begin()), nullptr, false);
            if (!parsed.is_string()) return;
            out.calls.push_back({num_calls_, new_tool_call_id(), parsed.get<std::string>(), ""});
            name_sent_ = true;
        }
        if (args_at_ == std::string::npos) {
            args_at_ = after_key(call_, "arguments");
            if (args_at_ == std::string::npos) return;
        }
        const std::string_view args = std::string_view(call_).substr(args_at_);
        scanner_.scan(args);
        if (!scanner_.started()) return;
        const size_t end = scanner_.end();
        if (end > scanner_.begin() + args_sent_) {
            out.calls.push_back(
                {num_calls_, std::nullopt, std::nullopt,
                 std::string(args.substr(scanner_.begin() + args_sent_, end - scanner_.begin() - args_sent_))});
            args_sent_ = end - scanner_.begin();
        }
    }

    void end_call(ToolParseDelta& out) {
        in_call_ = false;
        const Json parsed = Json::parse(trim(call_), nullptr, false);
        const bool valid = parsed.is_object() && parsed.contains("name") && parsed["name"].is_string();
        if (valid) {
            if (!name_sent_) {
                out.calls.push_back({num_calls_, new_tool_call_id(), parsed["name"].get<std::string>(), ""});
                name_sent_ = true;
            }
            stream_call(out);
            if (args_at_ != std::string::npos) {
                scanner_.finish_text(call_.size() - args_at_);
                stream_call(out);
            }
            if (args_sent_ == 0) {
                // No arguments key (or nothing streamed of it): the parsed value, or {}.
                const Json args = parsed.contains("arguments") ? parsed["arguments"] : Json::object();
                out.calls.push_back({num_calls_, std::nullopt, std::nullopt, args.dump()});
            }
        } else if (!name_sent_) {
            // Not a call after all: give the text back as content while nothing of it went out.
            if (num_calls_ == 0) out.content += std::string(kBegin) + call_;
            return;
        }
        ++num_calls_;
    }

    bool in_call_ = false, name_sent_ = false;
    JsonValueScanner scanner_;
    size_t args_at_ = std::string::npos, args_sent_ = 0;
};

// The formats whose calls sit in a section: SECTION_BEGIN (CALL_BEGIN ... CALL_END)* SECTION_END.
// Before the section, content runs to its first marker (a call marker alone opens it too); after,
// text between calls (newlines, the section's end) is dropped. A format supplies its markers and
// stream_call, which releases what it can of call_ (whole: the call ended, or the output did).
class SectionToolParser : public MarkedToolParser {
protected:
    SectionToolParser(std::string_view section_begin, std::string_view call_begin, std::string_view call_end)
        : section_begin_(section_begin), call_begin_(call_begin), call_end_(call_end) {}

    virtual void start_call() = 0;
    virtual void stream_call(ToolParseDelta& out, bool whole) = 0;
    // Whether the call being closed produced a call (its name went out).
    virtual bool call_named() const = 0;

private:
    ToolParseDelta advance(bool at_end) final {
        ToolParseDelta out;
        while (true) {
            if (!in_call_) {
                const bool before = !in_section_;
                const size_t section = before ? buffer_.find(section_begin_) : std::string::npos;
                const size_t call = buffer_.find(call_begin_);
                const size_t at = std::min(section, call);
                if (at == std::string::npos) {
                    size_t keep = at_end ? 0 : partial_marker(buffer_, call_begin_);
                    if (before && !at_end) keep = std::max(keep, partial_marker(buffer_, section_begin_));
                    if (before) out.content += buffer_.substr(0, buffer_.size() - keep);
                    buffer_.erase(0, buffer_.size() - keep);
                    return out;
                }
                if (before) out.content += buffer_.substr(0, at);
                in_section_ = true;
                if (at == section) {
                    buffer_.erase(0, at + section_begin_.size());
                    continue;
                }
                buffer_.erase(0, at + call_begin_.size());
                in_call_ = true;
                call_.clear();
                start_call();
            }
            const bool closed = take_call_text(call_end_, at_end);
            stream_call(out, closed || at_end);
            if (!closed && !at_end) return out;
            in_call_ = false;
            if (call_named()) ++num_calls_;
            if (!closed) return out;
        }
    }

    std::string_view section_begin_, call_begin_, call_end_;
    bool in_section_ = false, in_call_ = false;
};

// deepseek_v3: calls between <｜tool▁calls▁begin｜> and <｜tool▁calls▁end｜>, each
// <｜tool▁call▁begin｜>TYPE<｜tool▁sep｜>NAME\n```json\nARGS\n```<｜tool▁call▁end｜>. Also the later
// DeepSeek form without type and fence: <｜tool▁call▁begin｜>NAME<｜tool▁sep｜>ARGS<｜tool▁call▁end｜>.
class DeepSeekV3Parser : public SectionToolParser {
public:
    DeepSeekV3Parser() : SectionToolParser(kCallsBegin, kCallBegin, kCallEnd) {}

private:
    static constexpr std::string_view kCallsBegin = "<｜tool▁calls▁begin｜>";
    static constexpr std::string_view kCallBegin = "<｜tool▁call▁begin｜>";
    static constexpr std::string_view kSep = "<｜tool▁sep｜>";
    static constexpr std::string_view kCallEnd = "<｜tool▁call▁end｜>";

    void start_call() override {
        name_sent_ = false;
        args_at_ = std::string::npos;
        args_sent_ = 0;
    }
    bool call_named() const override { return name_sent_; }

    // Finds the name (and where the arguments start), then releases the arguments as far as they
    // cannot be the closing fence.
    void stream_call(ToolParseDelta& out, bool whole) override {
        if (!name_sent_) {
            const size_t sep = call_.find(kSep);
            if (sep == std::string::npos) return;
            const size_t after = sep + kSep.size();
            size_t p = after;
            while (p < call_.size() && is_json_space(call_[p])) ++p;
            if (p == call_.size() && !whole) return;
            std::string name;
            if (p < call_.size() && (call_[p] == '{' || call_[p] == '[')) {  // NAME<sep>ARGS
                name = std::string(trim(std::string_view(call_).substr(0, sep)));
                args_at_ = p;
            } else {  // TYPE<sep>NAME\n```json\nARGS
                const size_t newline = call_.find('\n', after);
                if (newline == std::string::npos && !whole) return;
                name = std::string(trim(std::string_view(call_).substr(
                    after, newline == std::string::npos ? std::string::npos : newline - after)));
                args_at_ = newline == std::string::npos ? call_.size() : newline + 1;
                const std::string_view fence = "```json";
                const std::string_view rest = std::string_view(call_).substr(args_at_);
                if (rest.size() < fence.size() && fence.substr(0, rest.size()) == rest && !whole) {
                    args_at_ = std::string::npos;  // the fence may still be coming
                    return;
                }
                if (rest.substr(0, fence.size()) == fence) args_at_ += fence.size();
            }
            if (name.empty()) return;
            out.calls.push_back({num_calls_, new_tool_call_id(), name, ""});
            name_sent_ = true;
        }
        if (args_at_ == std::string::npos) return;
        std::string_view args = std::string_view(call_).substr(std::min(args_at_, call_.size()));
        while (!args.empty() && is_json_space(args.front())) args.remove_prefix(1), ++args_at_;
        // The fence and spaces at the end are not arguments; while streaming they may be a
        // partial end, so hold back trailing spaces and backticks.
        while (!args.empty() && (is_json_space(args.back()) || args.back() == '`')) args.remove_suffix(1);
        if (args.size() > args_sent_) {
            out.calls.push_back({num_calls_, std::nullopt, std::nullopt, std::string(args.substr(args_sent_))});
            args_sent_ = args.size();
        }
        if (whole && args_sent_ == 0) out.calls.push_back({num_calls_, std::nullopt, std::nullopt, "{}"});
    }

    bool name_sent_ = false;
    size_t args_at_ = std::string::npos, args_sent_ = 0;
};

// kimi_k2: calls between <|tool_calls_section_begin|> and <|tool_calls_section_end|>, each
// <|tool_call_begin|>functions.NAME:INDEX<|tool_call_argument_begin|>ARGS<|tool_call_end|>. The
// "functions.NAME:INDEX" id is the call's id (Kimi reads it back in the history, as vLLM keeps it).
class KimiK2Parser : public SectionToolParser {
public:
    KimiK2Parser() : SectionToolParser(kSectionBegin, kCallBegin, kCallEnd) {}

private:
    static constexpr std::string_view kSectionBegin = "<|tool_calls_section_begin|>";
    static constexpr std::string_view kCallBegin = "<|tool_call_begin|>";
    static constexpr std::string_view kArgsBegin = "<|tool_call_argument_begin|>";
    static constexpr std::string_view kCallEnd = "<|tool_call_end|>";

    void start_call() override {
        name_sent_ = false;
        args_sent_ = 0;
    }
    bool call_named() const override { return name_sent_; }

    // The id and name once the argument marker came, then the arguments as far as they are not
    // trailing spaces (which may precede the end marker).
    void stream_call(ToolParseDelta& out, bool whole) override {
        const size_t marker = call_.find(kArgsBegin);
        if (!name_sent_) {
            if (marker == std::string::npos) return;
            const std::string id(trim(std::string_view(call_).substr(0, marker)));
            std::string name = id.substr(0, id.rfind(':'));
            if (name.rfind("functions.", 0) == 0) name = name.substr(std::string_view("functions.").size());
            if (name.empty()) return;
            out.calls.push_back({num_calls_, id.find(':') != std::string::npos ? id : new_tool_call_id(), name, ""});
            name_sent_ = true;
        }
        std::string_view args = std::string_view(call_).substr(marker + kArgsBegin.size());
        while (!args.empty() && is_json_space(args.front())) args.remove_prefix(1);
        while (!args.empty() && is_json_space(args.back())) args.remove_suffix(1);
        if (args.size() > args_sent_) {
            out.calls.push_back({num_calls_, std::nullopt, std::nullopt, std::string(args.substr(args_sent_))});
            args_sent_ = args.size();
        }
        if (whole && args_sent_ == 0) out.calls.push_back({num_calls_, std::nullopt, std::nullopt, "{}"});
    }

    bool name_sent_ = false;
    size_t args_sent_ = 0;
};

// glm45 (GLM-4.5 / 4.6): <tool_call>NAME\n<arg_key>K</arg_key>\n<arg_value>V</arg_value>...
// </tool_call>, repeated. The arguments are key/value text, not JSON: a value is kept as a JSON
// string where the tool's schema types that parameter string (or names no type), else read as
// JSON when it parses, else kept as a string. The name streams as soon as it is whole; the
// arguments go out as one JSON object when the call closes.
class Glm45Parser : public MarkedToolParser {
public:
    explicit Glm45Parser(const Json* tools) : tools_(tools) {}

private:
    static constexpr std::string_view kBegin = "<tool_call>";
    static constexpr std::string_view kEnd = "</tool_call>";
    static constexpr std::string_view kKey = "<arg_key>";
    static constexpr std::string_view kKeyEnd = "</arg_key>";
    static constexpr std::string_view kValue = "<arg_value>";
    static constexpr std::string_view kValueEnd = "</arg_value>";

    ToolParseDelta advance(bool at_end) override {
        ToolParseDelta out;
        while (true) {
            if (!in_call_) {
                const size_t begin = buffer_.find(kBegin);
                if (begin == std::string::npos) {
                    const size_t keep = at_end ? 0 : partial_marker(buffer_, kBegin);
                    if (num_calls_ == 0) out.content += buffer_.substr(0, buffer_.size() - keep);
                    buffer_.erase(0, buffer_.size() - keep);
                    return out;
                }
                if (num_calls_ == 0) out.content += buffer_.substr(0, begin);
                buffer_.erase(0, begin + kBegin.size());
                in_call_ = true;
                call_.clear();
                name_.clear();
            }
            const bool closed = take_call_text(kEnd, at_end);
            stream_name(out, closed || at_end);
            if (!closed && !at_end) return out;
            in_call_ = false;
            if (!name_.empty()) {
                out.calls.push_back({num_calls_, std::nullopt, std::nullopt, arguments().dump()});
                ++num_calls_;
            }
            if (!closed) return out;
        }
    }

    // The name: the call's text up to its first newline or argument key.
    void stream_name(ToolParseDelta& out, bool whole) {
        if (!name_.empty()) return;
        const size_t end = std::min(call_.find('\n'), call_.find(kKey));
        if (end == std::string::npos && !whole) return;
        const std::string name(trim(std::string_view(call_).substr(0, end)));
        if (name.empty()) return;
        name_ = name;
        out.calls.push_back({num_calls_, new_tool_call_id(), name_, ""});
    }

    Json arguments() const {
        Json args = Json::object();
        size_t at = call_.find(kKey);
        while (at != std::string::npos) {
            const size_t key_end = call_.find(kKeyEnd, at);
            const size_t value = key_end == std::string::npos ? key_end : call_.find(kValue, key_end);
            const size_t value_end = value == std::string::npos ? value : call_.find(kValueEnd, value);
            if (value_end == std::string::npos) break;  // cut off: the pairs that are whole
            const std::string key(trim(std::string_view(call_).substr(at + kKey.size(), key_end - at - kKey.size())));
            const std::string text = call_.substr(value + kValue.size(), value_end - value - kValue.size());
            args[key] = value_of(key, text);
            at = call_.find(kKey, value_end);
        }
        return args;
    }

    Json value_of(const std::string& key, const std::string& text) const {
        if (!is_string_parameter(key)) {
            Json parsed = Json::parse(trim(text), nullptr, false);
            if (!parsed.is_discarded()) return parsed;
        }
        return text;
    }

    // Whether the schema of this call's tool types `key` as a string (or does not say).
    bool is_string_parameter(const std::string& key) const {
        if (tools_ == nullptr || !tools_->is_array()) return true;
        for (const Json& tool : *tools_) {
            const Json* f = tool.contains("function") ? &tool["function"] : nullptr;
            if (f == nullptr || f->value("name", "") != name_) continue;
            const Json* props = f->contains("parameters") && (*f)["parameters"].contains("properties")
                                    ? &(*f)["parameters"]["properties"]
                                    : nullptr;
            if (props == nullptr || !props->contains(key) || !(*props)[key].contains("type")) return true;
            const Json& type = (*props)[key]["type"];
            return type == "string" || (type.is_array() && type.size() == 1 && type[0] == "string");
        }
        return true;
    }

    const Json* tools_;
    bool in_call_ = false;
    std::string name_;
};

// openai (gpt-oss): the harmony reader with calls on and the analysis channel dropped.
class HarmonyToolParser : public ToolParser {
public:
    ToolParseDelta push(std::string_view text) override { return take(harmony_.push(text)); }
    ToolParseDelta finish() override { return take(harmony_.finish()); }

private:
    ToolParseDelta take(HarmonyDelta d) {
        num_calls_ = harmony_.num_calls();
        return {std::move(d.content), std::move(d.calls)};
    }
    HarmonyParser harmony_{{.reasoning = false, .tool_calls = true}};
};

}  // namespace

std::vector<std::string> tool_parser_names() { return {"hermes", "deepseek_v3", "kimi_k2", "glm45", "openai"}; }

std::unique_ptr<ToolParser> make_tool_parser(const std::string& name, const nlohmann::ordered_json* tools) {
    if (name == "hermes") return std::make_unique<HermesParser>();
    if (name == "deepseek_v3") return std::make_unique<DeepSeekV3Parser>();
    if (name == "kimi_k2") return std::make_unique<KimiK2Parser>();
    if (name == "glm45") return std::make_unique<Glm45Parser>(tools);
    if (name == "openai") return std::make_unique<HarmonyToolParser>();
    return nullptr;
}

bool tool_parser_reads_special_tokens(const std::string& name) { return name == "kimi_k2" || name == "openai"; }

std::string new_tool_call_id() {
    static constexpr char kChars[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
    thread_local std::mt19937_64 rng{std::random_device{}()};
    std::string id = "call_";
    for (int i = 0; i < 24; ++i) id += kChars[rng() % (sizeof(kChars) - 1)];
    return id;
}

void ToolParseResult::add(const ToolParseDelta& delta) {
    content += delta.content;
    for (const auto& d : delta.calls) {
        if (static_cast<size_t>(d.index) >= calls.size()) calls.resize(static_cast<size_t>(d.index) + 1);
        auto& call = calls[static_cast<size_t>(d.index)];
        if (d.id) call.id = *d.id;
        if (d.name) call.name = *d.name;
        call.arguments += d.arguments;
    }
}

}  // namespace moeserve::serve::openai
