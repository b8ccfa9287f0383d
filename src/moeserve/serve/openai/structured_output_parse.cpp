#include "moeserve/serve/openai/structured_output_parse.h"

#include <fmt/format.h>

#include <vector>

#include "moeserve/serve/openai/protocol.h"
#include "moeserve/structured/convert.h"

namespace moeserve::serve::openai {
namespace {

using Json = nlohmann::ordered_json;

[[noreturn]] void bad(const std::string& param, const std::string& message) {
    throw ApiError(400, message, "invalid_request_error", param);
}

// One constraint, before conversion: which field gave it, its kind and its value.
struct Spec {
    std::string param;  // top-level field, for ApiError.param
    std::string path;   // where inside the body, for messages
    enum Kind { kJsonSchema, kJsonObject, kRegex, kChoice, kGrammar } kind;
    Json value;
};

const Json* field(const Json& body, const char* key) {
    const auto it = body.find(key);
    return it == body.end() || it->is_null() ? nullptr : &*it;
}

std::string string_of(const Json& v, const std::string& path) {
    if (!v.is_string()) bad(path.substr(0, path.find('.')), fmt::format("'{}' must be a string", path));
    return v.get<std::string>();
}

// guided_json / structured_outputs.json: a schema object, or its JSON text.
Json schema_of(const Json& v, const std::string& path) {
    if (v.is_object() || v.is_boolean()) return v;
    if (v.is_string()) {
        Json parsed = Json::parse(v.get<std::string>(), nullptr, /*allow_exceptions=*/false);
        if (parsed.is_discarded()) bad(path.substr(0, path.find('.')), fmt::format("'{}' is not valid JSON", path));
        return parsed;
    }
    bad(path.substr(0, path.find('.')), fmt::format("'{}' must be a JSON Schema object", path));
}

void read_response_format(const Json& v, std::vector<Spec>& specs) {
    if (!v.is_object()) bad("response_format", "'response_format' must be an object");
    const auto type = v.find("type");
    if (type == v.end() || !type->is_string())
        bad("response_format", "'response_format.type' is required (one of 'text', 'json_object', 'json_schema')");
    const std::string t = type->get<std::string>();
    if (t == "text") return;
    if (t == "json_object") {
        specs.push_back({"response_format", "response_format", Spec::kJsonObject, Json()});
        return;
    }
    if (t != "json_schema") {
        bad("response_format",
            fmt::format("'response_format.type' must be one of 'text', 'json_object', 'json_schema'; got '{}'", t));
    }
    const auto js = v.find("json_schema");
    if (js == v.end() || !js->is_object())
        bad("response_format", "'response_format.json_schema' must be an object with a 'schema'");
    for (const auto& [key, value] : js->items()) {
        if (key != "name" && key != "schema" && key != "strict" && key != "description") {
            bad("response_format", fmt::format("Unrecognized field 'response_format.json_schema.{}'", key));
        }
    }
    if (js->contains("name") && !(*js)["name"].is_string())
        bad("response_format", "'response_format.json_schema.name' must be a string");
    if (js->contains("strict") && !(*js)["strict"].is_boolean() && !(*js)["strict"].is_null()) {
        bad("response_format", "'response_format.json_schema.strict' must be a boolean");
    }
    const auto schema = js->find("schema");
    if (schema == js->end() || schema->is_null()) {
        // OpenAI allows a json_schema without a schema: any JSON object.
        specs.push_back({"response_format", "response_format.json_schema", Spec::kJsonObject, Json()});
        return;
    }
    specs.push_back({"response_format", "response_format.json_schema.schema", Spec::kJsonSchema, *schema});
}

void read_structured_outputs(const Json& v, std::vector<Spec>& specs) {
    if (!v.is_object()) bad("structured_outputs", "'structured_outputs' must be an object");
    for (const auto& [key, value] : v.items()) {
        if (value.is_null()) continue;
        const std::string path = "structured_outputs." + key;
        if (key == "json") {
            specs.push_back({"structured_outputs", path, Spec::kJsonSchema, schema_of(value, path)});
        } else if (key == "regex") {
            specs.push_back({"structured_outputs", path, Spec::kRegex, string_of(value, path)});
        } else if (key == "choice") {
            specs.push_back({"structured_outputs", path, Spec::kChoice, value});
        } else if (key == "grammar") {
            specs.push_back({"structured_outputs", path, Spec::kGrammar, string_of(value, path)});
        } else if (key == "json_object") {
            if (!value.is_boolean()) bad("structured_outputs", "'structured_outputs.json_object' must be a boolean");
            if (value.get<bool>()) specs.push_back({"structured_outputs", path, Spec::kJsonObject, Json()});
        } else if (key == "disable_any_whitespace" || key == "disable_fallback" ||
                   key == "disable_additional_properties" || key == "whitespace_pattern") {
            // Backend options: our JSON is always compact and strict (docs/serving.md).
        } else {
            bad("structured_outputs",
                fmt::format(
                    "'structured_outputs.{}' is not supported (supported: json, regex, choice, grammar, json_object)",
                    key));
        }
    }
}

std::string convert(const Spec& s);

// Bounds on a constraint, checked before any conversion: the conversion and the grammar
// compile grow with the constraint, and one request must not hold an API worker (or later the
// engine's step) for seconds (a 3 MB schema took 8.7 s to refuse). Real schemas, regexes and
// grammars are far smaller (docs/serving.md, "Structured outputs").
constexpr size_t kMaxSchemaNodes = 10000;      // values in a JSON schema (objects, arrays, leaves)
constexpr size_t kMaxConstraintBytes = 64000;  // a regex, a GBNF grammar, all choices together
constexpr size_t kMaxGbnfBytes = 256000;       // the GBNF a constraint converts to

// The number of values in v, counting stops just past limit (so a huge schema costs no more).
size_t count_nodes(const Json& v, size_t limit) {
    size_t n = 1;
    if (v.is_structured()) {
        for (const Json& child : v) {
            if (n > limit) break;
            n += count_nodes(child, limit - n);
        }
    }
    return n;
}

void check_size(const Spec& s) {
    size_t bytes = 0;
    switch (s.kind) {
        case Spec::kJsonSchema:
            if (count_nodes(s.value, kMaxSchemaNodes) > kMaxSchemaNodes) {
                bad(s.param, fmt::format("'{}' has more than {} values; structured outputs take smaller schemas",
                                         s.path, kMaxSchemaNodes));
            }
            return;
        case Spec::kRegex:
        case Spec::kGrammar:
            bytes = s.value.get_ref<const std::string&>().size();
            break;
        case Spec::kChoice:
            if (s.value.is_array()) {
                for (const Json& c : s.value) bytes += c.is_string() ? c.get_ref<const std::string&>().size() : 0;
            }
            break;
        case Spec::kJsonObject:
            return;
    }
    if (bytes > kMaxConstraintBytes) {
        bad(s.param,
            fmt::format("'{}' has {} bytes; structured outputs take at most {}", s.path, bytes, kMaxConstraintBytes));
    }
}

std::string to_gbnf(const Spec& s) {
    check_size(s);
    std::string gbnf = convert(s);
    if (gbnf.size() > kMaxGbnfBytes) {
        bad(s.param, fmt::format("'{}' makes a grammar of {} bytes; structured outputs take at most {}", s.path,
                                 gbnf.size(), kMaxGbnfBytes));
    }
    return gbnf;
}

std::string convert(const Spec& s) {
    try {
        switch (s.kind) {
            case Spec::kJsonSchema:
                return structured::json_schema_to_gbnf(s.value, s.path);
            case Spec::kJsonObject:
                return structured::json_object_gbnf();
            case Spec::kRegex:
                return structured::regex_to_gbnf(s.value.get<std::string>(), s.path);
            case Spec::kGrammar:
                return structured::checked_gbnf(s.value.get<std::string>(), s.path);
            case Spec::kChoice: {
                if (!s.value.is_array()) bad(s.param, fmt::format("'{}' must be a list of strings", s.path));
                std::vector<std::string> choices;
                for (const Json& c : s.value) {
                    if (!c.is_string()) bad(s.param, fmt::format("'{}' must be a list of strings", s.path));
                    choices.push_back(c.get<std::string>());
                }
                return structured::choices_to_gbnf(choices, s.path);
            }
        }
    } catch (const ApiError&) {
        throw;
    } catch (const Error& e) {
        bad(s.param, e.what());
    }
    return {};
}

}  // namespace

std::string parse_structured_output(const Json& body) {
    std::vector<Spec> specs;
    if (const Json* v = field(body, "response_format")) read_response_format(*v, specs);
    if (const Json* v = field(body, "guided_json"))
        specs.push_back({"guided_json", "guided_json", Spec::kJsonSchema, schema_of(*v, "guided_json")});
    if (const Json* v = field(body, "guided_regex"))
        specs.push_back({"guided_regex", "guided_regex", Spec::kRegex, string_of(*v, "guided_regex")});
    if (const Json* v = field(body, "guided_choice"))
        specs.push_back({"guided_choice", "guided_choice", Spec::kChoice, *v});
    if (const Json* v = field(body, "guided_grammar"))
        specs.push_back({"guided_grammar", "guided_grammar", Spec::kGrammar, string_of(*v, "guided_grammar")});
    if (const Json* v = field(body, "structured_outputs")) read_structured_outputs(*v, specs);
    if (const Json* v = field(body, "guided_decoding_backend"); v && !v->is_string()) {
        bad("guided_decoding_backend", "'guided_decoding_backend' must be a string");
    }
    if (const Json* v = field(body, "guided_whitespace_pattern"); v && !v->is_string()) {
        bad("guided_whitespace_pattern", "'guided_whitespace_pattern' must be a string");
    }
    if (specs.empty()) return {};
    if (specs.size() > 1) {
        bad(specs[1].param, fmt::format("only one structured output constraint may be given; got '{}' and '{}'",
                                        specs[0].path, specs[1].path));
    }
    return to_gbnf(specs[0]);
}

}  // namespace moeserve::serve::openai
