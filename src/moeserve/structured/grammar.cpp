// GBNF -> byte-level Grammar: a recursive-descent parser that lowers while it parses (groups
// and repetitions become generated rules `<rule>/<n>`, classes become UTF-8 byte ranges).
#include "moeserve/structured/grammar.h"

#include <algorithm>
#include <map>
#include <unordered_map>

#include "moeserve/core/error.h"
#include "moeserve/core/escape.h"

namespace moeserve::structured {
namespace {

constexpr uint32_t kMaxCodePoint = 0x10FFFF;
constexpr int64_t kMaxRepeat = 10000;
constexpr int kMaxNesting = 200;

struct Sym {
    bool rule = false;
    int32_t id = 0;
};
using Seq = std::vector<Sym>;
using Alts = std::vector<Seq>;
using Ranges = std::vector<std::pair<uint32_t, uint32_t>>;  // inclusive code point ranges

// Appends the UTF-8 byte-range sequences of [lo, hi] (same encoded length, no surrogates):
// the split of Rust's regex-syntax Utf8Sequences.
int utf8_len(uint32_t cp) { return cp < 0x80 ? 1 : cp < 0x800 ? 2 : cp < 0x10000 ? 3 : 4; }

void encode_utf8(uint32_t cp, uint8_t* out) {
    const int n = utf8_len(cp);
    if (n == 1) {
        out[0] = static_cast<uint8_t>(cp);
        return;
    }
    static constexpr uint8_t kLead[] = {0, 0, 0xC0, 0xE0, 0xF0};
    for (int i = n - 1; i > 0; --i) {
        out[i] = static_cast<uint8_t>(0x80 | (cp & 0x3F));
        cp >>= 6;
    }
    out[0] = static_cast<uint8_t>(kLead[n] | cp);
}

void utf8_sequences(uint32_t lo, uint32_t hi, std::vector<std::vector<std::pair<uint8_t, uint8_t>>>& out) {
    const int n = utf8_len(lo);
    for (int i = 1; i < n; ++i) {
        const uint32_t m = (1u << (6 * i)) - 1;
        if ((lo & ~m) != (hi & ~m)) {
            if ((lo & m) != 0) {
                utf8_sequences(lo, lo | m, out);
                utf8_sequences((lo | m) + 1, hi, out);
                return;
            }
            if ((hi & m) != m) {
                utf8_sequences(lo, (hi & ~m) - 1, out);
                utf8_sequences(hi & ~m, hi, out);
                return;
            }
        }
    }
    uint8_t a[4], b[4];
    encode_utf8(lo, a);
    encode_utf8(hi, b);
    std::vector<std::pair<uint8_t, uint8_t>> seq;
    seq.reserve(static_cast<size_t>(n));
    for (int i = 0; i < n; ++i) seq.emplace_back(a[i], b[i]);
    out.push_back(std::move(seq));
}

Ranges normalize(Ranges r, bool negated) {
    std::sort(r.begin(), r.end());
    Ranges merged;
    for (auto [lo, hi] : r) {
        if (lo > hi) continue;
        if (!merged.empty() && lo <= merged.back().second + 1) {
            merged.back().second = std::max(merged.back().second, hi);
        } else {
            merged.emplace_back(lo, hi);
        }
    }
    if (negated) {
        Ranges inv;
        uint32_t next = 0;
        for (auto [lo, hi] : merged) {
            if (lo > next) inv.emplace_back(next, lo - 1);
            next = hi + 1;
        }
        if (next <= kMaxCodePoint) inv.emplace_back(next, kMaxCodePoint);
        merged = std::move(inv);
    }
    // Cut out the surrogates and split at the UTF-8 length boundaries.
    Ranges out;
    static constexpr uint32_t kCuts[] = {0x7F, 0x7FF, 0xD7FF, 0xDFFF, 0xFFFF};
    for (auto [lo, hi] : merged) {
        for (uint32_t cut : kCuts) {
            if (lo <= cut && hi > cut) {
                out.emplace_back(lo, cut);
                lo = cut + 1;
            }
        }
        out.emplace_back(lo, hi);
    }
    std::erase_if(out, [](auto range) { return range.first >= 0xD800 && range.second <= 0xDFFF; });
    return out;
}

class Parser {
public:
    explicit Parser(std::string_view text) : text_(text) {}

    Grammar parse() {
        skip(true);
        while (pos_ < text_.size()) {
            const size_t start = pos_;
            const std::string name = parse_name();
            skip(true);
            if (text_.substr(pos_, 3) != "::=") fail(pos_, "expected '::=' after rule name '" + name + "'");
            pos_ += 3;
            const int32_t id = rule_id(name, start);
            if (defined_[static_cast<size_t>(id)]) fail(start, "rule '" + name + "' is defined twice");
            defined_[static_cast<size_t>(id)] = true;
            rules_[static_cast<size_t>(id)] = parse_alternatives(name, false);
            skip(true);
        }
        for (size_t i = 0; i < names_.size(); ++i) {
            if (!defined_[i]) fail(first_use_[i], "undefined rule '" + names_[i] + "'");
        }
        const auto root = ids_.find("root");
        if (root == ids_.end()) raise(ErrorCode::kInvalidArgument, "grammar: no 'root' rule");
        return finish(root->second);
    }

private:
    [[noreturn]] void fail(size_t at, const std::string& message) const {
        size_t line = 1, col = 1;
        for (size_t i = 0; i < at && i < text_.size(); ++i) {
            if (text_[i] == '\n') {
                ++line;
                col = 1;
            } else {
                ++col;
            }
        }
        raise(ErrorCode::kInvalidArgument, "grammar: line {} column {}: {}", line, col, message);
    }

    // Skips spaces, tabs, comments and (always: rules end where the next `name ::=` begins) newlines.
    void skip(bool) {
        while (pos_ < text_.size()) {
            const char c = text_[pos_];
            if (c == ' ' || c == '\t' || c == '\n' || c == '\r') {
                ++pos_;
            } else if (c == '#') {
                while (pos_ < text_.size() && text_[pos_] != '\n') ++pos_;
            } else {
                break;
            }
        }
    }

    static bool name_char(char c) {
        return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '_';
    }

    std::string parse_name() {
        const size_t start = pos_;
        while (pos_ < text_.size() && name_char(text_[pos_])) ++pos_;
        if (pos_ == start) fail(pos_, "expected a rule name");
        return std::string(text_.substr(start, pos_ - start));
    }

    // True when a `name ::=` starts at pos_ (the end of the current rule).
    bool at_rule_start() {
        size_t p = pos_;
        while (p < text_.size() && name_char(text_[p])) ++p;
        if (p == pos_) return false;
        while (p < text_.size() && (text_[p] == ' ' || text_[p] == '\t' || text_[p] == '\n' || text_[p] == '\r')) ++p;
        return text_.substr(p, 3) == "::=";
    }

    int32_t rule_id(const std::string& name, size_t at) {
        const auto it = ids_.find(name);
        if (it != ids_.end()) return it->second;
        const auto id = static_cast<int32_t>(names_.size());
        ids_.emplace(name, id);
        names_.push_back(name);
        owner_.push_back(name);
        rules_.emplace_back();
        defined_.push_back(false);
        first_use_.push_back(at);
        return id;
    }

    int32_t new_rule(const std::string& owner, Alts alts) {
        // '/' cannot occur in a user's rule name, so generated names never collide.
        const int32_t id = rule_id(owner + "/" + std::to_string(++generated_), pos_);
        defined_[static_cast<size_t>(id)] = true;
        owner_[static_cast<size_t>(id)] = owner;
        rules_[static_cast<size_t>(id)] = std::move(alts);
        return id;
    }

    int32_t set_id(const ByteSet& s) {
        const auto [it, added] = set_ids_.emplace(s.bits, static_cast<int32_t>(sets_.size()));
        if (added) sets_.push_back(s);
        return it->second;
    }

    Sym byte_sym(uint8_t lo, uint8_t hi) {
        ByteSet s;
        s.set_range(lo, hi);
        return Sym{false, set_id(s)};
    }

    Alts parse_alternatives(const std::string& owner, bool nested) {
        // The parser recurses per '(': bound it (requests carry grammars; the stack is not theirs).
        if (++depth_ > kMaxNesting) fail(pos_, "groups nest deeper than " + std::to_string(kMaxNesting));
        struct Leave {
            int& d;
            ~Leave() { --d; }
        } leave{depth_};
        Alts alts;
        alts.push_back(parse_sequence(owner, nested));
        while (pos_ < text_.size() && text_[pos_] == '|') {
            ++pos_;
            alts.push_back(parse_sequence(owner, nested));
        }
        return alts;
    }

    Seq parse_sequence(const std::string& owner, bool nested) {
        Seq seq;
        size_t last_start = 0;  // where the last item's symbols begin in seq
        bool have_last = false;
        for (;;) {
            skip(true);
            if (pos_ >= text_.size()) break;
            const char c = text_[pos_];
            if (c == '|' || c == ')') break;
            if (name_char(c) && at_rule_start()) {
                if (nested) fail(pos_, "missing ')'");
                break;
            }
            if (c == '*' || c == '+' || c == '?' || c == '{') {
                if (!have_last) fail(pos_, std::string("'") + c + "' must follow an item");
                Seq unit(seq.begin() + static_cast<std::ptrdiff_t>(last_start), seq.end());
                seq.resize(last_start);
                const auto [lo, hi] = parse_repeat();
                append_repeat(seq, unit, lo, hi, owner);
                have_last = false;  // `a**` is an error, as in llama.cpp
                continue;
            }
            last_start = seq.size();
            have_last = true;
            if (c == '"') {
                ++pos_;
                parse_literal(seq);
            } else if (c == '[') {
                ++pos_;
                parse_class(seq, owner);
            } else if (c == '.') {
                ++pos_;
                append_class(seq, {{0, kMaxCodePoint}}, false, owner);
            } else if (c == '(') {
                ++pos_;
                Alts inner = parse_alternatives(owner, true);
                skip(true);
                if (pos_ >= text_.size() || text_[pos_] != ')') fail(pos_, "expected ')'");
                ++pos_;
                if (inner.size() == 1) {
                    seq.insert(seq.end(), inner[0].begin(), inner[0].end());
                } else {
                    seq.push_back(Sym{true, new_rule(owner, std::move(inner))});
                }
            } else if (name_char(c)) {
                const size_t at = pos_;
                seq.push_back(Sym{true, rule_id(parse_name(), at)});
            } else {
                fail(pos_, std::string("unexpected character '") + c + "'");
            }
        }
        return seq;
    }

    std::pair<int64_t, int64_t> parse_repeat() {
        const char c = text_[pos_++];
        if (c == '*') return {0, -1};
        if (c == '+') return {1, -1};
        if (c == '?') return {0, 1};
        const auto number = [&] {
            skip(true);
            const size_t start = pos_;
            int64_t v = 0;
            while (pos_ < text_.size() && text_[pos_] >= '0' && text_[pos_] <= '9') {
                v = v * 10 + (text_[pos_++] - '0');
                if (v > kMaxRepeat) fail(start, "repetition bound over " + std::to_string(kMaxRepeat));
            }
            if (pos_ == start) fail(pos_, "expected a number in '{m,n}'");
            skip(true);
            return v;
        };
        const int64_t lo = number();
        int64_t hi = lo;
        if (pos_ < text_.size() && text_[pos_] == ',') {
            ++pos_;
            skip(true);
            hi = pos_ < text_.size() && text_[pos_] == '}' ? -1 : number();
        }
        if (pos_ >= text_.size() || text_[pos_] != '}') fail(pos_, "expected '}'");
        ++pos_;
        if (hi >= 0 && hi < lo) fail(pos_, "repetition {m,n} with n < m");
        return {lo, hi};
    }

    // x{lo,hi} (hi -1: unbounded) as lo copies of x, then a right-recursive tail:
    //   x*     -> S ::= x S | ""
    //   x{0,k} -> O_k ::= x O_{k-1} | "" ... O_1 ::= x | ""
    void append_repeat(Seq& seq, const Seq& unit, int64_t lo, int64_t hi, const std::string& owner) {
        if (unit.empty()) return;
        const Sym x = unit.size() == 1 ? unit[0] : Sym{true, new_rule(owner, Alts{unit})};
        for (int64_t i = 0; i < lo; ++i) seq.push_back(x);
        if (hi < 0) {
            const int32_t star = new_rule(owner, {});
            rules_[static_cast<size_t>(star)] = Alts{{x, Sym{true, star}}, {}};
            seq.push_back(Sym{true, star});
            return;
        }
        if (hi == lo) return;
        int32_t tail = new_rule(owner, Alts{{x}, {}});
        for (int64_t k = 2; k <= hi - lo; ++k) tail = new_rule(owner, Alts{{x, Sym{true, tail}}, {}});
        seq.push_back(Sym{true, tail});
    }

    // One code point of a literal or class (after '\' escapes); pos_ is past it afterwards.
    uint32_t parse_char() {
        if (pos_ >= text_.size()) fail(pos_, "unexpected end of grammar");
        const auto c = static_cast<unsigned char>(text_[pos_]);
        if (c == '\\') {
            ++pos_;
            if (pos_ >= text_.size()) fail(pos_, "unexpected end after '\\'");
            const char e = text_[pos_++];
            switch (e) {
                case 'n':
                    return '\n';
                case 'r':
                    return '\r';
                case 't':
                    return '\t';
                case '0':
                    return 0;
                case 'x':
                    return parse_hex(2);
                case 'u':
                    return parse_hex(4);
                case 'U':
                    return parse_hex(8);
                default:
                    return static_cast<unsigned char>(e);
            }
        }
        // A UTF-8 encoded character of the grammar text.
        const int n = c < 0x80 ? 1 : c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC0 ? 2 : 0;
        if (n == 0 || pos_ + static_cast<size_t>(n) > text_.size()) fail(pos_, "invalid UTF-8 in grammar");
        uint32_t cp = n == 1 ? c : c & (0x7F >> n);
        for (int i = 1; i < n; ++i)
            cp = (cp << 6) | (static_cast<unsigned char>(text_[pos_ + static_cast<size_t>(i)]) & 0x3F);
        pos_ += static_cast<size_t>(n);
        return cp;
    }

    uint32_t parse_hex(int digits) {
        uint32_t v = 0;
        for (int i = 0; i < digits; ++i) {
            if (pos_ >= text_.size()) fail(pos_, "expected a hex digit");
            const char h = text_[pos_];
            const int d = h >= '0' && h <= '9'   ? h - '0'
                          : h >= 'a' && h <= 'f' ? h - 'a' + 10
                          : h >= 'A' && h <= 'F' ? h - 'A' + 10
                                                 : -1;
            if (d < 0) fail(pos_, "expected a hex digit");
            v = v * 16 + static_cast<uint32_t>(d);
            ++pos_;
        }
        if (v > kMaxCodePoint) fail(pos_, "code point over U+10FFFF");
        return v;
    }

    void parse_literal(Seq& seq) {
        while (true) {
            if (pos_ >= text_.size()) fail(pos_, "unterminated string literal");
            if (text_[pos_] == '"') {
                ++pos_;
                return;
            }
            const bool escaped_byte = text_[pos_] == '\\' && pos_ + 1 < text_.size() && text_[pos_ + 1] == 'x';
            const uint32_t cp = parse_char();
            if (escaped_byte || cp < 0x80) {  // \xHH is one byte, as in llama.cpp
                seq.push_back(byte_sym(static_cast<uint8_t>(cp), static_cast<uint8_t>(cp)));
                continue;
            }
            uint8_t buf[4];
            encode_utf8(cp, buf);
            for (int i = 0; i < utf8_len(cp); ++i) seq.push_back(byte_sym(buf[i], buf[i]));
        }
    }

    void parse_class(Seq& seq, const std::string& owner) {
        bool negated = false;
        if (pos_ < text_.size() && text_[pos_] == '^') {
            negated = true;
            ++pos_;
        }
        Ranges ranges;
        while (true) {
            if (pos_ >= text_.size()) fail(pos_, "unterminated character class");
            if (text_[pos_] == ']') {
                ++pos_;
                break;
            }
            const uint32_t lo = parse_char();
            uint32_t hi = lo;
            if (pos_ + 1 < text_.size() && text_[pos_] == '-' && text_[pos_ + 1] != ']') {
                ++pos_;
                hi = parse_char();
                if (hi < lo) fail(pos_, "character range out of order");
            }
            ranges.emplace_back(lo, hi);
        }
        append_class(seq, std::move(ranges), negated, owner);
    }

    void append_class(Seq& seq, Ranges ranges, bool negated, const std::string& owner) {
        std::vector<std::vector<std::pair<uint8_t, uint8_t>>> sequences;
        for (auto [lo, hi] : normalize(std::move(ranges), negated)) utf8_sequences(lo, hi, sequences);
        ByteSet ascii;
        Alts alts;
        for (const auto& s : sequences) {
            if (s.size() == 1) {
                ascii.set_range(s[0].first, s[0].second);
                continue;
            }
            Seq alt;
            for (auto [lo, hi] : s) alt.push_back(byte_sym(lo, hi));
            alts.push_back(std::move(alt));
        }
        if (!ascii.empty()) alts.insert(alts.begin(), Seq{Sym{false, set_id(ascii)}});
        if (alts.empty()) alts.push_back(Seq{Sym{false, set_id(ByteSet{})}});  // matches nothing
        if (alts.size() == 1) {
            seq.insert(seq.end(), alts[0].begin(), alts[0].end());
        } else {
            seq.push_back(Sym{true, new_rule(owner, std::move(alts))});
        }
    }

    Grammar finish(int32_t root) {
        Grammar g;
        g.root = root;
        g.byte_sets = sets_;
        g.rule_names = names_;
        g.alt_starts.resize(rules_.size());
        for (size_t r = 0; r < rules_.size(); ++r) {
            for (const Seq& alt : rules_[r]) {
                g.alt_starts[r].push_back(static_cast<int32_t>(g.elements.size()));
                for (const Sym& s : alt) g.elements.push_back({s.rule ? Element::kRule : Element::kBytes, s.id});
                g.elements.push_back({Element::kEnd, 0});
            }
        }
        check_loops();
        return g;
    }

    // A rule that can reach itself without consuming a byte would make the matcher's expansion
    // loop forever: find nullable rules, then a cycle among "may start with" edges.
    void check_loops() const {
        const size_t n = rules_.size();
        std::vector<bool> nullable(n, false);
        for (bool changed = true; changed;) {
            changed = false;
            for (size_t r = 0; r < n; ++r) {
                if (nullable[r]) continue;
                for (const Seq& alt : rules_[r]) {
                    const bool all = std::all_of(alt.begin(), alt.end(), [&](const Sym& s) {
                        return s.rule && nullable[static_cast<size_t>(s.id)];
                    });
                    if (all) {
                        nullable[r] = true;
                        changed = true;
                        break;
                    }
                }
            }
        }
        std::vector<std::vector<int32_t>> starts(n);
        for (size_t r = 0; r < n; ++r) {
            for (const Seq& alt : rules_[r]) {
                for (const Sym& s : alt) {
                    if (!s.rule) break;
                    starts[r].push_back(s.id);
                    if (!nullable[static_cast<size_t>(s.id)]) break;
                }
            }
        }
        std::vector<uint8_t> color(n, 0);  // 0 new, 1 on the path, 2 done
        std::vector<std::pair<size_t, size_t>> stack;
        for (size_t r0 = 0; r0 < n; ++r0) {
            if (color[r0]) continue;
            stack.push_back({r0, 0});
            color[r0] = 1;
            while (!stack.empty()) {
                auto& [r, i] = stack.back();
                if (i == starts[r].size()) {
                    color[r] = 2;
                    stack.pop_back();
                    continue;
                }
                const auto next = static_cast<size_t>(starts[r][i++]);
                if (color[next] == 1) {
                    raise(ErrorCode::kInvalidArgument,
                          "grammar: rule '{}' can reach itself without consuming input (left recursion or a "
                          "repetition of something that may be empty); rewrite it right-recursively",
                          owner_[next]);
                }
                if (color[next] == 0) {
                    color[next] = 1;
                    stack.push_back({next, 0});
                }
            }
        }
    }

    std::string_view text_;
    size_t pos_ = 0;
    std::vector<Alts> rules_;
    std::vector<std::string> names_;
    std::vector<std::string> owner_;  // the user's rule each (generated) rule belongs to
    std::unordered_map<std::string, int32_t> ids_;
    std::vector<bool> defined_;
    std::vector<size_t> first_use_;
    std::vector<ByteSet> sets_;
    std::map<std::array<uint64_t, 4>, int32_t> set_ids_;
    int generated_ = 0;
    int depth_ = 0;
};

}  // namespace

Grammar parse_gbnf(std::string_view text) { return Parser(text).parse(); }

std::string gbnf_literal(std::string_view s) {
    return quote_escaped(s, '"');  // UTF-8 bytes pass through: the parser decodes them back to the same bytes
}

}  // namespace moeserve::structured
