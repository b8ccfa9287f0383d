// ChatTemplate: parses a Hugging Face chat template (Jinja2) once and renders it as
// transformers' apply_chat_template does (jinja2 with trim_blocks, lstrip_blocks,
// loopcontrols, transformers' tojson filter and raise_exception / strftime_now functions).
#pragma once

#include <ctime>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

namespace moeserve::tokenizer {

namespace jinja {
struct Stmt;
}

struct ChatRenderOptions {
    // strftime_now's clock: unset, the local time now (as transformers); set, this instant read
    // in UTC, so a render is the same on every day and in every time zone (goldens, tests).
    std::optional<std::time_t> now;
};

// Supported subset (see tests/tokenizer/chat_template/ for each feature): text, {{ }}, {% %},
// {# #}, "-"/"+" whitespace control; if/elif/else, for (loop.*, else, unpacking, `if`
// filtering, break/continue), set (incl. namespace attributes and block set), macro, call,
// generation; Python literals, operators, attribute/subscript/slice access, str and dict
// methods, the common filters and tests. Anything else is Error(kUnsupported) naming the
// construct and its template line.
//
// Known differences from Python jinja2: str.upper/lower/title change ASCII letters only;
// tuples are lists (they print as [a, b]); dict keys must be strings.
class ChatTemplate {
public:
    // Parses `source`. Throws Error(kInvalidArgument) with the line for syntax errors and
    // Error(kUnsupported) for tags outside the subset.
    static ChatTemplate parse(const std::string& source);

    // Renders with the variables of `context` (a JSON object): messages, add_generation_prompt,
    // tools, bos_token, eos_token, enable_thinking, ... Throws Error naming the template line
    // (kInvalidArgument for raise_exception, undefined use and type errors; kUnsupported for
    // unsupported filters, tests, methods and functions).
    // Thread-safe: any number of threads may render one const ChatTemplate at once.
    // NOTE: nlohmann::json sorts object keys, so `| tojson` prints them sorted; pass an
    // nlohmann::ordered_json to keep the caller's key order as Python dicts do.
    std::string render(const nlohmann::json& context) const;
    std::string render(const nlohmann::ordered_json& context) const;
    std::string render(const nlohmann::ordered_json& context, const ChatRenderOptions& options) const;

    ChatTemplate(ChatTemplate&&) noexcept;
    ChatTemplate& operator=(ChatTemplate&&) noexcept;
    ~ChatTemplate();

private:
    struct Impl;
    explicit ChatTemplate(std::unique_ptr<Impl> impl);
    std::unique_ptr<Impl> impl_;
};

// Convenience for the usual call of transformers' apply_chat_template(tokenize=False):
// renders with {"messages": messages, "add_generation_prompt": add_generation_prompt} plus
// every key of `extra` (an object, e.g. {"tools": [...], "bos_token": "<s>",
// "enable_thinking": false}); keys of `extra` override the first two.
// Same errors and thread-safety as ChatTemplate::render.
std::string render_chat(const ChatTemplate& chat_template, const nlohmann::ordered_json& messages,
                        bool add_generation_prompt,
                        const nlohmann::ordered_json& extra = nlohmann::ordered_json::object());

}  // namespace moeserve::tokenizer
