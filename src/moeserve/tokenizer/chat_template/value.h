// The value type of the chat-template interpreter: the subset of Python objects that Jinja2
// templates see (None, bool, int, float, str, list, dict, namespace, callables, Undefined).
// Depends on core and nlohmann::json only.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <variant>
#include <vector>

namespace moeserve::tokenizer::jinja {

class Value;

using List = std::vector<Value>;
// Python dicts keep insertion order; so does this (small dicts: linear lookup is fine).
using Dict = std::vector<std::pair<std::string, Value>>;

// Positional and keyword arguments of a call, already evaluated.
struct CallArgs {
    std::vector<Value> positional;
    std::vector<std::pair<std::string, Value>> keyword;
    int line = 0;  // template line of the call, for error messages
};

using NativeFunction = std::function<Value(const CallArgs&)>;

// Marks a namespace() object: a dict whose attributes can be assigned with `set ns.x = ...`.
struct Namespace {
    Dict attrs;
};

struct Undefined {
    std::string name;  // what was looked up, for "'x' is undefined" messages
};

// A Jinja value. Lists, dicts and namespaces are shared by reference, as in Python; everything
// else is copied. A Value is not thread-safe to mutate, but one render owns all values it makes.
class Value {
public:
    Value() : data_(Undefined{}) {}
    static Value undefined(std::string name = {}) { return Value(Undefined{std::move(name)}); }
    static Value none() { return Value(nullptr); }
    Value(bool b) : data_(b) {}
    Value(int64_t i) : data_(i) {}
    Value(int i) : data_(static_cast<int64_t>(i)) {}
    Value(double d) : data_(d) {}
    Value(std::string s) : data_(std::move(s)) {}
    Value(const char* s) : data_(std::string(s)) {}
    Value(std::nullptr_t) : data_(nullptr) {}
    static Value list(List items = {});
    // A Python tuple: a list that prints as (a, b).
    static Value tuple(List items);
    static Value dict(Dict items = {});
    static Value make_namespace(Dict attrs = {});
    static Value function(std::string name, NativeFunction fn);
    // Converts JSON (ordered or not) to a Value; object key order is kept as the json holds it.
    static Value from_json(const nlohmann::json& j);
    static Value from_json(const nlohmann::ordered_json& j);

    bool is_undefined() const { return std::holds_alternative<Undefined>(data_); }
    bool is_none() const { return std::holds_alternative<std::nullptr_t>(data_); }
    bool is_bool() const { return std::holds_alternative<bool>(data_); }
    bool is_int() const { return std::holds_alternative<int64_t>(data_); }
    bool is_float() const { return std::holds_alternative<double>(data_); }
    bool is_number() const { return is_int() || is_float(); }
    bool is_string() const { return std::holds_alternative<std::string>(data_); }
    bool is_list() const { return std::holds_alternative<std::shared_ptr<List>>(data_); }
    bool is_dict() const { return std::holds_alternative<std::shared_ptr<Dict>>(data_); }
    bool is_namespace() const { return std::holds_alternative<std::shared_ptr<Namespace>>(data_); }
    bool is_callable() const { return std::holds_alternative<std::shared_ptr<Callable>>(data_); }

    bool as_bool() const { return std::get<bool>(data_); }
    int64_t as_int() const { return std::get<int64_t>(data_); }
    double as_float() const { return std::get<double>(data_); }
    // Number as double (int or float; bool counts as int as in Python).
    double to_double() const;
    const std::string& as_string() const { return std::get<std::string>(data_); }
    List& as_list() const { return *std::get<std::shared_ptr<List>>(data_); }
    Dict& as_dict() const { return *std::get<std::shared_ptr<Dict>>(data_); }
    Dict& as_namespace() const { return std::get<std::shared_ptr<Namespace>>(data_)->attrs; }
    const std::string& undefined_name() const { return std::get<Undefined>(data_).name; }
    const std::string& callable_name() const;
    Value call(const CallArgs& args) const;

    // Python truthiness (Undefined is falsy).
    bool truthy() const;
    // Python str(): what {{ x }} prints. Undefined prints as "".
    std::string str() const;
    // Python repr(): used for items inside printed lists and dicts.
    std::string repr() const;
    // Python type name for error messages ("str", "NoneType", "list", ...).
    std::string type_name() const;
    // Python ==.
    bool equals(const Value& other) const;
    // Member lookup in a dict or namespace; nullptr when absent (or not a mapping).
    const Value* find(const std::string& key) const;

private:
    struct Callable {
        std::string name;
        NativeFunction fn;
    };
    using Data = std::variant<Undefined, std::nullptr_t, bool, int64_t, double, std::string, std::shared_ptr<List>,
                              std::shared_ptr<Dict>, std::shared_ptr<Namespace>, std::shared_ptr<Callable>>;
    explicit Value(Undefined u) : data_(std::move(u)) {}
    Data data_;
    bool is_tuple_ = false;
};

// Python's repr() of a float ("1.0", "0.1", "1e-05", "inf").
std::string format_python_float(double d);

// Options of Python's json.dumps, as transformers' tojson filter exposes them.
struct JsonDumpOptions {
    bool indented = false;              // indent is not None
    std::string indent;                 // one level of indentation (indent=2 -> "  ")
    std::string item_separator = ", ";  // json.dumps default; "," when indented
    std::string key_separator = ": ";
    bool ensure_ascii = false;  // transformers' default (Python's own default is True)
    bool sort_keys = false;
};

// json.dumps(v, **options). Throws Error(kInvalidArgument) for values JSON cannot hold
// (Undefined, callables).
std::string to_json(const Value& v, const JsonDumpOptions& options);

}  // namespace moeserve::tokenizer::jinja
