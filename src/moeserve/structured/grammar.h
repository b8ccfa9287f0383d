// A context-free grammar over bytes, parsed from GBNF (llama.cpp's dialect, grammars/README.md):
// `name ::= alternatives`, "literals", [classes], [^negated], `.`, ( groups ), `|`, and the
// postfix operators * + ? {m} {m,} {m,n}, # comments. Characters are Unicode code points;
// lowering turns every class into UTF-8 byte ranges, so the matcher only ever sees bytes.
// Depends on core only.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace moeserve::structured {

// A set of byte values (256 bits).
struct ByteSet {
    std::array<uint64_t, 4> bits{};
    bool test(uint8_t b) const { return (bits[b >> 6] >> (b & 63)) & 1; }
    void set(uint8_t b) { bits[b >> 6] |= uint64_t{1} << (b & 63); }
    void set_range(uint8_t lo, uint8_t hi) {
        for (int b = lo; b <= hi; ++b) set(static_cast<uint8_t>(b));
    }
    ByteSet& operator|=(const ByteSet& o) {
        for (size_t i = 0; i < 4; ++i) bits[i] |= o.bits[i];
        return *this;
    }
    bool empty() const { return (bits[0] | bits[1] | bits[2] | bits[3]) == 0; }
    bool operator==(const ByteSet&) const = default;
};

// One element of the flat rule table (llama.cpp's layout): each alternative of a rule is a run of
// kBytes / kRule elements closed by kEnd.
struct Element {
    enum Kind : uint8_t { kEnd, kBytes, kRule };
    Kind kind = kEnd;
    int32_t value = 0;  // kBytes: index into byte_sets; kRule: rule id
};

//   rule r, alternative a:  elements[alt_starts[r][a]] ... elements[k].kind == kEnd
struct Grammar {
    std::vector<Element> elements;
    std::vector<ByteSet> byte_sets;
    std::vector<std::vector<int32_t>> alt_starts;  // [rule] -> element index of each alternative
    std::vector<std::string> rule_names;
    int32_t root = 0;
};

// Parses GBNF text whose start rule is `root`. Raises Error kInvalidArgument naming the line
// and column for a syntax error, an undefined rule, a missing root, a repetition bound over
// 10000, and a rule that can loop without consuming input (left recursion).
Grammar parse_gbnf(std::string_view text);

// The GBNF string literal (with quotes) that matches exactly the bytes of s.
std::string gbnf_literal(std::string_view s);

}  // namespace moeserve::structured
