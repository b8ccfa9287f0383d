// Recursive-descent parser for the Jinja subset; precedence follows jinja2's parser.py:
// condexpr < or < and < not < compare < +,- < ~ < *,/,//,% < ** < unary < postfix/filter/test.
#include "moeserve/tokenizer/chat_template/parser.h"

#include "moeserve/core/error.h"

#include <set>

namespace moeserve::tokenizer::jinja {
namespace {

const char* token_kind_name(TokenKind kind) {
    switch (kind) {
        case TokenKind::kText: return "text";
        case TokenKind::kVarBegin: return "'{{'";
        case TokenKind::kVarEnd: return "'}}'";
        case TokenKind::kBlockBegin: return "'{%'";
        case TokenKind::kBlockEnd: return "'%}'";
        case TokenKind::kName: return "name";
        case TokenKind::kString: return "string";
        case TokenKind::kInt: return "integer";
        case TokenKind::kFloat: return "float";
        case TokenKind::kOperator: return "operator";
        case TokenKind::kEof: return "end of template";
    }
    return "token";
}

ExprPtr make_expr(Expr::Kind kind, int line) {
    auto e = std::make_unique<Expr>();
    e->kind = kind;
    e->line = line;
    return e;
}

ExprPtr make_binary(std::string op, ExprPtr lhs, ExprPtr rhs, int line) {
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
        Body body = parse_body({}, end_tag);
        return body;
    }

private:
    // ---- token helpers ----
    const Token& cur() const { return toks_[pos_]; }
    const Token& peek(size_t ahead = 1) const {
        return toks_[std::min(pos_ + ahead, toks_.size() - 1)];
    }
    bool is_op(const char* op) const {
        return cur().kind == TokenKind::kOperator && cur().text == op;
    }
    bool is_name(const char* name) const {
        return cur().kind == TokenKind::kName && cur().text == name;
    }
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
        std::string got = cur().text.empty() ? token_kind_name(cur().kind)
                                              : fmt::format("'{}'", cur().text);
        raise(ErrorCode::kInvalidArgument, "chat template line {}: expected {}, got {}",
              cur().line, expected, got);
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
    Body parse_body(const std::set<std::string>& ends, std::string& end_tag) {
        Body body;
        while (true) {
            const Token& t = cur();
            if (t.kind == TokenKind::kEof) {
                if (!ends.empty()) {
                    std::string names;
                    for (const std::string& end : ends) {
                        names += (names.empty() ? "'" : ", '") + end + "'";
                    }
                    raise(ErrorCode::kInvalidArgument,
                          "chat template line {}: unexpected end of template; expected {}", t.line,
                          names);
                }
                return body;
            }
            if (t.kind == TokenKind::kText) {
                auto s = std::make_unique<Stmt>();
                s->kind = Stmt::Kind::kText;
                s->line = t.line;
                s->text = t.text;
                body.push_back(std::move(s));
                ++pos_;
            } else if (t.kind == TokenKind::kVarBegin) {
                ++pos_;
                auto s = std::make_unique<Stmt>();
                s->kind = Stmt::Kind::kOutput;
                s->line = t.line;
                s->expr = parse_tuple();
                expect(TokenKind::kVarEnd);
                body.push_back(std::move(s));
            } else if (t.kind == TokenKind::kBlockBegin) {
                const Token& name = peek();
                if (name.kind == TokenKind::kName && ends.count(name.text)) {
                    pos_ += 2;
                    end_tag = name.text;
                    return body;
                }
                ++pos_;
                body.push_back(parse_statement());
            } else {
                fail("text or a tag");
            }
        }
    }

    std::unique_ptr<Stmt> parse_statement() {
        int line = cur().line;
        std::string tag = expect_name();
        auto s = std::make_unique<Stmt>();
        s->line = line;
        std::string end_tag;
        if (tag == "if") {
            s->kind = Stmt::Kind::kIf;
            ExprPtr cond = parse_expression();
            while (true) {
                expect(TokenKind::kBlockEnd);
                Body body = parse_body({"elif", "else", "endif"}, end_tag);
                s->branches.push_back({std::move(cond), std::move(body)});
                if (end_tag == "elif") {
                    cond = parse_expression();
                } else if (end_tag == "else") {
                    expect(TokenKind::kBlockEnd);
                    s->branches.push_back({nullptr, parse_body({"endif"}, end_tag)});
                    break;
                } else {
                    break;
                }
            }
        } else if (tag == "for") {
            s->kind = Stmt::Kind::kFor;
            bool paren = skip_op("(");
            do {
                s->targets.push_back(expect_name());
            } while (skip_op(","));
            if (paren) expect_op(")");
            if (!skip_name("in")) fail("'in'");
            s->expr = parse_or();  // no ternary here: a trailing `if` filters the loop
            if (skip_name("if")) s->filter = parse_expression();
            if (is_name("recursive")) {
                raise(ErrorCode::kUnsupported,
                      "chat template line {}: recursive for loops are not supported", line);
            }
            expect(TokenKind::kBlockEnd);
            s->body = parse_body({"else", "endfor"}, end_tag);
            if (end_tag == "else") {
                expect(TokenKind::kBlockEnd);
                s->else_body = parse_body({"endfor"}, end_tag);
            }
        } else if (tag == "set") {
            s->targets.push_back(expect_name());
            if (skip_op(".")) {
                s->attr = expect_name();
            } else {
                while (skip_op(",")) s->targets.push_back(expect_name());
            }
            if (skip_op("=")) {
                s->kind = Stmt::Kind::kSet;
                s->expr = parse_tuple();
            } else {
                if (is_op("|")) {
                    raise(ErrorCode::kUnsupported,
                          "chat template line {}: filtered block set is not supported", line);
                }
                s->kind = Stmt::Kind::kSetBlock;
                expect(TokenKind::kBlockEnd);
                s->body = parse_body({"endset"}, end_tag);
            }
        } else if (tag == "macro") {
            s->kind = Stmt::Kind::kMacro;
            s->name = expect_name();
            expect_op("(");
            while (!skip_op(")")) {
                if (!s->params.empty()) expect_op(",");
                if (skip_op(")")) break;
                s->params.push_back(expect_name());
                s->defaults.push_back(skip_op("=") ? parse_expression() : nullptr);
            }
            expect(TokenKind::kBlockEnd);
            s->body = parse_body({"endmacro"}, end_tag);
        } else if (tag == "call") {
            if (is_op("(")) {
                raise(ErrorCode::kUnsupported,
                      "chat template line {}: call blocks with caller arguments are not supported",
                      line);
            }
            s->kind = Stmt::Kind::kCallBlock;
            s->expr = parse_expression();
            if (s->expr->kind != Expr::Kind::kCall) fail("a macro call after 'call'");
            expect(TokenKind::kBlockEnd);
            s->body = parse_body({"endcall"}, end_tag);
        } else if (tag == "break" || tag == "continue") {
            s->kind = tag == "break" ? Stmt::Kind::kBreak : Stmt::Kind::kContinue;
        } else if (tag == "generation") {
            s->kind = Stmt::Kind::kScope;
            expect(TokenKind::kBlockEnd);
            s->body = parse_body({"endgeneration"}, end_tag);
        } else {
            raise(ErrorCode::kUnsupported,
                  "chat template line {}: the tag '{}' is not supported (or is misplaced)", line,
                  tag);
        }
        expect(TokenKind::kBlockEnd);
        return s;
    }

    // ---- expressions ----
    // An expression, or a bare tuple `a, b` (which becomes a list).
    ExprPtr parse_tuple() {
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

    ExprPtr parse_expression() {
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

    ExprPtr parse_or() {
        ExprPtr lhs = parse_and();
        while (is_name("or")) {
            int line = cur().line;
            ++pos_;
            lhs = make_binary("or", std::move(lhs), parse_and(), line);
        }
        return lhs;
    }

    ExprPtr parse_and() {
        ExprPtr lhs = parse_not();
        while (is_name("and")) {
            int line = cur().line;
            ++pos_;
            lhs = make_binary("and", std::move(lhs), parse_not(), line);
        }
        return lhs;
    }

    ExprPtr parse_not() {
        if (is_name("not")) {
            auto e = make_expr(Expr::Kind::kUnary, cur().line);
            ++pos_;
            e->name = "not";
            e->args.push_back(parse_not());
            return e;
        }
        return parse_compare();
    }

    ExprPtr parse_compare() {
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
                raise(ErrorCode::kUnsupported,
                      "chat template line {}: chained comparisons (a < b < c) are not supported",
                      line);
            }
            lhs = make_binary(op, std::move(lhs), parse_math1(), line);
        }
    }

    ExprPtr parse_math1() {
        ExprPtr lhs = parse_concat();
        while (is_op("+") || is_op("-")) {
            int line = cur().line;
            std::string op = toks_[pos_++].text;
            lhs = make_binary(op, std::move(lhs), parse_concat(), line);
        }
        return lhs;
    }

    ExprPtr parse_concat() {
        ExprPtr lhs = parse_math2();
        while (is_op("~")) {
            int line = cur().line;
            ++pos_;
            lhs = make_binary("~", std::move(lhs), parse_math2(), line);
        }
        return lhs;
    }

    ExprPtr parse_math2() {
        ExprPtr lhs = parse_pow();
        while (is_op("*") || is_op("/") || is_op("//") || is_op("%")) {
            int line = cur().line;
            std::string op = toks_[pos_++].text;
            lhs = make_binary(op, std::move(lhs), parse_pow(), line);
        }
        return lhs;
    }

    ExprPtr parse_pow() {
        ExprPtr lhs = parse_unary(true);
        while (is_op("**")) {
            int line = cur().line;
            ++pos_;
            lhs = make_binary("**", std::move(lhs), parse_unary(true), line);
        }
        return lhs;
    }

    ExprPtr parse_unary(bool with_filter) {
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

    ExprPtr parse_primary() {
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
                raise(ErrorCode::kUnsupported, "chat template line {}: integer {} is too large",
                      t.line, t.text);
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

    static ExprPtr literal(Value v, int line) {
        auto e = make_expr(Expr::Kind::kLiteral, line);
        e->literal = std::move(v);
        return e;
    }

    ExprPtr parse_postfix(ExprPtr node) {
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

    ExprPtr parse_subscript(ExprPtr node, int line) {
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
    ExprPtr parse_call(ExprPtr callee, Expr::Kind kind, std::string name) {
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
                raise(ErrorCode::kUnsupported,
                      "chat template line {}: *args / **kwargs in calls are not supported",
                      cur().line);
            }
            if (cur().kind == TokenKind::kName && peek().kind == TokenKind::kOperator &&
                peek().text == "=") {
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

    ExprPtr parse_filter_expr(ExprPtr node) {
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

    ExprPtr parse_test(ExprPtr node, int line) {
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
            bool starts_arg = k == TokenKind::kName || k == TokenKind::kString ||
                              k == TokenKind::kInt || k == TokenKind::kFloat || is_op("(") ||
                              is_op("[") || is_op("{");
            if (starts_arg && !is_name("else") && !is_name("or") && !is_name("and")) {
                if (is_name("is")) fail("no second 'is' (tests cannot be chained)");
                test->args.push_back(parse_postfix(parse_primary()));
            }
        }
        test->line = line;
        test->negated = negated;
        return test;
    }

    const std::vector<Token>& toks_;
    size_t pos_ = 0;
};

}  // namespace

Body parse_template(const std::vector<Token>& tokens) { return Parser(tokens).parse_all(); }

}  // namespace moeserve::tokenizer::jinja
