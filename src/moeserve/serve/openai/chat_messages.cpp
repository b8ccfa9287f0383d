#include "moeserve/serve/openai/chat_messages.h"

#include <fmt/format.h>

#include <algorithm>
#include <initializer_list>
#include <string>

#include "moeserve/serve/openai/protocol.h"

namespace moeserve::serve::openai {
namespace {

using Json = nlohmann::ordered_json;

[[noreturn]] void bad(const std::string& message) { throw ApiError(400, message, "invalid_request_error", "messages"); }

// content: a string, null, or a list of {"type": "text", "text": ...} parts (joined by "\n").
Json text_content(const Json& m, size_t i) {
    const auto it = m.find("content");
    if (it == m.end() || it->is_null()) return nullptr;
    if (it->is_string()) return *it;
    if (!it->is_array()) bad(fmt::format("messages[{}].content must be a string, a list of parts or null", i));
    std::string text;
    for (size_t k = 0; k < it->size(); ++k) {
        const Json& part = (*it)[k];
        const bool text_part = part.is_object() && part.contains("type") && part["type"] == "text" &&
                               part.contains("text") && part["text"].is_string();
        if (!text_part) {
            bad(fmt::format("messages[{}].content[{}]: only {{\"type\": \"text\", \"text\": ...}} parts are supported",
                            i, k));
        }
        text += (k ? "\n" : "") + part["text"].get<std::string>();
    }
    return text;
}

Json tool_calls_of(const Json& calls, size_t i, ToolArguments form) {
    if (!calls.is_array()) bad(fmt::format("messages[{}].tool_calls must be a list", i));
    Json out = Json::array();
    for (size_t k = 0; k < calls.size(); ++k) {
        const Json& c = calls[k];
        const std::string at = fmt::format("messages[{}].tool_calls[{}]", i, k);
        if (!c.is_object()) bad(at + " must be an object");
        const auto fn = c.find("function");
        if (fn == c.end() || !fn->is_object()) bad(at + ".function must be an object");
        const auto name = fn->find("name");
        if (name == fn->end() || !name->is_string()) bad(at + ".function.name must be a string");
        Json arguments = "{}";
        if (const auto a = fn->find("arguments"); a != fn->end() && !a->is_null()) {
            if (a->is_string()) {
                if (Json::parse(a->get<std::string>(), nullptr, false).is_discarded()) {
                    bad(at + ".function.arguments is not valid JSON");
                }
                arguments = *a;
                if (form == ToolArguments::kObject) {
                    if (Json parsed = Json::parse(a->get<std::string>()); parsed.is_object())
                        arguments = std::move(parsed);
                }
            } else if (a->is_object()) {
                arguments = form == ToolArguments::kObject ? *a : Json(a->dump());
            } else {
                bad(at + ".function.arguments must be a JSON string or an object");
            }
        }
        Json call{{"type", "function"}, {"function", {{"name", *name}, {"arguments", arguments}}}};
        if (const auto id = c.find("id"); id != c.end() && id->is_string()) call["id"] = *id;
        if (const auto type = c.find("type"); type != c.end() && !(type->is_string() && *type == "function")) {
            bad(at + ".type must be \"function\"");
        }
        out.push_back(std::move(call));
    }
    return out;
}

}  // namespace

Json prepare_chat_messages(const Json* messages, NullContent null_content, ToolArguments arguments) {
    if (!messages || !messages->is_array() || messages->empty()) bad("'messages' must be a non-empty list");
    static constexpr const char* kRoles[] = {"system", "developer", "user", "assistant", "tool"};
    Json out = Json::array();
    for (size_t i = 0; i < messages->size(); ++i) {
        const Json& m = (*messages)[i];
        if (!m.is_object()) bad(fmt::format("messages[{}] must be an object", i));
        const auto role = m.find("role");
        if (role == m.end() || !role->is_string()) bad(fmt::format("messages[{}] needs a string 'role'", i));
        const std::string r = role->get<std::string>();
        if (std::find(std::begin(kRoles), std::end(kRoles), r) == std::end(kRoles)) {
            bad(fmt::format("messages[{}]: unknown role '{}'", i, r));
        }
        Json prepared{{"role", r}};
        Json content = text_content(m, i);
        const auto calls = m.find("tool_calls");
        const bool has_calls = r == "assistant" && calls != m.end() && !calls->is_null();
        if (content.is_null() && !(has_calls && null_content == NullContent::kKeepWithToolCalls)) content = "";
        prepared["content"] = std::move(content);
        if (const auto name = m.find("name"); name != m.end() && name->is_string()) prepared["name"] = *name;
        if (has_calls) prepared["tool_calls"] = tool_calls_of(*calls, i, arguments);
        if (r == "tool") {
            if (const auto id = m.find("tool_call_id"); id != m.end() && !id->is_null()) {
                if (!id->is_string()) bad(fmt::format("messages[{}].tool_call_id must be a string", i));
                prepared["tool_call_id"] = *id;
            }
        }
        if (r == "assistant") {
            for (const char* key : {"reasoning_content", "reasoning"}) {
                if (const auto rc = m.find(key); rc != m.end() && rc->is_string()) prepared["reasoning_content"] = *rc;
            }
            // gpt-oss's template reads `thinking`, and refuses a tool-call turn with both content and
            // thinking: there the content (a preamble) stands for the reasoning, as it renders it.
            const bool content_with_calls =
                has_calls && prepared["content"].is_string() && !prepared["content"].get<std::string>().empty();
            if (const auto t = m.find("thinking"); t != m.end() && t->is_string()) {
                prepared["thinking"] = *t;
            } else if (prepared.contains("reasoning_content") && !content_with_calls) {
                prepared["thinking"] = prepared["reasoning_content"];
            }
        }
        out.push_back(std::move(prepared));
    }
    return out;
}

bool template_wants_argument_objects(std::string_view source) {
    const auto has_any = [&](std::initializer_list<std::string_view> parts) {
        for (std::string_view p : parts) {
            if (source.find(p) != std::string_view::npos) return true;
        }
        return false;
    };
    const bool through_tojson =
        has_any({"arguments|tojson", "arguments | tojson", "arguments']|tojson", "arguments'] | tojson"});
    const bool reads_text =
        has_any({"arguments is string", "arguments'] is string", "['arguments'] +", "+ tool['function']['arguments']",
                 "+ tool_call.arguments", "{{ tool_call.arguments }}", "{{- tool_call.arguments }}"});
    return through_tojson && !reads_text;
}

bool has_tool_calls_without_content(const Json& messages) {
    for (const Json& m : messages) {
        if (!m.is_object() || m.value("role", "") != "assistant") continue;
        const auto calls = m.find("tool_calls");
        const auto content = m.find("content");
        if (calls != m.end() && !calls->is_null() && (content == m.end() || content->is_null())) return true;
    }
    return false;
}

}  // namespace moeserve::serve::openai
