// JSON Schema -> GBNF. Each schema node becomes a GBNF expression; objects, arrays, $refs and
// alternatives get named rules (so recursion through $ref works and texts stay linear).
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <set>

#include "moeserve/core/error.h"
#include "moeserve/structured/convert.h"
#include "moeserve/structured/grammar.h"

namespace moeserve::structured {
namespace {

using Json = nlohmann::ordered_json;

constexpr int64_t kMaxInteger = 9999999999999999;  // 16 digits, as the unbounded integer rule

// The primitive rules, each with the rules it uses.
struct Primitive {
    const char* name;
    const char* body;
    std::vector<const char*> deps;
};
const Primitive kPrimitives[] = {
    {"json-value",
     R"(json-object | json-array | json-string | json-number | json-boolean | json-null)",
     {"json-object", "json-array", "json-string", "json-number", "json-boolean", "json-null"}},
    {"json-object",
     R"("{" ( json-string ":" json-value ( "," json-string ":" json-value )* )? "}")",
     {"json-string", "json-value"}},
    {"json-array", R"("[" ( json-value ( "," json-value )* )? "]")", {"json-value"}},
    {"json-string", R"("\"" json-char* "\"")", {"json-char"}},
    {"json-char", R"([^"\\\x00-\x1F] | "\\" ( ["\\/bfnrt] | "u" [0-9a-fA-F]{4} ))", {}},
    {"json-integer", R"("-"? ( "0" | [1-9] [0-9]{0,15} ))", {}},
    {"json-number", R"(json-integer ( "." [0-9]{1,16} )? ( [eE] [-+]? [0-9]{1,3} )?)", {"json-integer"}},
    {"json-boolean", R"("true" | "false")", {}},
    {"json-null", R"("null")", {}},
    // Formats (string contents, without the quotes).
    {"fmt-date", R"([0-9]{4} "-" ( "0" [1-9] | "1" [0-2] ) "-" ( "0" [1-9] | [12] [0-9] | "3" [01] ))", {}},
    {"fmt-time",
     R"(( [01] [0-9] | "2" [0-3] ) ":" [0-5] [0-9] ":" [0-5] [0-9] ( "." [0-9]{1,6} )? ( "Z" | [+-] ( [01] [0-9] | "2" [0-3] ) ":" [0-5] [0-9] ))",
     {}},
    {"fmt-date-time", R"(fmt-date "T" fmt-time)", {"fmt-date", "fmt-time"}},
    {"fmt-uuid", R"([0-9a-f]{8} "-" [0-9a-f]{4} "-" [0-9a-f]{4} "-" [0-9a-f]{4} "-" [0-9a-f]{12})", {}},
    {"fmt-email", R"([a-zA-Z0-9_.+-]{1,32} "@" [a-zA-Z0-9-]{1,32} ( "." [a-zA-Z0-9-]{1,16} ){1,3})", {}},
    {"fmt-ipv4", R"(fmt-octet "." fmt-octet "." fmt-octet "." fmt-octet)", {"fmt-octet"}},
    {"fmt-octet", R"("25" [0-5] | "2" [0-4] [0-9] | "1" [0-9] [0-9] | [1-9] [0-9] | [0-9])", {}},
};

// Keywords whose meaning we cannot enforce and that would make outputs fail validation if ignored.
const char* const kUnsupported[] = {"not",
                                    "if",
                                    "then",
                                    "else",
                                    "patternProperties",
                                    "propertyNames",
                                    "contains",
                                    "dependentSchemas",
                                    "dependentRequired",
                                    "dependencies",
                                    "unevaluatedProperties",
                                    "unevaluatedItems",
                                    "multipleOf",
                                    "minProperties",
                                    "maxProperties"};

std::string join_alternatives(const std::vector<std::string>& alts) {
    if (alts.size() == 1) return alts[0];
    std::string out = "(";
    for (size_t i = 0; i < alts.size(); ++i) out += (i ? " | " : "") + alts[i];
    return out + ")";
}

class SchemaConverter {
public:
    // prefix: put before every rule name made here (not the shared json-*/fmt-* primitives).
    SchemaConverter(const Json& root, std::string prefix) : root_(root), prefix_(std::move(prefix)) {}

    std::string convert(const std::string& path, const std::string& root_name = "root") {
        root_name_ = root_name;
        const std::string root = visit(root_, path);
        std::string out = root_name + " ::= " + root + "\n";
        for (const auto& [name, body] : rules_) out += fmt::format("{} ::= {}\n", name, body);
        return out;
    }

private:
    [[noreturn]] static void fail(const std::string& path, const std::string& what) {
        raise(ErrorCode::kInvalidArgument, "{}: {}", path, what);
    }

    std::string use(const std::string& name) {
        if (rules_.count(name)) return name;
        for (const auto& p : kPrimitives) {
            if (name == p.name) {
                rules_[name] = p.body;
                for (const char* d : p.deps) use(d);
                return name;
            }
        }
        MOESERVE_CHECK(false, "no primitive rule {}", name);
        return name;
    }

    std::string new_rule(const std::string& hint, const std::string& body) {
        std::string base;
        for (const char c : hint) base += std::isalnum(static_cast<unsigned char>(c)) ? c : '-';
        if (base.empty() || !std::isalpha(static_cast<unsigned char>(base[0]))) base = "s-" + base;
        base = prefix_ + base;
        std::string name = base;
        for (int i = 2;
             rules_.count(name) || name == root_name_ || name.rfind("json-", 0) == 0 || name.rfind("fmt-", 0) == 0;
             ++i) {
            name = base + "-" + std::to_string(i);
        }
        rules_[name] = body;
        return name;
    }

    static std::string literal_of(const Json& value) { return gbnf_literal(value.dump()); }

    // The schema a local "#/..." reference points to.
    const Json& resolve(const std::string& ref, const std::string& path) {
        if (ref == "#") return root_;
        if (ref.rfind("#/", 0) != 0) fail(path, "only local $refs (\"#/...\") are supported; got '" + ref + "'");
        try {
            const Json::json_pointer pointer(ref.substr(1));
            return root_.at(pointer);
        } catch (const std::exception&) {
            fail(path, "$ref '" + ref + "' does not point into the schema");
        }
    }

    std::string visit(const Json& s, const std::string& path) {
        // Recursion per nested schema and per $ref: bounded, the schema comes from a request.
        if (++depth_ > 256) fail(path, "the schema nests (or chains $refs) deeper than 256 levels");
        struct Leave {
            int& d;
            ~Leave() { --d; }
        } leave{depth_};
        if (s.is_boolean()) {
            if (!s.get<bool>()) fail(path, "the schema 'false' matches nothing");
            return use("json-value");
        }
        if (!s.is_object()) fail(path, "a schema must be an object or a boolean");
        for (const char* k : kUnsupported) {
            if (s.contains(k)) fail(path + "." + k, fmt::format("the keyword '{}' is not supported", k));
        }
        if (s.contains("$ref")) {
            if (!s["$ref"].is_string()) fail(path + ".$ref", "'$ref' must be a string");
            const std::string ref = s["$ref"].get<std::string>();
            const auto it = refs_.find(ref);
            if (it != refs_.end()) return it->second;
            std::string name = new_rule("ref-" + ref.substr(ref.rfind('/') + 1), "");
            refs_[ref] = name;
            const Json& target = resolve(ref, path + ".$ref");
            rules_[name] = visit(target, ref);
            return name;
        }
        if (s.contains("const")) return literal_of(s["const"]);
        if (s.contains("enum")) {
            const Json& e = s["enum"];
            if (!e.is_array() || e.empty()) fail(path + ".enum", "'enum' must be a non-empty list");
            std::vector<std::string> alts;
            for (const Json& v : e) alts.push_back(literal_of(v));
            return join_alternatives(alts);
        }
        for (const char* key : {"anyOf", "oneOf"}) {
            if (!s.contains(key)) continue;
            const Json& list = s[key];
            if (!list.is_array() || list.empty())
                fail(path + "." + key, fmt::format("'{}' must be a non-empty list", key));
            std::vector<std::string> alts;
            for (size_t i = 0; i < list.size(); ++i) {
                alts.push_back(visit(merged_with_parent(s, list[i], key), fmt::format("{}.{}[{}]", path, key, i)));
            }
            return new_rule(std::string(key) + "-" + std::to_string(rules_.size()), join_alternatives(alts));
        }
        if (s.contains("allOf")) return visit(merge_all_of(s, path), path);
        if (s.contains("type")) {
            const Json& t = s["type"];
            if (t.is_array()) {
                if (t.empty()) fail(path + ".type", "'type' must not be an empty list");
                std::vector<std::string> alts;
                for (size_t i = 0; i < t.size(); ++i) {
                    if (!t[i].is_string()) fail(fmt::format("{}.type[{}]", path, i), "a type must be a string");
                    alts.push_back(typed(s, t[i].get<std::string>(), path));
                }
                return join_alternatives(alts);
            }
            if (!t.is_string()) fail(path + ".type", "'type' must be a string or a list of strings");
            return typed(s, t.get<std::string>(), path);
        }
        // No type: infer it from the keywords present, else any JSON value.
        if (s.contains("properties") || s.contains("additionalProperties") || s.contains("required"))
            return typed(s, "object", path);
        if (s.contains("items") || s.contains("prefixItems") || s.contains("minItems") || s.contains("maxItems"))
            return typed(s, "array", path);
        if (s.contains("pattern") || s.contains("format") || s.contains("minLength") || s.contains("maxLength"))
            return typed(s, "string", path);
        if (s.contains("minimum") || s.contains("maximum") || s.contains("exclusiveMinimum") ||
            s.contains("exclusiveMaximum")) {
            return typed(s, "number", path);
        }
        return use("json-value");
    }

    // anyOf/oneOf branches inherit the parent's type-level keywords (pydantic writes
    // {"type": "object", "anyOf": [{"required": [...]}, ...]} rarely; "type" alone is common).
    static Json merged_with_parent(const Json& parent, const Json& branch, const char* key) {
        if (!branch.is_object()) return branch;
        Json out = branch;
        for (const auto& [k, v] : parent.items()) {
            if (k == key || k == "title" || k == "description" || k == "default" || k == "$defs" || k == "definitions")
                continue;
            if (!out.contains(k)) out[k] = v;
        }
        return out;
    }

    Json merge_all_of(const Json& s, const std::string& path) {
        const Json& list = s["allOf"];
        if (!list.is_array() || list.empty()) fail(path + ".allOf", "'allOf' must be a non-empty list");
        Json out = s;
        out.erase("allOf");
        for (size_t i = 0; i < list.size(); ++i) {
            const std::string p = fmt::format("{}.allOf[{}]", path, i);
            Json part = list[i];
            while (part.is_object() && part.contains("$ref") && part["$ref"].is_string()) {
                part = resolve(part["$ref"].get<std::string>(), p + ".$ref");
            }
            if (!part.is_object()) fail(p, "an allOf part must be an object schema");
            for (const auto& [k, v] : part.items()) {
                if (k == "properties" && out.contains("properties")) {
                    for (const auto& [name, prop] : v.items()) out["properties"][name] = prop;
                } else if (k == "required" && out.contains("required")) {
                    for (const auto& r : v) out["required"].push_back(r);
                } else if (!out.contains(k)) {
                    out[k] = v;
                } else if (out[k] != v && k != "title" && k != "description") {
                    fail(fmt::format("{}.{}", p, k),
                         fmt::format("allOf parts disagree on '{}' (only merging of object properties is supported)",
                                     k));
                }
            }
        }
        return out;
    }

    std::string typed(const Json& s, const std::string& type, const std::string& path) {
        if (type == "object") return object(s, path);
        if (type == "array") return array(s, path);
        if (type == "string") return string(s, path);
        if (type == "integer") return integer(s, path);
        if (type == "number") return number(s, path);
        if (type == "boolean") return use("json-boolean");
        if (type == "null") return use("json-null");
        fail(path,
             "unsupported type '" + type + "' (expected object, array, string, integer, number, boolean or null)");
    }

    static std::optional<double> number_field(const Json& s, const char* key, const std::string& path) {
        if (!s.contains(key)) return std::nullopt;
        const Json& v = s[key];
        if (v.is_boolean()) return std::nullopt;  // draft-4 exclusiveMinimum: true (handled by the caller)
        if (!v.is_number()) fail(path + "." + key, fmt::format("'{}' must be a number", key));
        return v.get<double>();
    }

    static int64_t count_field(const Json& s, const char* key, int64_t fallback, const std::string& path) {
        if (!s.contains(key)) return fallback;
        const Json& v = s[key];
        if (!v.is_number_integer() || v.get<int64_t>() < 0)
            fail(path + "." + key, fmt::format("'{}' must be a non-negative integer", key));
        return v.get<int64_t>();
    }

    // Integer bounds [lo, hi] from minimum/maximum/exclusive*, clamped to 16 digits.
    std::pair<int64_t, int64_t> integer_bounds(const Json& s, const std::string& path, bool* bounded) {
        double lo = -static_cast<double>(kMaxInteger), hi = static_cast<double>(kMaxInteger);
        bool any = false;
        const bool draft4_excl_min =
            s.contains("exclusiveMinimum") && s["exclusiveMinimum"].is_boolean() && s["exclusiveMinimum"].get<bool>();
        const bool draft4_excl_max =
            s.contains("exclusiveMaximum") && s["exclusiveMaximum"].is_boolean() && s["exclusiveMaximum"].get<bool>();
        if (auto v = number_field(s, "minimum", path)) {
            lo = std::max(lo, draft4_excl_min ? std::floor(*v) + 1 : std::ceil(*v));
            any = true;
        }
        if (auto v = number_field(s, "exclusiveMinimum", path)) {
            lo = std::max(lo, std::floor(*v) + 1);
            any = true;
        }
        if (auto v = number_field(s, "maximum", path)) {
            hi = std::min(hi, draft4_excl_max ? std::ceil(*v) - 1 : std::floor(*v));
            any = true;
        }
        if (auto v = number_field(s, "exclusiveMaximum", path)) {
            hi = std::min(hi, std::ceil(*v) - 1);
            any = true;
        }
        lo = std::max(lo, -static_cast<double>(kMaxInteger));
        hi = std::min(hi, static_cast<double>(kMaxInteger));
        if (lo > hi) fail(path, fmt::format("no integer lies within the bounds (minimum {} > maximum {})", lo, hi));
        *bounded = any;
        return {static_cast<int64_t>(lo), static_cast<int64_t>(hi)};
    }

    std::string integer(const Json& s, const std::string& path) {
        bool bounded = false;
        const auto [lo, hi] = integer_bounds(s, path, &bounded);
        if (!bounded) return use("json-integer");
        return new_rule("int-" + std::to_string(rules_.size()), integer_range_expression(lo, hi));
    }

    // With bounds: the integers in range, and non-negative i "." digits for i in [max(0, lo), hi - 1]
    // (a subset of the range: every output is valid, not every valid number can be output).
    std::string number(const Json& s, const std::string& path) {
        bool bounded = false;
        const auto [lo, hi] = integer_bounds(s, path, &bounded);
        if (!bounded) return use("json-number");
        std::string body = integer_range_expression(lo, hi);
        const int64_t flo = std::max<int64_t>(0, lo), fhi = hi - 1;
        if (flo <= fhi) body = "( " + body + " | " + integer_range_expression(flo, fhi) + " \".\" [0-9]{1,15} )";
        return new_rule("num-" + std::to_string(rules_.size()), body);
    }

    std::string string(const Json& s, const std::string& path) {
        if (s.contains("pattern")) {
            if (!s["pattern"].is_string()) fail(path + ".pattern", "'pattern' must be a string");
            const std::string e = regex_expression(s["pattern"].get<std::string>(), true, path + ".pattern");
            return new_rule("pattern-" + std::to_string(rules_.size()), "\"\\\"\" " + e + " \"\\\"\"");
        }
        if (s.contains("format") && s["format"].is_string()) {
            const std::string f = s["format"].get<std::string>();
            for (const char* known : {"date", "time", "date-time", "uuid", "email", "ipv4"}) {
                if (f == known) return new_rule("string-" + f, "\"\\\"\" " + use("fmt-" + f) + " \"\\\"\"");
            }
            // Other formats are annotations (JSON Schema's default): any string.
        }
        const int64_t min = count_field(s, "minLength", 0, path), max = count_field(s, "maxLength", -1, path);
        if (max >= 0 && max < min) fail(path, fmt::format("maxLength {} < minLength {}", max, min));
        if (min == 0 && max < 0) return use("json-string");
        if (max > 10000 || min > 10000) fail(path, "minLength/maxLength over 10000 are not supported");
        use("json-char");
        const std::string reps = max < 0 ? fmt::format("{{{},}}", min) : fmt::format("{{{},{}}}", min, max);
        return new_rule("string-" + std::to_string(rules_.size()), "\"\\\"\" json-char" + reps + " \"\\\"\"");
    }

    // Properties in schema order; required ones always present, optional ones skippable, then
    // additional properties (only when additionalProperties allows them). rest(i, first) is the
    // rule for properties i.. when nothing (first) or something was written before.
    std::string object(const Json& s, const std::string& path) {
        Json props = Json::object();
        if (s.contains("properties")) {
            if (!s["properties"].is_object()) fail(path + ".properties", "'properties' must be an object");
            props = s["properties"];
        }
        std::set<std::string> required;
        if (s.contains("required")) {
            if (!s["required"].is_array()) fail(path + ".required", "'required' must be a list of strings");
            for (const Json& r : s["required"]) {
                if (!r.is_string()) fail(path + ".required", "'required' must be a list of strings");
                required.insert(r.get<std::string>());
                if (!props.contains(r.get<std::string>())) props[r.get<std::string>()] = true;
            }
        }
        // additionalProperties: absent means none when properties are listed (OpenAI strict
        // mode), any when they are not ({"type": "object"} is any object).
        std::string extra;
        const bool listed = s.contains("properties");
        if (s.contains("additionalProperties")) {
            const Json& a = s["additionalProperties"];
            if (!(a.is_boolean() && !a.get<bool>())) extra = visit(a, path + ".additionalProperties");
        } else if (!listed) {
            extra = use("json-value");
        }
        const std::string id = std::to_string(rules_.size());
        std::string more, first;  // rest(n, false), rest(n, true)
        if (extra.empty()) {
            more = first = "\"\"";
        } else {
            const std::string kv = use("json-string") + " \":\" " + extra;
            more = new_rule("obj" + id + "-extra", "( \",\" " + kv + " )*");
            first = new_rule("obj" + id + "-extra-first", "( " + kv + " " + more + " )?");
        }
        std::vector<std::pair<std::string, const Json*>> list;
        for (const auto& [name, schema] : props.items()) list.emplace_back(name, &schema);
        for (size_t k = list.size(); k-- > 0;) {
            const auto& [name, schema] = list[k];
            const std::string kv = fmt::format("{} \":\" {}", literal_of(Json(name)),
                                               visit(*schema, fmt::format("{}.properties.{}", path, name)));
            const std::string next_more = more, next_first = first;
            if (required.count(name)) {
                first = fmt::format("{} {}", kv, next_more);
                more = fmt::format("\",\" {} {}", kv, next_more);
            } else {
                first = fmt::format("( {} {} | {} )", kv, next_more, next_first);
                more = fmt::format("( \",\" {} {} | {} )", kv, next_more, next_more);
            }
            first = new_rule(fmt::format("obj{}-{}-first", id, k), first);
            more = new_rule(fmt::format("obj{}-{}", id, k), more);
        }
        return new_rule("obj" + id, "\"{\" " + first + " \"}\"");
    }

    std::string array(const Json& s, const std::string& path) {
        int64_t min = count_field(s, "minItems", 0, path);
        const int64_t max = count_field(s, "maxItems", -1, path);
        if (max >= 0 && max < min) fail(path, fmt::format("maxItems {} < minItems {}", max, min));
        if (max > 10000 || min > 10000) fail(path, "minItems/maxItems over 10000 are not supported");
        if (s.contains("uniqueItems") && s["uniqueItems"].is_boolean() && s["uniqueItems"].get<bool>()) {
            fail(path + ".uniqueItems", "the keyword 'uniqueItems' is not supported");
        }
        std::vector<std::string> prefix;
        const Json* items = nullptr;
        const Json* tuple = s.contains("prefixItems")
                                ? &s["prefixItems"]
                                : (s.contains("items") && s["items"].is_array() ? &s["items"] : nullptr);
        const char* tuple_key = s.contains("prefixItems") ? "prefixItems" : "items";
        if (tuple) {
            if (!tuple->is_array()) fail(path + "." + tuple_key, fmt::format("'{}' must be a list", tuple_key));
            for (size_t i = 0; i < tuple->size(); ++i)
                prefix.push_back(visit((*tuple)[i], fmt::format("{}.{}[{}]", path, tuple_key, i)));
            const char* rest_key = s.contains("prefixItems") ? "items" : "additionalItems";
            if (s.contains(rest_key) && !(s[rest_key].is_boolean() && !s[rest_key].get<bool>())) items = &s[rest_key];
        } else if (s.contains("items")) {
            items = &s["items"];
        }
        const std::string id = std::to_string(rules_.size());
        const auto k = static_cast<int64_t>(prefix.size());
        if (max >= 0 && max < k) fail(path, fmt::format("maxItems {} is less than the {} tuple items", max, k));
        std::string item;
        if (!tuple)
            item = items ? visit(*items, path + ".items") : use("json-value");
        else if (items)
            item = visit(*items, path + "." + (s.contains("prefixItems") ? "items" : "additionalItems"));
        std::string body = "\"[\"";
        for (int64_t i = 0; i < k; ++i) body += (i ? " \",\" " : " ") + prefix[static_cast<size_t>(i)];
        if (!item.empty()) {
            // Items after the tuple: between max(0, min - k) and max - k of them.
            const int64_t lo = std::max<int64_t>(0, min - k), hi = max < 0 ? -1 : max - k;
            const auto reps = [](int64_t a, int64_t b) {
                return b < 0 ? fmt::format("{{{},}}", a) : fmt::format("{{{},{}}}", a, b);
            };
            if (hi != 0) {
                if (k > 0) {
                    body += " ( \",\" " + item + " )" + reps(lo, hi);
                } else if (lo == 0) {
                    body += " ( " + item + " ( \",\" " + item + " )" + reps(0, hi < 0 ? -1 : hi - 1) + " )?";
                } else {
                    body += " " + item + " ( \",\" " + item + " )" + reps(lo - 1, hi < 0 ? -1 : hi - 1);
                }
            }
        } else if (min > k) {
            fail(path,
                 fmt::format("minItems {} needs more than the {} tuple items, but no more items are allowed", min, k));
        }
        return new_rule("arr" + id, body + " \"]\"");
    }

    const Json& root_;
    std::string prefix_;
    std::string root_name_ = "root";
    int depth_ = 0;
    std::map<std::string, std::string> rules_;
    std::map<std::string, std::string> refs_;
};

}  // namespace

std::string json_schema_to_gbnf(const Json& schema, const std::string& path) {
    return checked_gbnf(SchemaConverter(schema, "").convert(path), path);
}

std::string json_schema_to_gbnf_rules(const Json& schema, const std::string& path, const std::string& rule_name) {
    const bool ok = !rule_name.empty() && std::all_of(rule_name.begin(), rule_name.end(), [](char c) {
        return std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_';
    });
    if (!ok || rule_name.rfind("json-", 0) == 0 || rule_name.rfind("fmt-", 0) == 0) {
        raise(ErrorCode::kInvalidArgument, "{}: bad rule name '{}'", path, rule_name);
    }
    return SchemaConverter(schema, rule_name + "-").convert(path, rule_name);
}

std::string merge_gbnf(const std::vector<std::string>& parts) {
    std::map<std::string, std::string> seen;  // rule name -> its line
    std::string out;
    for (const std::string& part : parts) {
        size_t begin = 0;
        while (begin < part.size()) {
            size_t end = part.find('\n', begin);
            if (end == std::string::npos) end = part.size();
            const std::string line = part.substr(begin, end - begin);
            begin = end + 1;
            const size_t def = line.find(" ::= ");
            if (line.empty()) continue;
            MOESERVE_CHECK(def != std::string::npos, "merge_gbnf: not a one-line rule: {}", line);
            const auto [it, added] = seen.emplace(line.substr(0, def), line);
            if (!added && it->second != line) {
                raise(ErrorCode::kInvalidArgument, "grammar: rule '{}' is defined twice, differently", it->first);
            }
            if (added) out += line + "\n";
        }
    }
    return out;
}

std::string json_object_gbnf() { return json_schema_to_gbnf(Json{{"type", "object"}}, "json_object"); }

}  // namespace moeserve::structured
