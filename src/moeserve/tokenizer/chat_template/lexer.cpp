// Lexer: text/tag splitting with jinja2's whitespace rules, then expression tokens inside tags.
#include "moeserve/tokenizer/chat_template/lexer.h"

#include <cctype>
#include <cstdint>

#include "moeserve/core/error.h"
#include "moeserve/core/utf8.h"

namespace moeserve::tokenizer::jinja {
namespace {

bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }

// jinja2 normalizes newlines and drops one trailing newline before lexing.
std::string normalize_source(const std::string& source) {
    std::string out;
    out.reserve(source.size());
    for (size_t i = 0; i < source.size(); ++i) {
        if (source[i] == '\r') {
            out += '\n';
            if (i + 1 < source.size() && source[i + 1] == '\n') ++i;
        } else {
            out += source[i];
        }
    }
    if (!out.empty() && out.back() == '\n') out.pop_back();
    return out;
}

int count_newlines(const std::string& s, size_t begin, size_t end) {
    int n = 0;
    for (size_t i = begin; i < end && i < s.size(); ++i) n += s[i] == '\n';
    return n;
}

class Lexer {
public:
    explicit Lexer(std::string source) : src_(std::move(source)) {}

    std::vector<Token> run() {
        size_t pos = 0;
        bool strip_next_whitespace = false;  // set by a "-%}" / "-}}" / "-#}"
        while (pos <= src_.size()) {
            size_t tag = find_tag(pos);
            std::string text = src_.substr(pos, tag - pos);
            if (strip_next_whitespace) {
                size_t first = 0;
                while (first < text.size() && is_space(text[first])) ++first;
                line_ += count_newlines(text, 0, first);
                text.erase(0, first);
                pos += first;
                strip_next_whitespace = false;
            }
            if (tag == src_.size()) {
                emit_text(text);
                break;
            }
            char kind = src_[tag + 1];  // '{', '%' or '#'
            char sign = tag + 2 < src_.size() ? src_[tag + 2] : '\0';
            int text_line = line_;
            line_ += count_newlines(text, 0, text.size());
            if (sign == '-') {
                size_t keep = text.size();
                while (keep > 0 && is_space(text[keep - 1])) --keep;
                text.resize(keep);
            } else if (sign != '+' && kind != '{') {
                // lstrip_blocks: drop spaces/tabs between the line start and a block or comment.
                size_t line_start = text.rfind('\n');
                line_start = line_start == std::string::npos ? 0 : line_start + 1;
                bool at_line_start = line_start > 0 || pos == 0 || src_[pos - 1] == '\n';
                bool only_blanks = line_start < text.size();
                for (size_t i = line_start; i < text.size(); ++i) {
                    only_blanks = only_blanks && is_space(text[i]);
                }
                if (at_line_start && only_blanks) text.resize(line_start);
            }
            tokens_.push_back({TokenKind::kText, std::move(text), text_line});
            if (tokens_.back().text.empty()) tokens_.pop_back();
            pos = tag + 2 + ((sign == '-' || sign == '+') ? 1 : 0);
            if (kind == '#') {
                pos = lex_comment_end(pos, strip_next_whitespace);
            } else {
                pos = lex_tag(pos, kind == '{', strip_next_whitespace);
            }
        }
        tokens_.push_back({TokenKind::kEof, "", line_});
        return std::move(tokens_);
    }

private:
    size_t find_tag(size_t pos) const {
        while (true) {
            size_t at = src_.find('{', pos);
            if (at == std::string::npos || at + 1 >= src_.size()) return src_.size();
            char next = src_[at + 1];
            if (next == '{' || next == '%' || next == '#') return at;
            pos = at + 1;
        }
    }

    void emit_text(const std::string& text) {
        if (!text.empty()) tokens_.push_back({TokenKind::kText, text, line_});
    }

    // After the text of a closing tag: "-" eats all whitespace, trim_blocks eats one newline
    // for block tags and comments, "+" keeps everything.
    size_t after_close(size_t pos, bool minus, bool plus, bool is_variable, bool& strip_next) {
        if (minus) {
            strip_next = true;
        } else if (!plus && !is_variable && pos < src_.size() && src_[pos] == '\n') {
            ++line_;
            ++pos;
        }
        return pos;
    }

    size_t lex_comment_end(size_t pos, bool& strip_next) {
        size_t end = src_.find("#}", pos);
        if (end == std::string::npos) {
            raise(ErrorCode::kInvalidArgument, "chat template line {}: comment is never closed with '#}}'", line_);
        }
        line_ += count_newlines(src_, pos, end);
        bool minus = end > pos && src_[end - 1] == '-';
        bool plus = end > pos && src_[end - 1] == '+';
        return after_close(end + 2, minus, plus, false, strip_next);
    }

    size_t lex_tag(size_t pos, bool is_variable, bool& strip_next) {
        int open_line = line_;
        tokens_.push_back({is_variable ? TokenKind::kVarBegin : TokenKind::kBlockBegin, "", line_});
        const char* close = is_variable ? "}}" : "%}";
        int depth = 0;  // (), [], {} nesting, so "}}" inside a dict literal is not the end
        while (true) {
            while (pos < src_.size() && is_space(src_[pos])) {
                line_ += src_[pos] == '\n';
                ++pos;
            }
            if (pos >= src_.size()) {
                raise(ErrorCode::kInvalidArgument, "chat template line {}: tag opened here is never closed with '{}'",
                      open_line, close);
            }
            bool minus = src_[pos] == '-' && src_.compare(pos + 1, 2, close) == 0;
            bool plus = src_[pos] == '+' && src_.compare(pos + 1, 2, close) == 0;
            if (depth == 0 && (minus || plus || src_.compare(pos, 2, close) == 0)) {
                pos += (minus || plus) ? 3 : 2;
                tokens_.push_back({is_variable ? TokenKind::kVarEnd : TokenKind::kBlockEnd, "", line_});
                return after_close(pos, minus, plus, is_variable, strip_next);
            }
            pos = lex_expression_token(pos, depth);
        }
    }

    size_t lex_expression_token(size_t pos, int& depth) {
        char c = src_[pos];
        if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
            size_t end = pos;
            while (end < src_.size() && (std::isalnum(static_cast<unsigned char>(src_[end])) || src_[end] == '_')) {
                ++end;
            }
            tokens_.push_back({TokenKind::kName, src_.substr(pos, end - pos), line_});
            return end;
        }
        if (std::isdigit(static_cast<unsigned char>(c))) return lex_number(pos);
        if (c == '\'' || c == '"') return lex_string(pos);
        static constexpr const char* kTwoChar[] = {"//", "**", "==", "!=", "<=", ">="};
        for (const char* op : kTwoChar) {
            if (src_.compare(pos, 2, op) == 0) {
                tokens_.push_back({TokenKind::kOperator, op, line_});
                return pos + 2;
            }
        }
        if (std::string("+-*/%~<>=()[]{},.:|").find(c) != std::string::npos) {
            if (c == '(' || c == '[' || c == '{') ++depth;
            if ((c == ')' || c == ']' || c == '}') && depth > 0) --depth;
            tokens_.push_back({TokenKind::kOperator, std::string(1, c), line_});
            return pos + 1;
        }
        raise(ErrorCode::kInvalidArgument, "chat template line {}: unexpected character '{}'", line_, c);
    }

    size_t lex_number(size_t pos) {
        size_t end = pos;
        auto digits = [&] {
            while (end < src_.size() && (std::isdigit(static_cast<unsigned char>(src_[end])) || src_[end] == '_')) {
                ++end;
            }
        };
        digits();
        bool is_float = false;
        if (end + 1 < src_.size() && src_[end] == '.' && std::isdigit(static_cast<unsigned char>(src_[end + 1]))) {
            is_float = true;
            ++end;
            digits();
        }
        if (end < src_.size() && (src_[end] == 'e' || src_[end] == 'E')) {
            size_t exp = end + 1;
            if (exp < src_.size() && (src_[exp] == '+' || src_[exp] == '-')) ++exp;
            if (exp < src_.size() && std::isdigit(static_cast<unsigned char>(src_[exp]))) {
                is_float = true;
                end = exp;
                digits();
            }
        }
        std::string text;
        for (size_t i = pos; i < end; ++i) {
            if (src_[i] != '_') text += src_[i];
        }
        tokens_.push_back({is_float ? TokenKind::kFloat : TokenKind::kInt, text, line_});
        return end;
    }

    // Python string-literal escapes, as jinja2 applies them.
    size_t lex_string(size_t pos) {
        char quote = src_[pos];
        int start_line = line_;
        std::string value;
        size_t i = pos + 1;
        while (true) {
            if (i >= src_.size()) {
                raise(ErrorCode::kInvalidArgument, "chat template line {}: string literal is never closed", start_line);
            }
            char c = src_[i];
            if (c == quote) break;
            if (c == '\n') ++line_;
            if (c != '\\' || i + 1 >= src_.size()) {
                value += c;
                ++i;
                continue;
            }
            char e = src_[i + 1];
            i += 2;
            switch (e) {
                case 'n':
                    value += '\n';
                    break;
                case 't':
                    value += '\t';
                    break;
                case 'r':
                    value += '\r';
                    break;
                case '\\':
                    value += '\\';
                    break;
                case '\'':
                    value += '\'';
                    break;
                case '"':
                    value += '"';
                    break;
                case 'a':
                    value += '\a';
                    break;
                case 'b':
                    value += '\b';
                    break;
                case 'f':
                    value += '\f';
                    break;
                case 'v':
                    value += '\v';
                    break;
                case '0':
                    value += '\0';
                    break;
                case '\n':
                    ++line_;
                    break;  // line continuation
                case 'x':
                case 'u':
                case 'U': {
                    size_t len = e == 'x' ? 2 : e == 'u' ? 4 : 8;
                    std::string hex = src_.substr(i, len);
                    if (hex.size() != len || hex.find_first_not_of("0123456789abcdefABCDEF") != std::string::npos) {
                        raise(ErrorCode::kInvalidArgument, "chat template line {}: bad \\{} escape in string literal",
                              line_, e);
                    }
                    utf8_append(static_cast<char32_t>(std::stoul(hex, nullptr, 16)), value);
                    i += len;
                    break;
                }
                default:  // unknown escapes keep the backslash, as in Python
                    value += '\\';
                    value += e;
            }
        }
        tokens_.push_back({TokenKind::kString, std::move(value), start_line});
        return i + 1;
    }

    std::string src_;
    std::vector<Token> tokens_;
    int line_ = 1;
};

}  // namespace

std::vector<Token> tokenize(const std::string& source) { return Lexer(normalize_source(source)).run(); }

}  // namespace moeserve::tokenizer::jinja
