// The built-in filters, tests, methods (str, dict) and global functions of the Jinja subset,
// with jinja2 + transformers semantics. Everything not listed raises Error(kUnsupported).
#pragma once

#include <ctime>
#include <optional>
#include <string>
#include <vector>

#include "moeserve/tokenizer/chat_template/value.h"

namespace moeserve::tokenizer::jinja {

// Splits UTF-8 text into code points (one string each), as Python indexes str.
std::vector<std::string> utf8_chars(const std::string& s);

// Python's str.strip/lstrip/rstrip: chars == nullptr strips Unicode whitespace.
std::string py_strip(const std::string& s, const std::string* chars, bool left, bool right);

// Throws the error jinja2 raises when an Undefined is used where a value is needed.
[[noreturn]] void raise_undefined(const Value& undefined, int line);

// Applies the filter `name` to input. Throws Error(kUnsupported) for an unknown filter.
Value apply_filter(const std::string& name, const Value& input, const CallArgs& args);

// Evaluates `input is name(args)`. Throws Error(kUnsupported) for an unknown test.
bool apply_test(const std::string& name, const Value& v, const CallArgs& a);

// The bound method obj.name (for str and dict), or nullopt when obj has no such attribute
// (jinja2 then yields Undefined). Throws Error(kUnsupported) for a real Python method that
// this interpreter does not implement (e.g. str.format), naming it and the line.
std::optional<Value> get_method(const Value& obj, const std::string& name, int line);

// The global functions: range, namespace, dict, raise_exception (transformers),
// strftime_now (transformers). Undefined when unknown.
Value lookup_global(const std::string& name);

// transformers' strftime_now(format): the local time now, or, given fixed_now, that instant in
// UTC (renders that must not depend on the clock or the time zone: goldens, tests).
Value strftime_now_function(std::optional<std::time_t> fixed_now);

}  // namespace moeserve::tokenizer::jinja
