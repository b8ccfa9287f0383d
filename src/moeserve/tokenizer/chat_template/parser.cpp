// Recursive-descent parser for the Jinja subset, expressions part; precedence follows
// jinja2's parser.py: condexpr < or < and < not < compare < +,- < ~ < *,/,//,% < ** < unary
// < postfix/filter/test.
#include "moeserve/tokenizer/chat_template/parser_impl.h"

namespace moeserve::tokenizer::jinja {

// ---- expressions ----
// An expression, or a bare tuple `a, b` (which becomes a list).
ExprPtr Parser::parse_tuple() {
    int line = cur().line;
    ExprPtr first = parse_expression();
    if (!is_op(",")) return first;
    auto list = make_expr(Expr::Kind::kList, line);
    list->name = "tuple";
    list->args.push_back(std::move(first));
    while (skip_op(",")) {
        if (cur().kind == TokenKind::kVarEnd || cur().kind == TokenKind::kBlockEnd) break;
        list->args.push_back(parse_expression());
    }
    return list;
}

ExprPtr Parser::parse_expression() {
    ExprPtr expr = parse_or();
    while (is_name("if")) {
        int line = cur().line;
        ++pos_;
        auto cond = make_expr(Expr::Kind::kCondition, line);
        cond->args.push_back(std::move(expr));
        cond->args.push_back(parse_or());
        cond->args.push_back(skip_name("else") ? parse_expression() : nullptr);
        expr = std::move(cond);
    }
    return expr;
}

ExprPtr Parser::parse_or() {
    ExprPtr lhs = parse_and();
    while (is_name("or")) {
        int line = cur().line;
        ++pos_;
        lhs = make_binary("or", std::move(lhs), parse_and(), line);
    }
    return lhs;
}

ExprPtr Parser::parse_and() {
    ExprPtr lhs = parse_not();
    while (is_name("and")) {
        int line = cur().line;
        ++pos_;
        lhs = make_binary("and", std::move(lhs), parse_not(), line);
    }
    return lhs;
}

ExprPtr Parser::parse_not() {
    if (is_name("not")) {
        auto e = make_expr(Expr::Kind::kUnary, cur().line);
        ++pos_;
        e->name = "not";
        e->args.push_back(parse_not());
        return e;
    }
    return parse_compare();
}

ExprPtr Parser::parse_compare() {
    ExprPtr lhs = parse_math1();
    static const std::set<std::string> kCompareOps = {"==", "!=", "<", ">", "<=", ">="};
    int num_ops = 0;
    while (true) {
        int line = cur().line;
        std::string op;
        if (cur().kind == TokenKind::kOperator && kCompareOps.count(cur().text)) {
            op = cur().text;
            ++pos_;
        } else if (is_name("in")) {
            op = "in";
            ++pos_;
        } else if (is_name("not") && peek().kind == TokenKind::kName && peek().text == "in") {
            op = "not in";
            pos_ += 2;
        } else {
            return lhs;
        }
        if (++num_ops > 1) {
            raise(ErrorCode::kUnsupported, "chat template line {}: chained comparisons (a < b < c) are not supported",
                  line);
        }
        lhs = make_binary(op, std::move(lhs), parse_math1(), line);
    }
}

ExprPtr Parser::parse_math1() {
    ExprPtr lhs = parse_concat();
    while (is_op("+") || is_op("-")) {
        int line = cur().line;
        std::string op = toks_[pos_++].text;
        lhs = make_binary(op, std::move(lhs), parse_concat(), line);
    }
    return lhs;
}

ExprPtr Parser::parse_concat() {
    ExprPtr lhs = parse_math2();
    while (is_op("~")) {
        int line = cur().line;
        ++pos_;
        lhs = make_binary("~", std::move(lhs), parse_math2(), line);
    }
    return lhs;
}

ExprPtr Parser::parse_math2() {
    ExprPtr lhs = parse_pow();
    while (is_op("*") || is_op("/") || is_op("//") || is_op("%")) {
        int line = cur().line;
        std::string op = toks_[pos_++].text;
        lhs = make_binary(op, std::move(lhs), parse_pow(), line);
    }
    return lhs;
}

ExprPtr Parser::parse_pow() {
    ExprPtr lhs = parse_unary(true);
    while (is_op("**")) {
        int line = cur().line;
        ++pos_;
        lhs = make_binary("**", std::move(lhs), parse_unary(true), line);
    }
    return lhs;
}

ExprPtr Parser::parse_unary(bool with_filter) {
    ExprPtr node;
    if (is_op("-") || is_op("+")) {
        node = make_expr(Expr::Kind::kUnary, cur().line);
        node->name = toks_[pos_++].text;
        node->args.push_back(parse_unary(false));
    } else {
        node = parse_primary();
    }
    node = parse_postfix(std::move(node));
    if (with_filter) node = parse_filter_expr(std::move(node));
    return node;
}

ExprPtr Parser::parse_primary() {
    const Token& t = cur();
    if (t.kind == TokenKind::kName) {
        ++pos_;
        if (t.text == "true" || t.text == "True") return literal(Value(true), t.line);
        if (t.text == "false" || t.text == "False") return literal(Value(false), t.line);
        if (t.text == "none" || t.text == "None") return literal(Value::none(), t.line);
        auto e = make_expr(Expr::Kind::kName, t.line);
        e->name = t.text;
        return e;
    }
    if (t.kind == TokenKind::kString) {
        std::string s;
        while (cur().kind == TokenKind::kString) s += toks_[pos_++].text;
        return literal(Value(std::move(s)), t.line);
    }
    if (t.kind == TokenKind::kInt) {
        ++pos_;
        try {
            return literal(Value(static_cast<int64_t>(std::stoll(t.text))), t.line);
        } catch (const std::exception&) {
            raise(ErrorCode::kUnsupported, "chat template line {}: integer {} is too large", t.line, t.text);
        }
    }
    if (t.kind == TokenKind::kFloat) {
        ++pos_;
        return literal(Value(std::stod(t.text)), t.line);
    }
    if (skip_op("(")) {
        if (skip_op(")")) {
            auto empty = make_expr(Expr::Kind::kList, t.line);
            empty->name = "tuple";
            return empty;
        }
        ExprPtr inner = parse_expression();
        if (is_op(",")) {
            auto list = make_expr(Expr::Kind::kList, t.line);
            list->name = "tuple";
            list->args.push_back(std::move(inner));
            while (skip_op(",") && !is_op(")")) list->args.push_back(parse_expression());
            inner = std::move(list);
        }
        expect_op(")");
        return inner;
    }
    if (skip_op("[")) {
        auto list = make_expr(Expr::Kind::kList, t.line);
        while (!skip_op("]")) {
            if (!list->args.empty()) expect_op(",");
            if (skip_op("]")) break;
            list->args.push_back(parse_expression());
        }
        return list;
    }
    if (skip_op("{")) {
        auto dict = make_expr(Expr::Kind::kDict, t.line);
        while (!skip_op("}")) {
            if (!dict->args.empty()) expect_op(",");
            if (skip_op("}")) break;
            dict->args.push_back(parse_expression());
            expect_op(":");
            dict->args.push_back(parse_expression());
        }
        return dict;
    }
    fail("an expression");
}

ExprPtr Parser::literal(Value v, int line) {
    auto e = make_expr(Expr::Kind::kLiteral, line);
    e->literal = std::move(v);
    return e;
}

ExprPtr Parser::parse_postfix(ExprPtr node) {
    while (true) {
        int line = cur().line;
        if (skip_op(".")) {
            if (cur().kind == TokenKind::kInt) {
                auto item = make_expr(Expr::Kind::kGetItem, line);
                item->args.push_back(std::move(node));
                item->args.push_back(parse_primary());
                node = std::move(item);
                continue;
            }
            auto attr = make_expr(Expr::Kind::kGetAttr, line);
            attr->name = expect_name();
            attr->args.push_back(std::move(node));
            node = std::move(attr);
        } else if (skip_op("[")) {
            node = parse_subscript(std::move(node), line);
        } else if (is_op("(")) {
            node = parse_call(std::move(node), Expr::Kind::kCall, "");
        } else {
            return node;
        }
    }
}

ExprPtr Parser::parse_subscript(ExprPtr node, int line) {
    ExprPtr parts[3];
    int part = 0;
    bool is_slice = false;
    while (!skip_op("]")) {
        if (skip_op(":")) {
            is_slice = true;
            if (++part > 2) fail("']'");
            continue;
        }
        if (parts[part]) fail("':' or ']'");
        parts[part] = parse_expression();
    }
    auto e = make_expr(is_slice ? Expr::Kind::kSlice : Expr::Kind::kGetItem, line);
    e->args.push_back(std::move(node));
    if (!is_slice) {
        if (!parts[0]) fail("an index");
        e->args.push_back(std::move(parts[0]));
        return e;
    }
    for (auto& p : parts) e->args.push_back(std::move(p));
    return e;
}

// Parses "(args, name=value)" into a call-like node whose args[0] is `callee`.
ExprPtr Parser::parse_call(ExprPtr callee, Expr::Kind kind, std::string name) {
    auto e = make_expr(kind, cur().line);
    e->name = std::move(name);
    e->args.push_back(std::move(callee));
    expect_op("(");
    bool first = true;
    while (!skip_op(")")) {
        if (!first) expect_op(",");
        first = false;
        if (skip_op(")")) break;
        if (is_op("*") || is_op("**")) {
            raise(ErrorCode::kUnsupported, "chat template line {}: *args / **kwargs in calls are not supported",
                  cur().line);
        }
        if (cur().kind == TokenKind::kName && peek().kind == TokenKind::kOperator && peek().text == "=") {
            std::string key = expect_name();
            ++pos_;
            e->kwargs.emplace_back(std::move(key), parse_expression());
        } else {
            if (!e->kwargs.empty()) fail("a keyword argument");
            e->args.push_back(parse_expression());
        }
    }
    return e;
}

ExprPtr Parser::parse_filter_expr(ExprPtr node) {
    while (true) {
        int line = cur().line;
        if (skip_op("|")) {
            std::string name = expect_name();
            while (skip_op(".")) name += "." + expect_name();
            if (is_op("(")) {
                node = parse_call(std::move(node), Expr::Kind::kFilter, name);
            } else {
                auto f = make_expr(Expr::Kind::kFilter, line);
                f->name = name;
                f->args.push_back(std::move(node));
                node = std::move(f);
            }
            node->line = line;
        } else if (skip_name("is")) {
            node = parse_test(std::move(node), line);
        } else if (is_op("(")) {
            node = parse_call(std::move(node), Expr::Kind::kCall, "");
        } else {
            return node;
        }
    }
}

ExprPtr Parser::parse_test(ExprPtr node, int line) {
    bool negated = skip_name("not");
    std::string name = expect_name();
    while (skip_op(".")) name += "." + expect_name();
    ExprPtr test;
    if (is_op("(")) {
        test = parse_call(std::move(node), Expr::Kind::kTest, name);
    } else {
        test = make_expr(Expr::Kind::kTest, line);
        test->name = name;
        test->args.push_back(std::move(node));
        TokenKind k = cur().kind;
        bool starts_arg = k == TokenKind::kName || k == TokenKind::kString || k == TokenKind::kInt ||
                          k == TokenKind::kFloat || is_op("(") || is_op("[") || is_op("{");
        if (starts_arg && !is_name("else") && !is_name("or") && !is_name("and")) {
            if (is_name("is")) fail("no second 'is' (tests cannot be chained)");
            test->args.push_back(parse_postfix(parse_primary()));
        }
    }
    test->line = line;
    test->negated = negated;
    return test;
}

}  // namespace moeserve::tokenizer::jinja
