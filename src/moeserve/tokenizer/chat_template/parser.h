// Parser: tokens -> syntax tree, with jinja2's operator precedence.
#pragma once

#include <vector>

#include "moeserve/tokenizer/chat_template/ast.h"
#include "moeserve/tokenizer/chat_template/lexer.h"

namespace moeserve::tokenizer::jinja {

// Parses a whole template. Throws Error(kInvalidArgument) naming the line for syntax errors and
// Error(kUnsupported) naming the tag and line for statements outside the supported subset.
Body parse_template(const std::vector<Token>& tokens);

}  // namespace moeserve::tokenizer::jinja
