// Interpreter: renders a parsed template tree with a context, following jinja2's semantics
// (scoping of for loops, Undefined, Python operators).
#pragma once

#include <string>

#include "moeserve/tokenizer/chat_template/ast.h"
#include "moeserve/tokenizer/chat_template/value.h"

namespace moeserve::tokenizer::jinja {

// Renders `body` with the variables of `globals` (a dict Value). Pure: all state lives in the
// call, so many threads may render the same tree at once. Throws Error for template errors
// (raise_exception, undefined use, type errors: kInvalidArgument; unsupported constructs:
// kUnsupported), each naming the template line.
std::string render_body(const Body& body, const Value& globals);

}  // namespace moeserve::tokenizer::jinja
