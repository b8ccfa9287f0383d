// Python str and dict methods, UTF-8 helpers and the global functions of the Jinja subset.
#include <algorithm>
#include <ctime>
#include <set>

#include "moeserve/core/error.h"
#include "moeserve/tokenizer/chat_template/builtins.h"
#include "moeserve/tokenizer/chat_template/helpers.h"

namespace moeserve::tokenizer::jinja {
namespace {

bool is_py_space(const std::string& ch) {
    static constexpr const char* kUnicodeSpaces[] = {
        "\xc2\x85",     "\xc2\xa0",     "\xe1\x9a\x80", "\xe2\x80\x80", "\xe2\x80\x81", "\xe2\x80\x82", "\xe2\x80\x83",
        "\xe2\x80\x84", "\xe2\x80\x85", "\xe2\x80\x86", "\xe2\x80\x87", "\xe2\x80\x88", "\xe2\x80\x89", "\xe2\x80\x8a",
        "\xe2\x80\xa8", "\xe2\x80\xa9", "\xe2\x80\xaf", "\xe2\x81\x9f", "\xe3\x80\x80"};
    if (ch.size() == 1) {
        char c = ch[0];
        return c == ' ' || (c >= '\t' && c <= '\r') || (c >= '\x1c' && c <= '\x1f');
    }
    for (const char* s : kUnicodeSpaces) {
        if (ch == s) return true;
    }
    return false;
}

std::string ascii_upper(std::string s) {
    for (char& c : s) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
    return s;
}

std::string ascii_lower(std::string s) {
    for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    return s;
}

// Python str.title(): upper-case the first letter after any non-letter, lower-case the rest.
std::string py_title(const std::string& s) {
    std::string out = s;
    bool prev_letter = false;
    for (char& c : out) {
        bool letter = std::isalpha(static_cast<unsigned char>(c)) != 0;
        if (letter) c = static_cast<char>(prev_letter ? std::tolower(c) : std::toupper(c));
        prev_letter = letter;
    }
    return out;
}

std::vector<std::string> py_split(const std::string& s, const Value& sep, int64_t maxsplit) {
    std::vector<std::string> parts;
    if (sep.is_none() || sep.is_undefined()) {
        std::vector<std::string> chars = utf8_chars(s);
        std::string current;
        bool in_word = false;
        for (size_t i = 0; i < chars.size(); ++i) {
            if (is_py_space(chars[i])) {
                if (in_word) {
                    parts.push_back(current);
                    current.clear();
                    in_word = false;
                }
                continue;
            }
            if (!in_word && maxsplit >= 0 && static_cast<int64_t>(parts.size()) == maxsplit) {
                // The rest, with its trailing whitespace stripped, is the last part.
                std::string rest;
                for (size_t k = i; k < chars.size(); ++k) rest += chars[k];
                parts.push_back(py_strip(rest, nullptr, false, true));
                return parts;
            }
            in_word = true;
            current += chars[i];
        }
        if (in_word) parts.push_back(current);
        return parts;
    }
    if (!sep.is_string()) {
        raise(ErrorCode::kInvalidArgument, "split: separator must be a string, got '{}'", sep.type_name());
    }
    const std::string& d = sep.as_string();
    if (d.empty()) raise(ErrorCode::kInvalidArgument, "split: empty separator");
    size_t start = 0;
    while (maxsplit < 0 || static_cast<int64_t>(parts.size()) < maxsplit) {
        size_t at = s.find(d, start);
        if (at == std::string::npos) break;
        parts.push_back(s.substr(start, at - start));
        start = at + d.size();
    }
    parts.push_back(s.substr(start));
    return parts;
}

std::string py_replace(const std::string& s, const std::string& from, const std::string& to, int64_t count) {
    std::string out;
    if (from.empty()) {  // Python inserts `to` around every code point
        int64_t n = 0;
        for (const std::string& ch : utf8_chars(s)) {
            if (count < 0 || n++ < count) out += to;
            out += ch;
        }
        if (count < 0 || n < count) out += to;
        return out;
    }
    size_t start = 0;
    int64_t n = 0;
    while (count < 0 || n < count) {
        size_t at = s.find(from, start);
        if (at == std::string::npos) break;
        out.append(s, start, at - start);
        out += to;
        start = at + from.size();
        ++n;
    }
    out.append(s, start, std::string::npos);
    return out;
}

// startswith/endswith take a str or a tuple (list) of str.
bool affix_match(const std::string& s, const Value& affix, bool at_start) {
    auto match = [&](const Value& a) {
        if (!a.is_string()) {
            raise(ErrorCode::kInvalidArgument, "{}: argument must be str or a tuple of str, got '{}'",
                  at_start ? "startswith" : "endswith", a.type_name());
        }
        const std::string& p = a.as_string();
        if (p.size() > s.size()) return false;
        return at_start ? s.compare(0, p.size(), p) == 0 : s.compare(s.size() - p.size(), p.size(), p) == 0;
    };
    if (affix.is_list()) {
        return std::any_of(affix.as_list().begin(), affix.as_list().end(), match);
    }
    return match(affix);
}

Value string_method(const std::string& s, const std::string& name, const CallArgs& a) {
    if (name == "startswith" || name == "endswith") {
        if (a.positional.size() != 1) {
            raise(ErrorCode::kUnsupported, "chat template line {}: str.{} is supported with one argument only", a.line,
                  name);
        }
        return affix_match(s, a.positional[0], name == "startswith");
    }
    if (name == "strip" || name == "lstrip" || name == "rstrip") {
        Value chars = arg(a, 0, "chars");
        bool has_chars = chars.is_string();
        return py_strip(s, has_chars ? &chars.as_string() : nullptr, name != "rstrip", name != "lstrip");
    }
    if (name == "split") {
        std::vector<std::string> parts = py_split(s, arg(a, 0, "sep"), int_arg(a, 1, "maxsplit", -1));
        List out(parts.begin(), parts.end());
        return Value::list(std::move(out));
    }
    if (name == "upper") return ascii_upper(s);
    if (name == "lower") return ascii_lower(s);
    if (name == "title") return py_title(s);
    if (name == "capitalize") return py_capitalize(s);
    if (name == "replace") {
        Value from = arg(a, 0, "old");
        Value to = arg(a, 1, "new");
        if (!from.is_string() || !to.is_string()) {
            raise(ErrorCode::kInvalidArgument, "chat template line {}: str.replace needs two strings", a.line);
        }
        return py_replace(s, from.as_string(), to.as_string(), int_arg(a, 2, "count", -1));
    }
    if (name == "find" || name == "count") {
        Value sub = arg(a, 0, "sub");
        if (!sub.is_string()) {
            raise(ErrorCode::kInvalidArgument, "chat template line {}: str.{} needs a string", a.line, name);
        }
        if (name == "count") {
            if (sub.as_string().empty()) return static_cast<int64_t>(utf8_chars(s).size() + 1);
            int64_t n = 0;
            for (size_t at = s.find(sub.as_string()); at != std::string::npos;
                 at = s.find(sub.as_string(), at + sub.as_string().size())) {
                ++n;
            }
            return n;
        }
        size_t at = s.find(sub.as_string());
        return at == std::string::npos ? int64_t{-1} : static_cast<int64_t>(utf8_chars(s.substr(0, at)).size());
    }
    if (name == "join") {
        std::string out;
        bool first = true;
        for (const Value& item : iterate(arg(a, 0, "iterable"), a.line)) {
            if (!first) out += s;
            first = false;
            out += item.str();
        }
        return out;
    }
    // isdigit, isalpha, isspace, ... on ASCII text.
    bool all = !s.empty();
    for (unsigned char c : s) {
        int ok = name == "isdigit"   ? std::isdigit(c)
                 : name == "isalpha" ? std::isalpha(c)
                 : name == "isalnum" ? std::isalnum(c)
                 : name == "isspace" ? std::isspace(c)
                 : name == "islower" ? !std::isupper(c)
                                     : !std::islower(c);
        all = all && ok != 0;
    }
    return all;
}

Value dict_method(const Value& d, const std::string& name, const CallArgs& a) {
    const Dict& items = d.as_dict();
    if (name == "items") {
        List out;
        for (const auto& [k, v] : items) out.push_back(Value::tuple({Value(k), v}));
        return Value::list(std::move(out));
    }
    if (name == "keys") {
        List out;
        for (const auto& kv : items) out.emplace_back(kv.first);
        return Value::list(std::move(out));
    }
    if (name == "values") {
        List out;
        for (const auto& kv : items) out.push_back(kv.second);
        return Value::list(std::move(out));
    }
    // get(key, default=None)
    Value key = arg(a, 0, "key");
    const Value* found = key.is_string() ? d.find(key.as_string()) : nullptr;
    if (found != nullptr) return *found;
    return a.positional.size() > 1 ? a.positional[1] : Value::none();
}

const std::set<std::string> kStrMethods = {
    "startswith", "endswith", "strip", "lstrip", "rstrip",  "split",   "upper",   "lower",   "title",   "capitalize",
    "replace",    "find",     "count", "join",   "isdigit", "isalpha", "isalnum", "isspace", "islower", "isupper"};
// Python str methods that exist but are not implemented: using one is an error, not Undefined.
const std::set<std::string> kStrUnsupported = {
    "format",    "format_map", "center",       "ljust",       "rjust",     "zfill",        "expandtabs",
    "partition", "rpartition", "rsplit",       "splitlines",  "rfind",     "index",        "rindex",
    "swapcase",  "casefold",   "encode",       "translate",   "maketrans", "removeprefix", "removesuffix",
    "isnumeric", "isdecimal",  "isidentifier", "isprintable", "istitle"};
const std::set<std::string> kDictMethods = {"items", "keys", "values", "get"};
const std::set<std::string> kDictUnsupported = {"pop", "popitem", "setdefault", "update", "clear", "copy", "fromkeys"};
const std::set<std::string> kListUnsupported = {"append",  "pop",   "extend", "insert", "remove", "sort",
                                                "reverse", "index", "count",  "copy",   "clear"};

}  // namespace

std::string py_capitalize(const std::string& s) {
    std::string out = ascii_lower(s);
    if (!out.empty()) out[0] = static_cast<char>(std::toupper(static_cast<unsigned char>(out[0])));
    return out;
}

std::vector<std::string> utf8_chars(const std::string& s) {
    std::vector<std::string> out;
    for (size_t i = 0; i < s.size();) {
        auto c = static_cast<unsigned char>(s[i]);
        size_t len = c < 0x80 ? 1 : c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC0 ? 2 : 1;
        len = std::min(len, s.size() - i);
        out.push_back(s.substr(i, len));
        i += len;
    }
    return out;
}

std::string py_strip(const std::string& s, const std::string* chars, bool left, bool right) {
    std::vector<std::string> cps = utf8_chars(s);
    std::vector<std::string> set = chars ? utf8_chars(*chars) : std::vector<std::string>{};
    auto strippable = [&](const std::string& ch) {
        return chars ? std::find(set.begin(), set.end(), ch) != set.end() : is_py_space(ch);
    };
    size_t begin = 0;
    size_t end = cps.size();
    while (left && begin < end && strippable(cps[begin])) ++begin;
    while (right && end > begin && strippable(cps[end - 1])) --end;
    std::string out;
    for (size_t i = begin; i < end; ++i) out += cps[i];
    return out;
}

std::optional<Value> get_method(const Value& obj, const std::string& name, int line) {
    if (obj.is_string()) {
        if (kStrMethods.count(name)) {
            const std::string& s = obj.as_string();
            return Value::function("str." + name, [s, name](const CallArgs& a) { return string_method(s, name, a); });
        }
        if (kStrUnsupported.count(name)) {
            raise(ErrorCode::kUnsupported, "chat template line {}: the string method '{}' is not supported", line,
                  name);
        }
    } else if (obj.is_dict()) {
        if (kDictMethods.count(name)) {
            return Value::function("dict." + name,
                                   [obj, name](const CallArgs& a) { return dict_method(obj, name, a); });
        }
        if (kDictUnsupported.count(name)) {
            raise(ErrorCode::kUnsupported,
                  "chat template line {}: the dict method '{}' is not supported (templates "
                  "cannot modify their inputs)",
                  line, name);
        }
    } else if (obj.is_list() && kListUnsupported.count(name)) {
        raise(ErrorCode::kUnsupported,
              "chat template line {}: the list method '{}' is not supported (templates cannot "
              "modify their inputs)",
              line, name);
    }
    return std::nullopt;
}

Value strftime_now_function(std::optional<std::time_t> fixed_now) {
    return Value::function("strftime_now", [fixed_now](const CallArgs& a) -> Value {
        Value format = arg(a, 0, "format");
        if (!format.is_string()) {
            raise(ErrorCode::kInvalidArgument, "chat template line {}: strftime_now needs a format string", a.line);
        }
        std::tm when{};
        if (fixed_now) {
            gmtime_r(&*fixed_now, &when);
        } else {
            const std::time_t now = std::time(nullptr);
            localtime_r(&now, &when);  // transformers: datetime.now(), the local time
        }
        char buf[256];
        const size_t n = std::strftime(buf, sizeof(buf), format.as_string().c_str(), &when);
        return std::string(buf, n);
    });
}

Value lookup_global(const std::string& name) {
    if (name == "range") {
        return Value::function("range", [](const CallArgs& a) {
            int64_t start = 0;
            int64_t stop = 0;
            int64_t step = 1;
            auto num = [&](size_t i) {
                if (!a.positional[i].is_int()) {
                    raise(ErrorCode::kInvalidArgument, "chat template line {}: range() needs integers, got '{}'",
                          a.line, a.positional[i].type_name());
                }
                return a.positional[i].as_int();
            };
            if (a.positional.size() == 1) {
                stop = num(0);
            } else if (a.positional.size() >= 2) {
                start = num(0);
                stop = num(1);
                if (a.positional.size() > 2) step = num(2);
            }
            if (step == 0 || a.positional.empty() || a.positional.size() > 3) {
                raise(ErrorCode::kInvalidArgument,
                      "chat template line {}: range() takes 1-3 integers and a non-zero step", a.line);
            }
            List out;
            for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) out.emplace_back(i);
            return Value::list(std::move(out));
        });
    }
    if (name == "namespace" || name == "dict") {
        bool is_ns = name == "namespace";
        return Value::function(name, [is_ns](const CallArgs& a) {
            Dict attrs;
            for (const Value& p : a.positional) {
                if (!p.is_dict()) {
                    raise(ErrorCode::kInvalidArgument,
                          "chat template line {}: positional arguments of namespace()/dict() "
                          "must be dicts, got '{}'",
                          a.line, p.type_name());
                }
                for (const auto& kv : p.as_dict()) set_item(attrs, kv.first, kv.second);
            }
            for (const auto& [k, v] : a.keyword) set_item(attrs, k, v);
            return is_ns ? Value::make_namespace(std::move(attrs)) : Value::dict(std::move(attrs));
        });
    }
    if (name == "raise_exception") {
        return Value::function("raise_exception", [](const CallArgs& a) -> Value {
            std::string message = a.positional.empty() ? "" : a.positional[0].str();
            raise(ErrorCode::kInvalidArgument, "chat template raised an exception: {}", message);
        });
    }
    if (name == "strftime_now") return strftime_now_function(std::nullopt);
    return Value::undefined(name);
}

}  // namespace moeserve::tokenizer::jinja
