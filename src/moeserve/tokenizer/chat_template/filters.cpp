// Built-in filters and tests (jinja2 semantics; tojson as transformers overrides it).
#include <algorithm>
#include <cmath>

#include "moeserve/core/error.h"
#include "moeserve/tokenizer/chat_template/builtins.h"
#include "moeserve/tokenizer/chat_template/helpers.h"

namespace moeserve::tokenizer::jinja {
namespace {

int64_t length_of(const Value& v, int line) {
    if (v.is_string()) return static_cast<int64_t>(utf8_chars(v.as_string()).size());
    if (v.is_list()) return static_cast<int64_t>(v.as_list().size());
    if (v.is_dict()) return static_cast<int64_t>(v.as_dict().size());
    if (v.is_undefined()) return 0;
    raise(ErrorCode::kInvalidArgument, "chat template line {}: object of type '{}' has no len()", line, v.type_name());
}

// transformers: tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False).
Value filter_tojson(const Value& input, const CallArgs& a) {
    JsonDumpOptions opt;
    opt.ensure_ascii = arg(a, 0, "ensure_ascii", false).truthy();
    Value indent = arg(a, 1, "indent", Value::none());
    if (indent.is_int()) {
        opt.indented = true;
        opt.indent.assign(static_cast<size_t>(std::max<int64_t>(indent.as_int(), 0)), ' ');
    } else if (indent.is_string()) {
        opt.indented = true;
        opt.indent = indent.as_string();
    } else if (!indent.is_none()) {
        raise(ErrorCode::kInvalidArgument, "chat template line {}: tojson indent must be an int", a.line);
    }
    if (opt.indented) opt.item_separator = ",";
    Value separators = arg(a, 2, "separators", Value::none());
    if (separators.is_list() && separators.as_list().size() == 2 && separators.as_list()[0].is_string() &&
        separators.as_list()[1].is_string()) {
        opt.item_separator = separators.as_list()[0].as_string();
        opt.key_separator = separators.as_list()[1].as_string();
    } else if (!separators.is_none()) {
        raise(ErrorCode::kInvalidArgument, "chat template line {}: tojson separators must be a pair of strings",
              a.line);
    }
    opt.sort_keys = arg(a, 3, "sort_keys", false).truthy();
    return to_json(input, opt);
}

// jinja2 getattr-like lookup used by map/selectattr/join/sort attribute= (dotted paths).
Value attribute_of(const Value& item, const std::string& path) {
    Value cur = item;
    size_t start = 0;
    while (start <= path.size()) {
        size_t dot = path.find('.', start);
        std::string part = path.substr(start, dot == std::string::npos ? dot : dot - start);
        const Value* found = cur.find(part);
        if (found != nullptr) {
            cur = *found;
        } else if (cur.is_list() && !part.empty() && part.find_first_not_of("0123456789") == std::string::npos &&
                   std::stoul(part) < cur.as_list().size()) {
            cur = cur.as_list()[std::stoul(part)];
        } else {
            return Value::undefined(part);
        }
        if (dot == std::string::npos) break;
        start = dot + 1;
    }
    return cur;
}

CallArgs shift_args(const CallArgs& a, size_t n) {
    CallArgs rest;
    rest.line = a.line;
    if (a.positional.size() > n) {
        rest.positional.assign(a.positional.begin() + static_cast<std::ptrdiff_t>(n), a.positional.end());
    }
    return rest;
}

// select / reject / selectattr / rejectattr.
Value filter_select(const std::string& name, const Value& input, const CallArgs& a) {
    bool by_attr = name == "selectattr" || name == "rejectattr";
    bool keep_if = name == "select" || name == "selectattr";
    size_t test_pos = by_attr ? 1 : 0;
    std::string attr = by_attr ? arg(a, 0, "attribute").str() : "";
    Value test = arg(a, test_pos, "test");
    CallArgs test_args = shift_args(a, test_pos + 1);
    List out;
    for (const Value& item : iterate(input, a.line)) {
        Value v = by_attr ? attribute_of(item, attr) : item;
        bool ok = test.is_undefined() ? v.truthy() : apply_test(test.str(), v, test_args);
        if (ok == keep_if) out.push_back(item);
    }
    return Value::list(std::move(out));
}

Value filter_map(const Value& input, const CallArgs& a) {
    Value attr = arg(a, 99, "attribute");
    List out;
    for (const Value& item : iterate(input, a.line)) {
        if (!attr.is_undefined()) {
            Value v = attribute_of(item, attr.str());
            out.push_back(v.is_undefined() ? arg(a, 99, "default") : v);
        } else {
            if (a.positional.empty()) {
                raise(ErrorCode::kInvalidArgument,
                      "chat template line {}: map needs a filter name or attribute=", a.line);
            }
            out.push_back(apply_filter(a.positional[0].str(), item, shift_args(a, 1)));
        }
    }
    return Value::list(std::move(out));
}

bool less_than(const Value& x, const Value& y, int line) {
    if ((x.is_number() || x.is_bool()) && (y.is_number() || y.is_bool())) {
        return x.to_double() < y.to_double();
    }
    if (x.is_string() && y.is_string()) return x.as_string() < y.as_string();
    raise(ErrorCode::kInvalidArgument, "chat template line {}: '<' not supported between instances of '{}' and '{}'",
          line, x.type_name(), y.type_name());
}

Value filter_sort(const Value& input, const CallArgs& a) {
    bool reverse = arg(a, 0, "reverse", false).truthy();
    bool case_sensitive = arg(a, 1, "case_sensitive", false).truthy();
    Value attr = arg(a, 2, "attribute");
    List items = iterate(input, a.line);
    auto key = [&](const Value& v) {
        Value k = attr.is_undefined() ? v : attribute_of(v, attr.str());
        if (!case_sensitive && k.is_string()) return Value(apply_filter("lower", k, {}));
        return k;
    };
    std::stable_sort(items.begin(), items.end(), [&](const Value& x, const Value& y) {
        return reverse ? less_than(key(y), key(x), a.line) : less_than(key(x), key(y), a.line);
    });
    return Value::list(std::move(items));
}

std::string html_escape(const std::string& s) {
    std::string out;
    for (char c : s) {
        switch (c) {
            case '&':
                out += "&amp;";
                break;
            case '<':
                out += "&lt;";
                break;
            case '>':
                out += "&gt;";
                break;
            case '"':
                out += "&#34;";
                break;
            case '\'':
                out += "&#39;";
                break;
            default:
                out += c;
        }
    }
    return out;
}

Value filter_int(const Value& input, const CallArgs& a) {
    int64_t fallback = int_arg(a, 0, "default", 0);
    if (input.is_int()) return input;
    if (input.is_bool()) return int64_t{input.as_bool()};
    if (input.is_float()) return static_cast<int64_t>(std::trunc(input.as_float()));
    if (input.is_string()) {
        std::string s = py_strip(input.as_string(), nullptr, true, true);
        try {
            size_t used = 0;
            long long v = std::stoll(s, &used, 10);
            if (used == s.size()) return static_cast<int64_t>(v);
            double d = std::stod(s, &used);  // jinja2 falls back to int(float(s))
            if (used == s.size()) return static_cast<int64_t>(std::trunc(d));
        } catch (const std::exception&) {
        }
    }
    return fallback;
}

}  // namespace

[[noreturn]] void raise_undefined(const Value& undefined, int line) {
    raise(ErrorCode::kInvalidArgument, "chat template line {}: '{}' is undefined", line, undefined.undefined_name());
}

Value apply_filter(const std::string& name, const Value& input, const CallArgs& a) {
    if (name == "length" || name == "count") return length_of(input, a.line);
    if (name == "tojson") return filter_tojson(input, a);
    if (name == "safe") return input;
    if (name == "string") return input.str();
    if (name == "default" || name == "d") {
        bool boolean = arg(a, 1, "boolean", false).truthy();
        bool use_default = input.is_undefined() || (boolean && !input.truthy());
        return use_default ? arg(a, 0, "default_value", Value("")) : input;
    }
    if (name == "trim") {
        Value chars = arg(a, 0, "chars");
        return py_strip(input.str(), chars.is_string() ? &chars.as_string() : nullptr, true, true);
    }
    if (name == "upper" || name == "lower" || name == "title" || name == "capitalize") {
        if (name == "title") {  // jinja2's title filter: word starts follow - space ( { [ <
            std::string s = input.str();
            std::string out;
            bool start = true;
            for (char c : s) {
                bool sep = c == '-' || c == '(' || c == '{' || c == '[' || c == '<' ||
                           std::isspace(static_cast<unsigned char>(c));
                out += static_cast<char>(start ? std::toupper(static_cast<unsigned char>(c))
                                               : std::tolower(static_cast<unsigned char>(c)));
                start = sep;
            }
            return out;
        }
        if (name == "capitalize") return py_capitalize(input.str());
        std::string s = input.str();
        for (char& c : s) {
            c = static_cast<char>(name == "upper" ? std::toupper(static_cast<unsigned char>(c))
                                                  : std::tolower(static_cast<unsigned char>(c)));
        }
        return s;
    }
    if (name == "join") {
        std::string sep = arg(a, 0, "d", Value("")).str();
        Value attr = arg(a, 1, "attribute");
        std::string out;
        bool first = true;
        for (const Value& item : iterate(input, a.line)) {
            if (!first) out += sep;
            first = false;
            out += (attr.is_undefined() ? item : attribute_of(item, attr.str())).str();
        }
        return out;
    }
    if (name == "first" || name == "last") {
        List items = iterate(input, a.line);
        if (items.empty()) return Value::undefined(name);
        return name == "first" ? items.front() : items.back();
    }
    if (name == "list") return Value::list(iterate(input, a.line));
    if (name == "reverse") {
        if (input.is_string()) {
            std::vector<std::string> chars = utf8_chars(input.as_string());
            std::string out;
            for (auto it = chars.rbegin(); it != chars.rend(); ++it) out += *it;
            return out;
        }
        List items = iterate(input, a.line);
        std::reverse(items.begin(), items.end());
        return Value::list(std::move(items));
    }
    if (name == "int") return filter_int(input, a);
    if (name == "float") {
        if (input.is_number() || input.is_bool()) return input.to_double();
        try {
            return std::stod(input.str());
        } catch (const std::exception&) {
            return arg(a, 0, "default", 0.0);
        }
    }
    if (name == "abs") {
        if (input.is_int()) return input.as_int() < 0 ? -input.as_int() : input.as_int();
        if (input.is_float()) return std::fabs(input.as_float());
    }
    if (name == "replace") {
        return get_method(Value(input.str()), "replace", a.line)->call(a);
    }
    if (name == "escape" || name == "e") return html_escape(input.str());
    if (name == "map") return filter_map(input, a);
    if (name == "select" || name == "reject" || name == "selectattr" || name == "rejectattr") {
        return filter_select(name, input, a);
    }
    if (name == "sort") return filter_sort(input, a);
    if (name == "items" && input.is_dict()) return get_method(input, "items", a.line)->call(a);
    if (name == "unique") {
        List out;
        for (const Value& item : iterate(input, a.line)) {
            bool seen = std::any_of(out.begin(), out.end(), [&](const Value& o) { return o.equals(item); });
            if (!seen) out.push_back(item);
        }
        return Value::list(std::move(out));
    }
    raise(ErrorCode::kUnsupported, "chat template line {}: the filter '{}' is not supported (for input of type '{}')",
          a.line, name, input.type_name());
}

bool apply_test(const std::string& name, const Value& v, const CallArgs& a) {
    if (name == "defined") return !v.is_undefined();
    if (name == "undefined") return v.is_undefined();
    if (name == "none") return v.is_none();
    if (name == "string") return v.is_string();
    if (name == "mapping") return v.is_dict();
    if (name == "number") return v.is_number() || v.is_bool();
    if (name == "integer") return v.is_int();
    if (name == "float") return v.is_float();
    if (name == "boolean") return v.is_bool();
    if (name == "true") return v.is_bool() && v.as_bool();
    if (name == "false") return v.is_bool() && !v.as_bool();
    if (name == "iterable" || name == "sequence") {
        return v.is_list() || v.is_dict() || v.is_string() || v.is_undefined();
    }
    if (name == "callable") return v.is_callable() || v.is_undefined();
    if (name == "odd" || name == "even" || name == "divisibleby") {
        if (!v.is_int()) {
            raise(ErrorCode::kInvalidArgument, "chat template line {}: test '{}' needs an int", a.line, name);
        }
        if (name == "odd") return v.as_int() % 2 != 0;
        if (name == "even") return v.as_int() % 2 == 0;
        int64_t d = int_arg(a, 0, "num", 0);
        if (d == 0) raise(ErrorCode::kInvalidArgument, "chat template line {}: divisibleby 0", a.line);
        return v.as_int() % d == 0;
    }
    if (name == "lower" || name == "upper") {
        std::string s = v.str();
        return s == apply_filter(name, v, a).as_string();
    }
    Value other = arg(a, 0, "b");
    if (name == "eq" || name == "equalto" || name == "==") return v.equals(other);
    if (name == "ne" || name == "!=") return !v.equals(other);
    if (name == "sameas") {  // Python `is`: identity for None/bools, else same type and value
        return v.type_name() == other.type_name() && v.equals(other);
    }
    if (name == "lt" || name == "lessthan" || name == "<") return less_than(v, other, a.line);
    if (name == "gt" || name == "greaterthan" || name == ">") return less_than(other, v, a.line);
    if (name == "le" || name == "<=") return !less_than(other, v, a.line);
    if (name == "ge" || name == ">=") return !less_than(v, other, a.line);
    if (name == "in") return contains(other, v, a.line);
    raise(ErrorCode::kUnsupported, "chat template line {}: the test '{}' is not supported", a.line, name);
}

}  // namespace moeserve::tokenizer::jinja
