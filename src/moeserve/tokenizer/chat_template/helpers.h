// Small helpers shared by the interpreter and the built-ins: argument access, Python
// iteration and dict updates. Internal to chat_template/.
#pragma once

#include <cstdint>
#include <string>

#include "moeserve/tokenizer/chat_template/value.h"

namespace moeserve::tokenizer::jinja {

// Argument `pos` (positional) or `name` (keyword); `fallback` when neither was given.
Value arg(const CallArgs& a, size_t pos, const char* name, Value fallback = Value::undefined());

// Like arg() but must be an int (or absent / None, giving fallback).
int64_t int_arg(const CallArgs& a, size_t pos, const char* name, int64_t fallback);

// Python iteration: list items, dict keys, str code points; Undefined iterates as empty.
// Throws Error(kInvalidArgument) for values that are not iterable.
List iterate(const Value& v, int line);

// Python `item in container` (substring for str, key for dict, element for list; False for
// Undefined). Throws Error(kInvalidArgument) where Python raises TypeError.
bool contains(const Value& container, const Value& item, int line);

// d[key] = value, keeping the key's first position.
void set_item(Dict& d, const std::string& key, Value value);

// Python str.capitalize() (ASCII case mapping).
std::string py_capitalize(const std::string& s);

}  // namespace moeserve::tokenizer::jinja
