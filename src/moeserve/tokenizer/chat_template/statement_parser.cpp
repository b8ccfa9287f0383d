// Parser, statements part: text, {{ }} and the block tags (if, for, set, macro, call,
// break/continue, generation); unknown tags are Error(kUnsupported).
#include "moeserve/tokenizer/chat_template/parser.h"
#include "moeserve/tokenizer/chat_template/parser_impl.h"

namespace moeserve::tokenizer::jinja {

// ---- statements ----
// Parses statements until a block tag whose name is in `ends` (consumed up to the name).
Body Parser::parse_body(const std::set<std::string>& ends, std::string& end_tag) {
    Body body;
    while (true) {
        const Token& t = cur();
        if (t.kind == TokenKind::kEof) {
            if (!ends.empty()) {
                std::string names;
                for (const std::string& end : ends) {
                    names += (names.empty() ? "'" : ", '") + end + "'";
                }
                raise(ErrorCode::kInvalidArgument, "chat template line {}: unexpected end of template; expected {}",
                      t.line, names);
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

std::unique_ptr<Stmt> Parser::parse_statement() {
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
            raise(ErrorCode::kUnsupported, "chat template line {}: recursive for loops are not supported", line);
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
                raise(ErrorCode::kUnsupported, "chat template line {}: filtered block set is not supported", line);
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
            raise(ErrorCode::kUnsupported, "chat template line {}: call blocks with caller arguments are not supported",
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
        raise(ErrorCode::kUnsupported, "chat template line {}: the tag '{}' is not supported (or is misplaced)", line,
              tag);
    }
    expect(TokenKind::kBlockEnd);
    return s;
}

Body parse_template(const std::vector<Token>& tokens) { return Parser(tokens).parse_all(); }

}  // namespace moeserve::tokenizer::jinja
