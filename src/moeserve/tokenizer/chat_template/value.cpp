// Value: construction from JSON, Python truthiness/str/repr/==, and transformers' tojson.
#include "moeserve/tokenizer/chat_template/value.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "moeserve/core/error.h"
#include "moeserve/core/escape.h"

namespace moeserve::tokenizer::jinja {

Value Value::list(List items) {
    Value v;
    v.data_ = std::make_shared<List>(std::move(items));
    return v;
}

Value Value::tuple(List items) {
    Value v = list(std::move(items));
    v.is_tuple_ = true;
    return v;
}

Value Value::dict(Dict items) {
    Value v;
    v.data_ = std::make_shared<Dict>(std::move(items));
    return v;
}

Value Value::make_namespace(Dict attrs) {
    Value v;
    v.data_ = std::make_shared<Namespace>(Namespace{std::move(attrs)});
    return v;
}

Value Value::function(std::string name, NativeFunction fn) {
    Value v;
    v.data_ = std::make_shared<Callable>(Callable{std::move(name), std::move(fn)});
    return v;
}

namespace {

template <typename Json>
Value value_from_json(const Json& j) {
    switch (j.type()) {
        case nlohmann::json::value_t::null:
            return Value::none();
        case nlohmann::json::value_t::boolean:
            return Value(j.template get<bool>());
        case nlohmann::json::value_t::number_integer:
            return Value(j.template get<int64_t>());
        case nlohmann::json::value_t::number_unsigned:
            return Value(static_cast<int64_t>(j.template get<uint64_t>()));
        case nlohmann::json::value_t::number_float:
            return Value(j.template get<double>());
        case nlohmann::json::value_t::string:
            return Value(j.template get<std::string>());
        case nlohmann::json::value_t::array: {
            List items;
            items.reserve(j.size());
            for (const auto& item : j) items.push_back(value_from_json(item));
            return Value::list(std::move(items));
        }
        case nlohmann::json::value_t::object: {
            Dict items;
            items.reserve(j.size());
            for (auto it = j.begin(); it != j.end(); ++it) {
                items.emplace_back(it.key(), value_from_json(it.value()));
            }
            return Value::dict(std::move(items));
        }
        default:
            raise(ErrorCode::kInvalidArgument, "chat template context: JSON value of type '{}' cannot be used",
                  j.type_name());
    }
}

std::string repr_string(const std::string& s) {
    // Python's choice: single quotes, unless the text holds one and no double quote.
    const bool has_single = s.find('\'') != std::string::npos;
    const bool has_double = s.find('"') != std::string::npos;
    return quote_escaped(s, (has_single && !has_double) ? '"' : '\'');
}

void json_escape_into(const std::string& s, bool ensure_ascii, std::string& out) {
    out += '"';
    for (size_t i = 0; i < s.size(); ++i) {
        auto c = static_cast<unsigned char>(s[i]);
        switch (c) {
            case '"':
                out += "\\\"";
                break;
            case '\\':
                out += "\\\\";
                break;
            case '\n':
                out += "\\n";
                break;
            case '\r':
                out += "\\r";
                break;
            case '\t':
                out += "\\t";
                break;
            case '\b':
                out += "\\b";
                break;
            case '\f':
                out += "\\f";
                break;
            default:
                if (c < 0x20) {
                    out += fmt::format("\\u{:04x}", c);
                } else if (c >= 0x80 && ensure_ascii) {
                    // Decode one UTF-8 sequence; astral code points become surrogate pairs.
                    int len = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : 2;
                    uint32_t cp = c & (0x3F >> (len - 1));
                    for (int k = 1; k < len && i + 1 < s.size(); ++k) {
                        cp = (cp << 6) | (static_cast<unsigned char>(s[++i]) & 0x3F);
                    }
                    if (cp >= 0x10000) {
                        cp -= 0x10000;
                        out += fmt::format("\\u{:04x}\\u{:04x}", 0xD800 + (cp >> 10), 0xDC00 + (cp & 0x3FF));
                    } else {
                        out += fmt::format("\\u{:04x}", cp);
                    }
                } else {
                    out += static_cast<char>(c);
                }
        }
    }
    out += '"';
}

void to_json_into(const Value& v, const JsonDumpOptions& opt, int depth, std::string& out) {
    auto newline = [&](int level) {
        out += '\n';
        for (int i = 0; i < level; ++i) out += opt.indent;
    };
    if (v.is_none()) {
        out += "null";
    } else if (v.is_bool()) {
        out += v.as_bool() ? "true" : "false";
    } else if (v.is_int()) {
        out += std::to_string(v.as_int());
    } else if (v.is_float()) {
        double d = v.as_float();
        out += std::isnan(d) ? "NaN" : std::isinf(d) ? (d > 0 ? "Infinity" : "-Infinity") : format_python_float(d);
    } else if (v.is_string()) {
        json_escape_into(v.as_string(), opt.ensure_ascii, out);
    } else if (v.is_list()) {
        const List& items = v.as_list();
        if (items.empty()) {
            out += "[]";
            return;
        }
        out += '[';
        for (size_t i = 0; i < items.size(); ++i) {
            if (i > 0) out += opt.item_separator;
            if (opt.indented) newline(depth + 1);
            to_json_into(items[i], opt, depth + 1, out);
        }
        if (opt.indented) newline(depth);
        out += ']';
    } else if (v.is_dict() || v.is_namespace()) {
        Dict items = v.is_dict() ? v.as_dict() : v.as_namespace();
        if (items.empty()) {
            out += "{}";
            return;
        }
        if (opt.sort_keys) {
            std::stable_sort(items.begin(), items.end(),
                             [](const auto& a, const auto& b) { return a.first < b.first; });
        }
        out += '{';
        for (size_t i = 0; i < items.size(); ++i) {
            if (i > 0) out += opt.item_separator;
            if (opt.indented) newline(depth + 1);
            json_escape_into(items[i].first, opt.ensure_ascii, out);
            out += opt.key_separator;
            to_json_into(items[i].second, opt, depth + 1, out);
        }
        if (opt.indented) newline(depth);
        out += '}';
    } else {
        raise(ErrorCode::kInvalidArgument, "tojson: object of type '{}' is not JSON serializable", v.type_name());
    }
}

}  // namespace

Value Value::from_json(const nlohmann::json& j) { return value_from_json(j); }
Value Value::from_json(const nlohmann::ordered_json& j) { return value_from_json(j); }

double Value::to_double() const {
    if (is_int()) return static_cast<double>(as_int());
    if (is_bool()) return as_bool() ? 1.0 : 0.0;
    return as_float();
}

const std::string& Value::callable_name() const { return std::get<std::shared_ptr<Callable>>(data_)->name; }

Value Value::call(const CallArgs& args) const { return std::get<std::shared_ptr<Callable>>(data_)->fn(args); }

bool Value::truthy() const {
    if (is_undefined() || is_none()) return false;
    if (is_bool()) return as_bool();
    if (is_int()) return as_int() != 0;
    if (is_float()) return as_float() != 0.0;
    if (is_string()) return !as_string().empty();
    if (is_list()) return !as_list().empty();
    if (is_dict()) return !as_dict().empty();
    return true;
}

std::string format_python_float(double d) {
    if (std::isnan(d)) return "nan";
    if (std::isinf(d)) return d > 0 ? "inf" : "-inf";
    // Shortest %e representation that round-trips, as Python's repr does.
    char buf[64];
    for (int precision = 0; precision <= 17; ++precision) {
        std::snprintf(buf, sizeof(buf), "%.*e", precision, d);
        if (std::strtod(buf, nullptr) == d) break;
    }
    std::string s(buf);
    std::string sign;
    if (s[0] == '-') {
        sign = "-";
        s.erase(0, 1);
    }
    size_t e_pos = s.find('e');
    int exponent = std::atoi(s.c_str() + e_pos + 1);
    std::string digits = s.substr(0, e_pos);
    digits.erase(std::remove(digits.begin(), digits.end(), '.'), digits.end());
    while (digits.size() > 1 && digits.back() == '0') digits.pop_back();
    if (exponent >= -4 && exponent < 16) {
        std::string out;
        if (exponent >= 0) {
            size_t int_len = static_cast<size_t>(exponent) + 1;
            if (digits.size() < int_len) digits.append(int_len - digits.size(), '0');
            out = digits.substr(0, int_len) + "." + (digits.size() > int_len ? digits.substr(int_len) : "0");
        } else {
            out = "0." + std::string(static_cast<size_t>(-exponent - 1), '0') + digits;
        }
        return sign + out;
    }
    std::string mantissa = digits.substr(0, 1);
    if (digits.size() > 1) mantissa += "." + digits.substr(1);
    return sign + mantissa + fmt::format("e{}{:02d}", exponent < 0 ? '-' : '+', std::abs(exponent));
}

std::string Value::str() const {
    if (is_undefined()) return "";
    if (is_string()) return as_string();
    return repr();
}

std::string Value::repr() const {
    if (is_undefined()) return "Undefined";
    if (is_none()) return "None";
    if (is_bool()) return as_bool() ? "True" : "False";
    if (is_int()) return std::to_string(as_int());
    if (is_float()) return format_python_float(as_float());
    if (is_string()) return repr_string(as_string());
    if (is_list()) {
        std::string out = is_tuple_ ? "(" : "[";
        const List& items = as_list();
        for (size_t i = 0; i < items.size(); ++i) {
            if (i > 0) out += ", ";
            out += items[i].repr();
        }
        if (is_tuple_ && items.size() == 1) out += ",";
        return out + (is_tuple_ ? ")" : "]");
    }
    if (is_dict() || is_namespace()) {
        const Dict& items = is_dict() ? as_dict() : as_namespace();
        std::string out = "{";
        for (size_t i = 0; i < items.size(); ++i) {
            if (i > 0) out += ", ";
            out += repr_string(items[i].first) + ": " + items[i].second.repr();
        }
        out += "}";
        return is_dict() ? out : "<Namespace " + out + ">";
    }
    return "<function " + callable_name() + ">";
}

std::string Value::type_name() const {
    if (is_undefined()) return "Undefined";
    if (is_none()) return "NoneType";
    if (is_bool()) return "bool";
    if (is_int()) return "int";
    if (is_float()) return "float";
    if (is_string()) return "str";
    if (is_list()) return is_tuple_ ? "tuple" : "list";
    if (is_dict()) return "dict";
    if (is_namespace()) return "Namespace";
    return "function";
}

bool Value::equals(const Value& other) const {
    if ((is_number() || is_bool()) && (other.is_number() || other.is_bool())) {
        if (is_float() || other.is_float()) return to_double() == other.to_double();
        auto as_i = [](const Value& v) { return v.is_bool() ? int64_t{v.as_bool()} : v.as_int(); };
        return as_i(*this) == as_i(other);
    }
    if (data_.index() != other.data_.index()) return false;
    if (is_undefined() || is_none()) return true;
    if (is_string()) return as_string() == other.as_string();
    if (is_list()) {
        if (is_tuple_ != other.is_tuple_) return false;  // Python: (1, 2) != [1, 2]
        const List& a = as_list();
        const List& b = other.as_list();
        if (a.size() != b.size()) return false;
        for (size_t i = 0; i < a.size(); ++i) {
            if (!a[i].equals(b[i])) return false;
        }
        return true;
    }
    if (is_dict()) {
        const Dict& a = as_dict();
        if (a.size() != other.as_dict().size()) return false;
        for (const auto& [key, value] : a) {
            const Value* found = other.find(key);
            if (found == nullptr || !value.equals(*found)) return false;
        }
        return true;
    }
    if (is_namespace()) {  // namespaces and callables compare by identity
        return std::get<std::shared_ptr<Namespace>>(data_) == std::get<std::shared_ptr<Namespace>>(other.data_);
    }
    return std::get<std::shared_ptr<Callable>>(data_) == std::get<std::shared_ptr<Callable>>(other.data_);
}

const Value* Value::find(const std::string& key) const {
    if (!is_dict() && !is_namespace()) return nullptr;
    const Dict& items = is_dict() ? as_dict() : as_namespace();
    for (const auto& [k, v] : items) {
        if (k == key) return &v;
    }
    return nullptr;
}

std::string to_json(const Value& v, const JsonDumpOptions& options) {
    std::string out;
    to_json_into(v, options, 0, out);
    return out;
}

}  // namespace moeserve::tokenizer::jinja
