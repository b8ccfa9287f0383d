// Lexer of the Jinja subset: splits a template into text and tag tokens, applying whitespace
// control the way jinja2 does with trim_blocks=True and lstrip_blocks=True (as transformers).
#pragma once

#include <string>
#include <vector>

namespace moeserve::tokenizer::jinja {

enum class TokenKind {
    kText,        // literal template text (already whitespace-trimmed)
    kVarBegin,    // {{
    kVarEnd,      // }}
    kBlockBegin,  // {%
    kBlockEnd,    // %}
    kName,        // identifier or keyword
    kString,      // string literal, value already unescaped
    kInt,
    kFloat,
    kOperator,  // + - * / // % ** ~ == != < > <= >= = ( ) [ ] { } , . : |
    kEof,
};

struct Token {
    TokenKind kind;
    std::string text;  // text, name, unescaped string, number or operator spelling
    int line;          // 1-based line in the template source
};

// Tokenizes a whole template. Comments are dropped. Follows jinja2's source handling:
// "\r\n" and "\r" become "\n" and one trailing newline is removed (keep_trailing_newline=False).
// Throws Error(kInvalidArgument) with the line for an unclosed tag, comment or string.
std::vector<Token> tokenize(const std::string& source);

}  // namespace moeserve::tokenizer::jinja
