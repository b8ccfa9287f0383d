#include "moeserve/serve/openai/responses.h"

#include <fmt/format.h>

#include <utility>

namespace moeserve::serve::openai {

namespace {

[[noreturn]] void bad(const std::string& param, const std::string& message) {
    throw ApiError(400, message, "invalid_request_error", param);
}

const OJson* field(const OJson& body, const char* key) {
    const auto it = body.find(key);
    return it == body.end() || it->is_null() ? nullptr : &*it;
}

std::string dump_text(const OJson& j) { return j.dump(-1, ' ', false, OJson::error_handler_t::replace); }

// A message's content: a string, or parts of text (input_text, output_text, text) as chat's
// text parts; other parts (images, files, audio) are refused, as the chat route refuses them.
OJson message_content(const OJson& content, const std::string& at) {
    if (content.is_string()) return content;
    if (!content.is_array()) bad(at, fmt::format("'{}' must be a string or a list of content parts", at));
    OJson parts = OJson::array();
    for (size_t k = 0; k < content.size(); ++k) {
        const OJson& p = content[k];
        const std::string type = p.is_object() && p.contains("type") && p["type"].is_string() ? p["type"] : "";
        if ((type != "input_text" && type != "output_text" && type != "text") || !p.contains("text") ||
            !p["text"].is_string()) {
            bad(at,
                fmt::format("{}[{}]: only text parts (input_text, output_text) are supported; got '{}'", at, k, type));
        }
        parts.push_back({{"type", "text"}, {"text", p["text"]}});
    }
    return parts;
}

// One input item as chat messages appended to `out` (consecutive function calls share one
// assistant message, as parallel calls do in chat).
void add_input_item(const OJson& item, size_t k, OJson& out) {
    const std::string at = fmt::format("input[{}]", k);
    if (!item.is_object()) bad(at, fmt::format("'{}' must be an object", at));
    const std::string type = item.contains("type") && item["type"].is_string() ? item["type"] : "message";
    if (type == "message") {
        const std::string role = item.contains("role") && item["role"].is_string() ? item["role"] : "";
        if (role != "user" && role != "assistant" && role != "system" && role != "developer")
            bad(at + ".role", fmt::format("'{}.role' must be user, assistant, system or developer", at));
        if (!item.contains("content")) bad(at + ".content", fmt::format("'{}.content' is required", at));
        out.push_back({{"role", role == "developer" ? "system" : role},
                       {"content", message_content(item["content"], at + ".content")}});
    } else if (type == "function_call") {
        for (const char* key : {"call_id", "name", "arguments"}) {
            if (!item.contains(key) || !item[key].is_string())
                bad(at + "." + key, fmt::format("'{}.{}' must be a string", at, key));
        }
        const OJson call = {{"id", item["call_id"]},
                            {"type", "function"},
                            {"function", {{"name", item["name"]}, {"arguments", item["arguments"]}}}};
        const bool joins = !out.empty() && out.back()["role"] == "assistant" && out.back().contains("tool_calls");
        if (joins)
            out.back()["tool_calls"].push_back(call);
        else
            out.push_back({{"role", "assistant"}, {"content", nullptr}, {"tool_calls", OJson::array({call})}});
    } else if (type == "function_call_output") {
        if (!item.contains("call_id") || !item["call_id"].is_string())
            bad(at + ".call_id", fmt::format("'{}.call_id' must be a string", at));
        const OJson* output = field(item, "output");
        out.push_back({{"role", "tool"},
                       {"tool_call_id", item["call_id"]},
                       {"content", output == nullptr     ? ""
                                   : output->is_string() ? *output
                                                         : OJson(dump_text(*output))}});
    } else if (type != "reasoning") {  // a reasoning item from an earlier output is not replayed to the model
        bad(at + ".type", fmt::format("input item type '{}' is not supported (message, function_call, "
                                      "function_call_output, reasoning)",
                                      type));
    }
}

OJson input_messages(const OJson& input) {
    OJson out = OJson::array();
    if (input.is_string()) {
        out.push_back({{"role", "user"}, {"content", input}});
    } else if (input.is_array()) {
        for (size_t k = 0; k < input.size(); ++k) add_input_item(input[k], k, out);
    } else {
        bad("input", "'input' must be a string or a list of input items");
    }
    return out;
}

// tools, tool_choice and text.format in their chat completions form, into chat.
void add_tools_and_format(const OJson& body, OJson& chat) {
    if (const OJson* tools = field(body, "tools")) {
        if (!tools->is_array()) bad("tools", "'tools' must be a list");
        OJson out = OJson::array();
        for (const OJson& t : *tools) {
            if (!t.is_object() || t.value("type", "") != "function" || !t.contains("name"))
                bad("tools", "only function tools ({\"type\": \"function\", \"name\", \"parameters\"}) are supported");
            OJson fn = {{"name", t["name"]}};
            for (const char* key : {"description", "parameters", "strict"})
                if (const OJson* v = field(t, key)) fn[key] = *v;
            out.push_back({{"type", "function"}, {"function", fn}});
        }
        if (!out.empty()) chat["tools"] = out;
    }
    if (const OJson* choice = field(body, "tool_choice")) {
        if (choice->is_object() && choice->value("type", "") == "function" && choice->contains("name"))
            chat["tool_choice"] = {{"type", "function"}, {"function", {{"name", (*choice)["name"]}}}};
        else if (choice->is_string())
            chat["tool_choice"] = *choice;
        else
            bad("tool_choice", "'tool_choice' must be auto, none, required or {\"type\": \"function\", \"name\"}");
    }
    const OJson* text = field(body, "text");
    const OJson* format = text && text->is_object() ? field(*text, "format") : nullptr;
    if (format == nullptr) return;
    const std::string type = format->is_object() ? format->value("type", "") : "";
    if (type == "json_schema") {
        OJson schema = {{"name", format->value("name", "response")},
                        {"schema", format->value("schema", OJson::object())}};
        if (const OJson* strict = field(*format, "strict")) schema["strict"] = *strict;
        chat["response_format"] = {{"type", "json_schema"}, {"json_schema", schema}};
    } else if (type == "json_object") {
        chat["response_format"] = {{"type", "json_object"}};
    } else if (type != "text") {
        bad("text.format", "'text.format.type' must be text, json_object or json_schema");
    }
}

// What the request says that the Response repeats, with the API's defaults.
OJson echo_fields(const OJson& body) {
    const auto get = [&](const char* key, const OJson& fallback) {
        const OJson* v = field(body, key);
        return v ? *v : fallback;
    };
    return {{"instructions", get("instructions", nullptr)},
            {"max_output_tokens", get("max_output_tokens", nullptr)},
            {"metadata", get("metadata", OJson::object())},
            {"parallel_tool_calls", get("parallel_tool_calls", true)},
            {"store", get("store", true)},
            {"temperature", get("temperature", 1.0)},
            {"text", get("text", OJson{{"format", {{"type", "text"}}}})},
            {"tool_choice", get("tool_choice", "auto")},
            {"tools", get("tools", OJson::array())},
            {"top_p", get("top_p", 1.0)}};
}

std::string id_base(const std::string& response_id) {
    return response_id.rfind("resp_", 0) == 0 ? response_id.substr(5) : response_id;
}

std::string string_or_empty(const OJson& message, const char* key) {
    const auto it = message.find(key);
    return it != message.end() && it->is_string() ? it->get<std::string>() : "";
}

OJson text_part(const std::string& text) {
    return {{"type", "output_text"}, {"text", text}, {"annotations", OJson::array()}, {"logprobs", OJson::array()}};
}

}  // namespace

ResponsesRequest parse_responses_request(const OJson& body) {
    if (!body.is_object()) bad("body", "the request body must be a JSON object");
    for (const char* unsupported : {"background", "conversation", "prompt"}) {
        const OJson* v = field(body, unsupported);
        if (v && !(v->is_boolean() && !v->get<bool>()))
            bad(unsupported,
                fmt::format("'{}' is not supported here (use previous_response_id for a conversation)", unsupported));
    }
    ResponsesRequest r;
    const OJson* input = field(body, "input");
    if (input == nullptr) bad("input", "'input' is required");
    r.input_messages = input_messages(*input);
    if (const OJson* prev = field(body, "previous_response_id")) {
        if (!prev->is_string()) bad("previous_response_id", "'previous_response_id' must be a string");
        r.previous_response_id = prev->get<std::string>();
    }
    if (const OJson* v = field(body, "instructions"); v && !v->is_string())
        bad("instructions", "'instructions' must be a string");
    r.stream = body.value("stream", false);
    r.store = body.value("store", true);
    r.chat = OJson::object();
    if (const OJson* model = field(body, "model")) r.chat["model"] = *model;
    if (const OJson* max = field(body, "max_output_tokens")) r.chat["max_tokens"] = *max;
    // The sampling fields chat takes under the same names (vLLM's extras included).
    for (const char* key : {"temperature", "top_p", "parallel_tool_calls", "seed", "top_k", "min_p",
                            "repetition_penalty", "ignore_eos", "min_tokens", "priority"}) {
        if (const OJson* v = field(body, key)) r.chat[key] = *v;
    }
    // reasoning.effort: chat's reasoning_effort (a chat template variable; gpt-oss reads it).
    if (const OJson* reasoning = field(body, "reasoning"); reasoning && reasoning->is_object()) {
        const auto effort = reasoning->find("effort");
        if (effort != reasoning->end() && !effort->is_null()) r.chat["reasoning_effort"] = *effort;
    }
    add_tools_and_format(body, r.chat);
    if (r.stream) {
        r.chat["stream"] = true;
        r.chat["stream_options"] = {{"include_usage", true}};  // the usage response.completed reports
    }
    r.echo = echo_fields(body);
    return r;
}

OJson chat_request_body(const ResponsesRequest& request, const OJson& history) {
    OJson chat = request.chat;
    OJson messages = OJson::array();
    if (const OJson* instructions = field(request.echo, "instructions"))
        messages.push_back({{"role", "system"}, {"content", *instructions}});
    for (const OJson& m : history) messages.push_back(m);
    for (const OJson& m : request.input_messages) messages.push_back(m);
    chat["messages"] = std::move(messages);
    return chat;
}

OJson response_object(const ResponseHead& head, const OJson& message, const std::string& finish_reason,
                      const OJson& usage) {
    const std::string base = id_base(head.id);
    OJson output = OJson::array();
    if (const std::string reasoning = string_or_empty(message, "reasoning_content"); !reasoning.empty()) {
        output.push_back({{"type", "reasoning"},
                          {"id", "rs_" + base},
                          {"summary", OJson::array()},
                          {"content", OJson::array({{{"type", "reasoning_text"}, {"text", reasoning}}})}});
    }
    if (const std::string text = string_or_empty(message, "content"); !text.empty()) {
        output.push_back({{"type", "message"},
                          {"id", "msg_" + base},
                          {"status", "completed"},
                          {"role", "assistant"},
                          {"content", OJson::array({text_part(text)})}});
    }
    const OJson calls = message.value("tool_calls", OJson::array());
    for (size_t i = 0; i < calls.size(); ++i) {
        output.push_back({{"type", "function_call"},
                          {"id", fmt::format("fc_{}_{}", base, i)},
                          {"call_id", calls[i]["id"]},
                          {"name", calls[i]["function"]["name"]},
                          {"arguments", calls[i]["function"]["arguments"]},
                          {"status", "completed"}});
    }
    const bool cut = finish_reason == "length";
    OJson r = {{"id", head.id},
               {"object", "response"},
               {"created_at", head.created_at},
               {"status", cut ? "incomplete" : "completed"},
               {"background", false},
               {"error", nullptr},
               {"incomplete_details", cut ? OJson{{"reason", "max_output_tokens"}} : OJson(nullptr)},
               {"model", head.model},
               {"output", output},
               {"previous_response_id", head.previous_response_id ? OJson(*head.previous_response_id) : OJson()},
               {"reasoning", {{"effort", nullptr}, {"summary", nullptr}}},
               {"truncation", "disabled"},
               {"user", nullptr}};
    for (const auto& [key, value] : head.echo.items()) r[key] = value;
    const int64_t input = usage.is_object() ? usage.value("prompt_tokens", int64_t{0}) : 0;
    const int64_t out = usage.is_object() ? usage.value("completion_tokens", int64_t{0}) : 0;
    const OJson details = usage.is_object() ? usage.value("prompt_tokens_details", OJson()) : OJson();
    r["usage"] = {
        {"input_tokens", input},
        {"input_tokens_details", {{"cached_tokens", details.is_object() ? details.value("cached_tokens", 0) : 0}}},
        {"output_tokens", out},
        {"output_tokens_details", {{"reasoning_tokens", 0}}},
        {"total_tokens", input + out}};
    return r;
}

OJson conversation_messages(const OJson& message) {
    OJson m = {{"role", "assistant"}, {"content", message.contains("content") ? message["content"] : OJson()}};
    if (message.contains("tool_calls") && !message["tool_calls"].empty()) m["tool_calls"] = message["tool_calls"];
    return OJson::array({m});
}

std::string ResponsesStream::event(const char* type, OJson fields) {
    OJson e = {{"type", type}, {"sequence_number", sequence_++}};
    for (auto& [key, value] : fields.items()) e[key] = std::move(value);
    return fmt::format("event: {}\ndata: {}\n\n", type, dump_text(e));
}

std::string ResponsesStream::start() {
    OJson r = response_object(head_, OJson::object(), "stop", nullptr);
    r["status"] = "in_progress";
    r["usage"] = nullptr;
    std::string out = event("response.created", {{"response", r}});  // two statements: the numbers in order
    out += event("response.in_progress", {{"response", r}});
    return out;
}

OJson ResponsesStream::item(bool done) const {
    const std::string base = id_base(head_.id);
    const char* status = done ? "completed" : "in_progress";
    switch (kind_) {
        case Kind::kReasoning:
            return {{"type", "reasoning"},
                    {"id", "rs_" + base},
                    {"summary", OJson::array()},
                    {"content", done ? OJson::array({{{"type", "reasoning_text"}, {"text", text_}}}) : OJson::array()}};
        case Kind::kText:
            return {{"type", "message"},
                    {"id", "msg_" + base},
                    {"status", status},
                    {"role", "assistant"},
                    {"content", done ? OJson::array({text_part(text_)}) : OJson::array()}};
        case Kind::kCall:
            return {{"type", "function_call"}, {"id", call_["item_id"]},         {"call_id", call_["id"]},
                    {"name", call_["name"]},   {"arguments", done ? text_ : ""}, {"status", status}};
        case Kind::kNone:
            break;
    }
    return nullptr;
}

std::string ResponsesStream::open(Kind kind, const OJson& call) {
    std::string out = close();
    kind_ = kind;
    ++output_index_;
    text_.clear();
    call_ = call;
    const OJson it = item(false);
    out += event("response.output_item.added", {{"output_index", output_index_}, {"item", it}});
    if (kind == Kind::kText) {
        out += event(
            "response.content_part.added",
            {{"item_id", it["id"]}, {"output_index", output_index_}, {"content_index", 0}, {"part", text_part("")}});
    }
    return out;
}

std::string ResponsesStream::close() {
    if (kind_ == Kind::kNone) return "";
    const OJson it = item(true);
    const OJson where = {{"item_id", it["id"]}, {"output_index", output_index_}};
    std::string out;
    if (kind_ == Kind::kText) {
        OJson done = where;
        done["content_index"] = 0;
        done["text"] = text_;
        done["logprobs"] = OJson::array();
        out += event("response.output_text.done", done);
        OJson part = where;
        part["content_index"] = 0;
        part["part"] = text_part(text_);
        out += event("response.content_part.done", part);
    } else if (kind_ == Kind::kReasoning) {
        OJson done = where;
        done["content_index"] = 0;
        done["text"] = text_;
        out += event("response.reasoning_text.done", done);
    } else {
        OJson done = where;
        done["arguments"] = text_;
        out += event("response.function_call_arguments.done", done);
    }
    out += event("response.output_item.done", {{"output_index", output_index_}, {"item", it}});
    kind_ = Kind::kNone;
    return out;
}

std::string ResponsesStream::feed(const OJson& chunk) {
    if (chunk.contains("usage") && chunk["usage"].is_object()) usage_ = chunk["usage"];
    const OJson choices = chunk.value("choices", OJson::array());
    if (choices.empty()) return "";
    const OJson& choice = choices[0];
    const OJson delta = choice.value("delta", OJson::object());
    std::string out;
    const auto text_delta = [&](Kind kind, const char* message_key, const char* event_type, const std::string& d) {
        if (d.empty()) return;
        if (kind_ != kind) out += open(kind);
        text_ += d;
        message_[message_key] = message_.value(message_key, "") + d;
        out += event(
            event_type,
            {{"item_id", item(false)["id"]}, {"output_index", output_index_}, {"content_index", 0}, {"delta", d}});
    };
    text_delta(Kind::kReasoning, "reasoning_content", "response.reasoning_text.delta",
               string_or_empty(delta, "reasoning_content"));
    text_delta(Kind::kText, "content", "response.output_text.delta", string_or_empty(delta, "content"));
    for (const OJson& d : delta.value("tool_calls", OJson::array())) {
        if (d.contains("id") && d["id"].is_string()) {  // a new call: its id and name come first
            const size_t index = message_.value("tool_calls", OJson::array()).size();
            const std::string name = d.contains("function") ? d["function"].value("name", "") : "";
            out +=
                open(Kind::kCall,
                     {{"item_id", fmt::format("fc_{}_{}", id_base(head_.id), index)}, {"id", d["id"]}, {"name", name}});
            message_["tool_calls"].push_back(
                {{"id", d["id"]}, {"type", "function"}, {"function", {{"name", name}, {"arguments", ""}}}});
        }
        const std::string args = d.contains("function") ? d["function"].value("arguments", "") : "";
        if (kind_ != Kind::kCall || args.empty()) continue;
        text_ += args;
        message_["tool_calls"].back()["function"]["arguments"] = text_;
        out += event("response.function_call_arguments.delta",
                     {{"item_id", call_["item_id"]}, {"output_index", output_index_}, {"delta", args}});
    }
    if (choice.contains("finish_reason") && choice["finish_reason"].is_string())
        finish_reason_ = choice["finish_reason"].get<std::string>();
    return out;
}

std::string ResponsesStream::finish(OJson& message, OJson& response) {
    std::string out = close();
    response = response_object(head_, message_, finish_reason_, usage_);
    out += event(response["status"] == "completed" ? "response.completed" : "response.incomplete",
                 {{"response", response}});
    message = message_;
    return out;
}

std::string ResponsesStream::error(const OJson& error_body) {
    const OJson e = error_body.value("error", OJson::object());
    std::string out = close();
    out += event("error", {{"code", e.value("code", OJson())},
                           {"message", e.value("message", "error")},
                           {"param", e.value("param", OJson())}});
    return out;
}

}  // namespace moeserve::serve::openai
