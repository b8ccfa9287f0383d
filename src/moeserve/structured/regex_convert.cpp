// Regular expression -> GBNF expression, and the small converters (choices, checked GBNF,
// integer ranges).
#include <fmt/format.h>

#include <algorithm>

#include "moeserve/core/error.h"
#include "moeserve/core/utf8.h"
#include "moeserve/structured/convert.h"
#include "moeserve/structured/grammar.h"
#include "moeserve/structured/matcher.h"

namespace moeserve::structured {
namespace {

using Ranges = std::vector<std::pair<uint32_t, uint32_t>>;
constexpr uint32_t kMaxCp = 0x10FFFF;

Ranges normalized(Ranges r) {
    std::sort(r.begin(), r.end());
    Ranges out;
    for (auto [lo, hi] : r) {
        if (!out.empty() && lo <= out.back().second + 1) {
            out.back().second = std::max(out.back().second, hi);
        } else {
            out.emplace_back(lo, hi);
        }
    }
    return out;
}

Ranges complement(const Ranges& r) {
    Ranges out;
    uint32_t next = 0;
    for (auto [lo, hi] : normalized(r)) {
        if (lo > next) out.emplace_back(next, lo - 1);
        next = hi + 1;
    }
    if (next <= kMaxCp) out.emplace_back(next, kMaxCp);
    return out;
}

// r minus the characters a JSON string must escape ('"', '\', U+0000..U+001F).
Ranges json_safe(const Ranges& r) {
    Ranges banned = {{0, 0x1F}, {'"', '"'}, {'\\', '\\'}};
    Ranges out;
    const Ranges allowed = complement(banned);
    for (auto [lo, hi] : normalized(r)) {
        for (auto [alo, ahi] : allowed) {
            const uint32_t a = std::max(lo, alo), b = std::min(hi, ahi);
            if (a <= b) out.emplace_back(a, b);
        }
    }
    return out;
}

std::string class_char(uint32_t cp) {
    if ((cp >= 'a' && cp <= 'z') || (cp >= 'A' && cp <= 'Z') || (cp >= '0' && cp <= '9'))
        return std::string(1, static_cast<char>(cp));
    if (cp < 0x80) return fmt::format("\\x{:02X}", cp);
    if (cp <= 0xFFFF) return fmt::format("\\u{:04X}", cp);
    return fmt::format("\\U{:08X}", cp);
}

std::string class_text(const Ranges& r) {
    std::string out = "[";
    for (auto [lo, hi] : normalized(r)) {
        out += class_char(lo);
        if (hi != lo) out += "-" + class_char(hi);
    }
    return out + "]";
}

const Ranges kDigit = {{'0', '9'}};
const Ranges kWord = {{'0', '9'}, {'A', 'Z'}, {'_', '_'}, {'a', 'z'}};
const Ranges kSpace = {{'\t', '\r'}, {' ', ' '}};

class RegexParser {
public:
    RegexParser(std::string_view re, bool json, const std::string& path) : re_(re), json_(json), path_(path) {}

    std::string parse() {
        if (!re_.empty() && re_[0] == '^') ++pos_;
        std::string out = alternation();
        if (pos_ < re_.size()) fail(re_[pos_] == ')' ? "unbalanced ')'" : "unexpected character");
        return out;
    }

private:
    [[noreturn]] void fail(const std::string& what) const {
        raise(ErrorCode::kInvalidArgument, "{}: invalid or unsupported regular expression at offset {}: {}", path_,
              pos_, what);
    }

    bool at_end_anchor() const { return pos_ + 1 == re_.size() && re_[pos_] == '$'; }

    std::string alternation() {
        // Recursion per '(': bounded, the regex comes from a request.
        if (++depth_ > 200) fail("groups nest deeper than 200");
        struct Leave {
            int& d;
            ~Leave() { --d; }
        } leave{depth_};
        std::vector<std::string> alts{concatenation()};
        while (pos_ < re_.size() && re_[pos_] == '|') {
            ++pos_;
            alts.push_back(concatenation());
        }
        if (alts.size() == 1) return alts[0];
        std::string out = "(";
        for (size_t i = 0; i < alts.size(); ++i)
            out += (i ? " | " : "") + (alts[i].empty() ? std::string("\"\"") : alts[i]);
        return out + ")";
    }

    std::string concatenation() {
        std::string out;
        while (pos_ < re_.size() && re_[pos_] != '|' && re_[pos_] != ')') {
            if (at_end_anchor()) {
                ++pos_;
                break;
            }
            std::string a = atom();
            a = quantified(std::move(a));
            if (!a.empty()) out += (out.empty() ? "" : " ") + a;
        }
        return out;
    }

    std::string quantified(std::string atom) {
        if (pos_ >= re_.size()) return atom;
        const char c = re_[pos_];
        std::string q;
        if (c == '*' || c == '+' || c == '?') {
            q = std::string(1, c);
            ++pos_;
        } else if (c == '{') {
            const size_t close = re_.find('}', pos_);
            if (close == std::string_view::npos) fail("unterminated '{'");
            q = std::string(re_.substr(pos_, close - pos_ + 1));
            const bool ok =
                q.size() > 2 &&
                std::all_of(q.begin() + 1, q.end() - 1, [](char x) { return (x >= '0' && x <= '9') || x == ','; }) &&
                q[1] != ',' && std::count(q.begin(), q.end(), ',') <= 1;
            if (!ok) fail("bad repetition '" + q + "'");
            pos_ = close + 1;
        } else {
            return atom;
        }
        if (pos_ < re_.size() && (re_[pos_] == '?' || re_[pos_] == '+')) ++pos_;  // lazy/possessive: same language
        if (atom.empty()) fail("nothing to repeat");
        return "(" + atom + ")" + q;
    }

    std::string literal(uint32_t cp) {
        std::string bytes;
        if (json_) {
            switch (cp) {
                case '"':
                    bytes = "\\\"";
                    break;
                case '\\':
                    bytes = "\\\\";
                    break;
                case '\n':
                    bytes = "\\n";
                    break;
                case '\r':
                    bytes = "\\r";
                    break;
                case '\t':
                    bytes = "\\t";
                    break;
                default:
                    if (cp < 0x20)
                        bytes = fmt::format("\\u{:04x}", cp);
                    else
                        utf8_append(static_cast<char32_t>(cp), bytes);
            }
        } else {
            utf8_append(static_cast<char32_t>(cp), bytes);
        }
        return gbnf_literal(bytes);
    }

    std::string klass(const Ranges& r) { return class_text(json_ ? json_safe(r) : normalized(r)); }

    uint32_t hex(size_t digits) {
        uint32_t v = 0;
        for (size_t i = 0; i < digits; ++i) {
            if (pos_ >= re_.size() || !std::isxdigit(static_cast<unsigned char>(re_[pos_])))
                fail("expected a hex digit");
            const char h = re_[pos_++];
            v = v * 16 + static_cast<uint32_t>(h <= '9' ? h - '0' : (h | 0x20) - 'a' + 10);
        }
        if (v > kMaxCp) fail("code point over U+10FFFF");
        return v;
    }

    uint32_t utf8_char() {
        const auto c = static_cast<unsigned char>(re_[pos_]);
        const size_t n = c < 0x80 ? 1 : c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC0 ? 2 : 0;
        if (n == 0 || pos_ + n > re_.size()) fail("invalid UTF-8");
        uint32_t cp = n == 1 ? c : c & (0x7F >> n);
        for (size_t i = 1; i < n; ++i) cp = (cp << 6) | (static_cast<unsigned char>(re_[pos_ + i]) & 0x3F);
        pos_ += n;
        return cp;
    }

    // An escape after '\': a class (returned in ranges, true) or one code point (cp, false).
    bool escape(Ranges& ranges, uint32_t& cp) {
        if (pos_ >= re_.size()) fail("trailing '\\'");
        const char e = re_[pos_++];
        switch (e) {
            case 'd':
                ranges = kDigit;
                return true;
            case 'D':
                ranges = complement(kDigit);
                return true;
            case 'w':
                ranges = kWord;
                return true;
            case 'W':
                ranges = complement(kWord);
                return true;
            case 's':
                ranges = kSpace;
                return true;
            case 'S':
                ranges = complement(kSpace);
                return true;
            case 'n':
                cp = '\n';
                return false;
            case 'r':
                cp = '\r';
                return false;
            case 't':
                cp = '\t';
                return false;
            case 'f':
                cp = '\f';
                return false;
            case 'v':
                cp = '\v';
                return false;
            case '0':
                cp = 0;
                return false;
            case 'x':
                cp = hex(2);
                return false;
            case 'u':
                cp = hex(4);
                return false;
            case 'b':
            case 'B':
            case 'A':
            case 'z':
            case 'Z':
            case 'G':
                --pos_;
                fail(std::string("'\\") + e + "' (assertions are not supported)");
            default:
                if (e >= '1' && e <= '9') {
                    --pos_;
                    fail("backreferences are not supported");
                }
                if (std::isalnum(static_cast<unsigned char>(e))) {
                    --pos_;
                    fail(std::string("unknown escape '\\") + e + "'");
                }
                --pos_;
                cp = utf8_char();
                return false;
        }
    }

    std::string atom() {
        const char c = re_[pos_];
        if (c == '(') {
            ++pos_;
            if (re_.substr(pos_, 2) == "?:") {
                pos_ += 2;
            } else if (re_.substr(pos_, 2) == "?P" ||
                       (re_.substr(pos_, 2) == "?<" && re_.substr(pos_, 3) != "?<=" && re_.substr(pos_, 3) != "?<!")) {
                const size_t close = re_.find('>', pos_);
                if (close == std::string_view::npos) fail("unterminated group name");
                pos_ = close + 1;
            } else if (pos_ < re_.size() && re_[pos_] == '?') {
                fail("lookaround and inline flags are not supported");
            }
            std::string inner = alternation();
            if (pos_ >= re_.size() || re_[pos_] != ')') fail("missing ')'");
            ++pos_;
            return inner.empty() ? std::string("\"\"") : "(" + inner + ")";
        }
        if (c == '[') return bracket();
        if (c == '.') {
            ++pos_;
            return klass(complement({{'\n', '\n'}}));
        }
        if (c == '\\') {
            ++pos_;
            Ranges r;
            uint32_t cp = 0;
            return escape(r, cp) ? klass(r) : literal(cp);
        }
        if (c == '*' || c == '+' || c == '?' || c == '{') fail("nothing to repeat");
        if (c == '^' || c == '$') fail("anchors are only supported at the start and end");
        return literal(utf8_char());
    }

    std::string bracket() {
        ++pos_;
        bool negated = false;
        if (pos_ < re_.size() && re_[pos_] == '^') {
            negated = true;
            ++pos_;
        }
        Ranges ranges;
        bool first = true;
        while (true) {
            if (pos_ >= re_.size()) fail("unterminated '['");
            if (re_[pos_] == ']' && !first) {
                ++pos_;
                break;
            }
            first = false;
            uint32_t lo = 0;
            if (re_[pos_] == '\\') {
                ++pos_;
                Ranges r;
                if (escape(r, lo)) {
                    ranges.insert(ranges.end(), r.begin(), r.end());
                    continue;
                }
            } else {
                lo = utf8_char();
            }
            uint32_t hi = lo;
            if (pos_ + 1 < re_.size() && re_[pos_] == '-' && re_[pos_ + 1] != ']') {
                ++pos_;
                if (re_[pos_] == '\\') {
                    ++pos_;
                    Ranges r;
                    if (escape(r, hi)) fail("a class escape cannot end a range");
                } else {
                    hi = utf8_char();
                }
                if (hi < lo) fail("range out of order");
            }
            ranges.emplace_back(lo, hi);
        }
        return klass(negated ? complement(ranges) : ranges);
    }

    std::string_view re_;
    bool json_;
    const std::string& path_;
    size_t pos_ = 0;
    int depth_ = 0;
};

// Equal-length digit strings a <= b: the expression of every digit string in [a, b].
std::string same_length(const std::string& a, const std::string& b) {
    if (a == b) return gbnf_literal(a);
    if (a.size() == 1) return fmt::format("[{}-{}]", a, b);
    if (a[0] == b[0]) return gbnf_literal(a.substr(0, 1)) + " " + same_length(a.substr(1), b.substr(1));
    std::vector<std::string> alts;
    const size_t rest = a.size() - 1;
    char from = a[0], to = b[0];
    if (a.substr(1) != std::string(rest, '0')) {
        alts.push_back(gbnf_literal(a.substr(0, 1)) + " (" + same_length(a.substr(1), std::string(rest, '9')) + ")");
        ++from;
    }
    std::string high;
    if (b.substr(1) != std::string(rest, '9')) {
        high = gbnf_literal(b.substr(0, 1)) + " (" + same_length(std::string(rest, '0'), b.substr(1)) + ")";
        --to;
    }
    if (from <= to) alts.push_back(fmt::format("[{}-{}] [0-9]{{{}}}", from, to, rest));
    if (!high.empty()) alts.push_back(high);
    std::string out = "(";
    for (size_t i = 0; i < alts.size(); ++i) out += (i ? " | " : "") + alts[i];
    return out + ")";
}

// Non-negative integers in [lo, hi] without leading zeros.
std::string non_negative_range(int64_t lo, int64_t hi) {
    std::vector<std::string> alts;
    int64_t low_of_len = 0;
    for (int len = 1; len <= 19; ++len) {
        const int64_t high_of_len = len == 19 ? INT64_MAX : low_of_len == 0 ? 9 : low_of_len * 10 - 1;
        const int64_t a = std::max(lo, low_of_len), b = std::min(hi, high_of_len);
        if (a <= b) alts.push_back(same_length(std::to_string(a), std::to_string(b)));
        if (high_of_len >= hi) break;
        low_of_len = low_of_len == 0 ? 10 : low_of_len * 10;
    }
    if (alts.size() == 1) return alts[0];
    std::string out = "(";
    for (size_t i = 0; i < alts.size(); ++i) out += (i ? " | " : "") + alts[i];
    return out + ")";
}

}  // namespace

std::string regex_expression(std::string_view regex, bool json_string, const std::string& path) {
    std::string e = RegexParser(regex, json_string, path).parse();
    return e.empty() ? "\"\"" : e;
}

std::string regex_to_gbnf(std::string_view regex, const std::string& path) {
    return checked_gbnf("root ::= " + regex_expression(regex, false, path) + "\n", path);
}

std::string choices_to_gbnf(const std::vector<std::string>& choices, const std::string& path) {
    if (choices.empty()) raise(ErrorCode::kInvalidArgument, "{}: the list of choices is empty", path);
    std::string out = "root ::= ";
    for (size_t i = 0; i < choices.size(); ++i) {
        if (choices[i].empty()) raise(ErrorCode::kInvalidArgument, "{}[{}]: a choice must not be empty", path, i);
        out += (i ? " | " : "") + gbnf_literal(choices[i]);
    }
    return out + "\n";
}

std::string checked_gbnf(const std::string& gbnf, const std::string& path) {
    try {
        // Parse, and expand the start (what the engine does first), against an empty vocabulary.
        CompiledGrammar(parse_gbnf(gbnf),
                        std::make_shared<const Vocabulary>(std::vector<std::string>{}, std::vector<TokenId>{}));
    } catch (const Error& e) {
        raise(ErrorCode::kInvalidArgument, "{}: {}", path, e.what());
    }
    return gbnf;
}

std::string integer_range_expression(int64_t lo, int64_t hi) {
    MOESERVE_CHECK(lo <= hi && lo > INT64_MIN, "integer range [{}, {}]", lo, hi);
    if (lo >= 0) return non_negative_range(lo, hi);
    if (hi < 0) return "\"-\" " + non_negative_range(-hi, -lo);
    return "(\"-\" " + non_negative_range(1, -lo) + " | " + non_negative_range(0, hi) + ")";
}

}  // namespace moeserve::structured
