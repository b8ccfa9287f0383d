// Parser internals shared by parser.cpp (expressions) and statement_parser.cpp
// (statements). Internal to chat_template/.
#pragma once

#include <algorithm>
#include <set>
#include <string>
#include <vector>

#include "moeserve/core/error.h"
#include "moeserve/tokenizer/chat_template/ast.h"
#include "moeserve/tokenizer/chat_template/lexer.h"

namespace moeserve::tokenizer::jinja {

inline const char* token_kind_name(TokenKind kind) {
    switch (kind) {
        case TokenKind::kText:
            return "text";
        case TokenKind::kVarBegin:
            return "'{{'";
        case TokenKind::kVarEnd:
            return "'}}'";
        case TokenKind::kBlockBegin:
            return "'{%'";
        case TokenKind::kBlockEnd:
            return "'%}'";
        case TokenKind::kName:
            return "name";
        case TokenKind::kString:
            return "string";
        case TokenKind::kInt:
            return "integer";
        case TokenKind::kFloat:
            return "float";
        case TokenKind::kOperator:
            return "operator";
        case TokenKind::kEof:
            return "end of template";
    }
    return "token";
}

inline ExprPtr make_expr(Expr::Kind kind, int line) {
    auto e = std::make_unique<Expr>();
    e->kind = kind;
    e->line = line;
    return e;
}

inline ExprPtr make_binary(std::string op, ExprPtr lhs, ExprPtr rhs, int line) {
    auto e = make_expr(Expr::Kind::kBinary, line);
    e->name = std::move(op);
    e->args.push_back(std::move(lhs));
    e->args.push_back(std::move(rhs));
    return e;
}

class Parser {
public:
    explicit Parser(const std::vector<Token>& tokens) : toks_(tokens) {}

    Body parse_all() {
        std::string end_tag;
        return parse_body({}, end_tag);
    }

private:
    // ---- token helpers ----
    const Token& cur() const { return toks_[pos_]; }
    const Token& peek(size_t ahead = 1) const { return toks_[std::min(pos_ + ahead, toks_.size() - 1)]; }
    bool is_op(const char* op) const { return cur().kind == TokenKind::kOperator && cur().text == op; }
    bool is_name(const char* name) const { return cur().kind == TokenKind::kName && cur().text == name; }
    bool skip_op(const char* op) {
        if (!is_op(op)) return false;
        ++pos_;
        return true;
    }
    bool skip_name(const char* name) {
        if (!is_name(name)) return false;
        ++pos_;
        return true;
    }
    [[noreturn]] void fail(const std::string& expected) const {
        std::string got = cur().text.empty() ? token_kind_name(cur().kind) : fmt::format("'{}'", cur().text);
        raise(ErrorCode::kInvalidArgument, "chat template line {}: expected {}, got {}", cur().line, expected, got);
    }
    void expect_op(const char* op) {
        if (!skip_op(op)) fail(fmt::format("'{}'", op));
    }
    void expect(TokenKind kind) {
        if (cur().kind != kind) fail(token_kind_name(kind));
        ++pos_;
    }
    std::string expect_name() {
        if (cur().kind != TokenKind::kName) fail("a name");
        return toks_[pos_++].text;
    }

    // ---- statements ----
    // Parses statements until a block tag whose name is in `ends` (consumed up to the name).
    Body parse_body(const std::set<std::string>& ends, std::string& end_tag);
    std::unique_ptr<Stmt> parse_statement();

    // ---- expressions ----
    // An expression, or a bare tuple `a, b` (which becomes a list).
    ExprPtr parse_tuple();
    ExprPtr parse_expression();
    ExprPtr parse_or();
    ExprPtr parse_and();
    ExprPtr parse_not();
    ExprPtr parse_compare();
    ExprPtr parse_math1();
    ExprPtr parse_concat();
    ExprPtr parse_math2();
    ExprPtr parse_pow();
    ExprPtr parse_unary(bool with_filter);
    ExprPtr parse_primary();
    static ExprPtr literal(Value v, int line);
    ExprPtr parse_postfix(ExprPtr node);
    ExprPtr parse_subscript(ExprPtr node, int line);
    // Parses "(args, name=value)" into a call-like node whose args[0] is `callee`.
    ExprPtr parse_call(ExprPtr callee, Expr::Kind kind, std::string name);
    ExprPtr parse_filter_expr(ExprPtr node);
    ExprPtr parse_test(ExprPtr node, int line);

    const std::vector<Token>& toks_;
    size_t pos_ = 0;
};

}  // namespace moeserve::tokenizer::jinja
