#include "moeserve/serve/openai/tools.h"

#include <fmt/format.h>

#include "moeserve/serve/openai/protocol.h"
#include "moeserve/structured/convert.h"

namespace moeserve::serve::openai {
namespace {

using Json = nlohmann::ordered_json;

[[noreturn]] void bad(const std::string& param, const std::string& message) {
    throw ApiError(400, message, "invalid_request_error", param);
}

Json validated_tools(const Json& v) {
    if (!v.is_array()) bad("tools", "'tools' must be a list");
    for (size_t i = 0; i < v.size(); ++i) {
        const Json& t = v[i];
        const std::string at = fmt::format("tools[{}]", i);
        if (!t.is_object()) bad("tools", at + " must be an object");
        if (t.value("type", "function") != "function") bad("tools", at + ".type must be \"function\"");
        const auto fn = t.find("function");
        if (fn == t.end() || !fn->is_object()) bad("tools", at + ".function must be an object");
        const auto name = fn->find("name");
        if (name == fn->end() || !name->is_string() || name->get<std::string>().empty()) {
            bad("tools", at + ".function.name must be a non-empty string");
        }
        if (const auto p = fn->find("parameters"); p != fn->end() && !p->is_null() && !p->is_object()) {
            bad("tools", at + ".function.parameters must be a JSON Schema object");
        }
    }
    return v;
}

const Json* function_named(const Json& tools, const std::string& name) {
    for (const Json& t : tools) {
        if (t["function"]["name"] == name) return &t["function"];
    }
    return nullptr;
}

Json parameters_of(const Json& function) {
    const auto p = function.find("parameters");
    return p == function.end() || p->is_null() ? Json{{"type", "object"}} : *p;
}

}  // namespace

ToolRequest parse_tool_request(const Json& body) {
    ToolRequest r;
    if (const auto t = body.find("tools"); t != body.end() && !t->is_null()) r.tools = validated_tools(*t);
    const bool has_tools = r.tools.is_array() && !r.tools.empty();
    r.choice = has_tools ? ToolRequest::Choice::kAuto : ToolRequest::Choice::kNone;
    if (const auto p = body.find("parallel_tool_calls"); p != body.end() && !p->is_null()) {
        if (!p->is_boolean()) bad("parallel_tool_calls", "'parallel_tool_calls' must be a boolean");
        r.parallel_tool_calls = p->get<bool>();
    }
    const auto c = body.find("tool_choice");
    if (c == body.end() || c->is_null()) return r;
    if (c->is_string()) {
        const std::string s = c->get<std::string>();
        if (s == "none")
            r.choice = ToolRequest::Choice::kNone;
        else if (s == "auto")
            r.choice = ToolRequest::Choice::kAuto;
        else if (s == "required")
            r.choice = ToolRequest::Choice::kRequired;
        else
            bad("tool_choice",
                fmt::format("'tool_choice' must be 'none', 'auto', 'required' or a named function; got '{}'", s));
    } else if (c->is_object()) {
        const auto fn = c->find("function");
        if (c->value("type", "") != "function" || fn == c->end() || !fn->is_object() || !fn->contains("name") ||
            !(*fn)["name"].is_string()) {
            bad("tool_choice", "a named 'tool_choice' must be {\"type\": \"function\", \"function\": {\"name\": ...}}");
        }
        r.choice = ToolRequest::Choice::kNamed;
        r.named = (*fn)["name"].get<std::string>();
    } else {
        bad("tool_choice", "'tool_choice' must be a string or an object");
    }
    if (r.choice != ToolRequest::Choice::kNone && !has_tools) {
        bad("tool_choice", "'tool_choice' other than 'none' needs 'tools'");
    }
    if (r.choice == ToolRequest::Choice::kNamed && !function_named(r.tools, r.named)) {
        bad("tool_choice", fmt::format("Tool '{}' named in 'tool_choice' is not one of 'tools'", r.named));
    }
    return r;
}

std::string forced_tool_grammar(const ToolRequest& r) {
    Json schema;
    if (r.choice == ToolRequest::Choice::kNamed) {
        schema = parameters_of(*function_named(r.tools, r.named));
    } else {
        Json any_of = Json::array();
        for (const Json& t : r.tools) {
            any_of.push_back({{"type", "object"},
                              {"properties",
                               {{"name", {{"type", "string"}, {"enum", {t["function"]["name"]}}}},
                                {"parameters", parameters_of(t["function"])}}},
                              {"required", {"name", "parameters"}}});
        }
        schema = {{"type", "array"}, {"minItems", 1}, {"items", {{"anyOf", any_of}}}};
        if (!r.parallel_tool_calls) schema["maxItems"] = 1;
    }
    try {
        return structured::json_schema_to_gbnf(schema, "tools");
    } catch (const ApiError&) {
        throw;
    } catch (const Error& e) {
        bad("tools", std::string("the functions' parameters cannot be enforced: ") + e.what());
    }
}

std::vector<ToolCall> forced_tool_calls(const ToolRequest& r, const std::string& output) {
    std::vector<ToolCall> calls;
    const Json parsed = Json::parse(output, nullptr, false);
    if (parsed.is_discarded()) return calls;
    if (r.choice == ToolRequest::Choice::kNamed) {
        calls.push_back({new_tool_call_id(), r.named, parsed.dump()});
        return calls;
    }
    if (!parsed.is_array()) return calls;
    for (const Json& item : parsed) {
        if (!item.is_object() || !item.contains("name") || !item["name"].is_string()) continue;
        calls.push_back({new_tool_call_id(), item["name"].get<std::string>(),
                         item.contains("parameters") ? item["parameters"].dump() : "{}"});
    }
    return calls;
}

}  // namespace moeserve::serve::openai
