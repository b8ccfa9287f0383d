// Every code point against Hugging Face's own Unicode behaviour, as probed exhaustively by
// tools/goldens/probe_unicode.js (tests/data/tokenizer/hf_unicode_probe.json): the regex general
// categories and \s, and NFC's reordering, decompositions and compositions.
#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>

#include "moeserve/core/error.h"
#include "moeserve/tokenizer/normalizer.h"
#include "moeserve/tokenizer/regex.h"
#include "moeserve/tokenizer/unicode_compat.h"
#include "moeserve/core/utf8.h"
#include "test_support.h"

namespace moeserve::tokenizer {
namespace {

constexpr char32_t kMax = 0x10FFFF;
bool is_surrogate(char32_t cp) { return cp >= 0xD800 && cp <= 0xDFFF; }
using CpSet = std::vector<bool>;

const nlohmann::json& probe() {
    static const nlohmann::json doc = [] {
        std::ifstream in(test::data_dir() / "tokenizer" / "hf_unicode_probe.json");
        EXPECT_TRUE(in.good());
        return nlohmann::json::parse(in);
    }();
    return doc;
}

CpSet parse_ranges(const std::string& text) {
    CpSet set(kMax + 1, false);
    std::stringstream ss(text);
    std::string part;
    while (std::getline(ss, part, ',')) {
        auto dash = part.find('-');
        unsigned long lo = std::stoul(part.substr(0, dash), nullptr, 16);
        unsigned long hi = dash == std::string::npos ? lo : std::stoul(part.substr(dash + 1), nullptr, 16);
        for (unsigned long cp = lo; cp <= hi; ++cp) set[cp] = true;
    }
    return set;
}

std::string from_hex(const std::string& hex) {
    std::string out;
    std::stringstream ss(hex);
    std::string word;
    while (ss >> word) utf8_append(static_cast<char32_t>(std::stoul(word, nullptr, 16)), out);
    return out;
}

std::string cp_string(char32_t cp) {
    std::string s;
    utf8_append(cp, s);
    return s;
}

// Every non-surrogate code point, in order.
const std::string& all_code_points() {
    static const std::string text = [] {
        std::string s;
        for (char32_t cp = 0; cp <= kMax; ++cp) {
            if (!is_surrogate(cp)) utf8_append(cp, s);
        }
        return s;
    }();
    return text;
}

// The code points `pattern` matches on its own, found in one pass over all of them.
CpSet regex_members(const std::string& pattern) {
    CpSet set(kMax + 1, false);
    Regex regex(pattern, "test");
    const std::string& text = all_code_points();
    for (auto [begin, end] : regex.find_all(text)) {
        for (size_t pos = begin; pos < end;) {
            size_t n = 0;
            set[utf8_decode(text, pos, &n)] = true;
            pos += n;
        }
    }
    return set;
}

// "U+XXXX ..." for the first few code points where the sets differ.
std::string differences(const CpSet& ours, const CpSet& hf) {
    std::string out;
    int shown = 0;
    for (char32_t cp = 0; cp <= kMax && shown < 8; ++cp) {
        if (is_surrogate(cp) || ours[cp] == hf[cp]) continue;
        char buf[32];
        std::snprintf(buf, sizeof buf, "U+%04X(%s) ", static_cast<unsigned>(cp), ours[cp] ? "ours" : "hf");
        out += buf;
        ++shown;
    }
    return out;
}

CpSet complement(const CpSet& set) {
    CpSet out(kMax + 1, false);
    for (char32_t cp = 0; cp <= kMax; ++cp) out[cp] = !is_surrogate(cp) && !set[cp];
    return out;
}

std::map<std::string, CpSet> hf_categories() {
    std::map<std::string, CpSet> out;
    for (const auto& [gc, ranges] : probe()["categories"].items()) {
        out[gc] = parse_ranges(ranges.get<std::string>());
    }
    for (char major : std::string("LMNPSZC")) {
        CpSet set(kMax + 1, false);
        for (const auto& [gc, members] : out) {
            if (gc.size() != 2 || gc[0] != major) continue;
            for (char32_t cp = 0; cp <= kMax; ++cp) set[cp] = set[cp] || members[cp];
        }
        out[std::string(1, major)] = set;
    }
    return out;
}

TEST(UnicodeCompatTest, GeneralCategoriesMatchHuggingFaceForEveryCodePoint) {
    for (const auto& [gc, hf] : hf_categories()) {
        const std::string p = "\\p{" + gc + "}";
        const CpSet outside = regex_members(p);
        EXPECT_TRUE(outside == hf) << p << ": " << differences(outside, hf);
        const CpSet negated = regex_members("\\P{" + gc + "}");
        EXPECT_TRUE(negated == complement(hf)) << "\\P{" << gc << "}: " << differences(negated, complement(hf));
        // Inside a class: members when the delta only adds; otherwise a clear error (PCRE2 10.42
        // cannot subtract inside [...]).
        const CategoryDelta* delta = hf_category_delta(gc);
        if (delta == nullptr || delta->remove.empty()) {
            const CpSet in_class = regex_members("[x" + p + "]");
            CpSet expected = hf;
            expected['x'] = true;
            EXPECT_TRUE(in_class == expected) << "[x" << p << "]: " << differences(in_class, expected);
            const CpSet in_negated = regex_members("[^x" + p + "]");
            EXPECT_TRUE(in_negated == complement(expected))
                << "[^x" << p << "]: " << differences(in_negated, complement(expected));
        } else {
            try {
                Regex regex("[x" + p + "]", "test");
                ADD_FAILURE() << "[x" << p << "] compiled";
            } catch (const Error& e) {
                EXPECT_EQ(e.code(), ErrorCode::kUnsupported) << e.what();
            }
        }
    }
}

TEST(UnicodeCompatTest, OnigurumaLetterSyntaxAndOtherPropertiesStillWork) {
    // \p{^L} is Oniguruma's spelling of \P{L}; a script property is left to PCRE2.
    EXPECT_TRUE(regex_members("\\p{^L}") == regex_members("\\P{L}"));
    EXPECT_TRUE(regex_members("\\p{Han}")[0x4E00]);
    // U+31350 (CJK Unified Ideographs Extension H, Unicode 15.0) is a letter to HF; PCRE2 10.42
    // alone does not know it.
    EXPECT_EQ(Regex("\\p{L}+", "test").find_all("a\U00031350b").size(), 1u);
}

TEST(UnicodeCompatTest, DeltaDetectionPicksTheRewrittenPatternOnlyWhenNeeded) {
    EXPECT_FALSE(has_hf_regex_delta(""));
    EXPECT_FALSE(has_hf_regex_delta("plain ASCII, caf\u00e9, \u4e2d\u6587, \U0001F600"));
    EXPECT_TRUE(has_hf_regex_delta("abc\U00031350"));  // CJK Extension H (Unicode 15.0)
    EXPECT_TRUE(has_hf_regex_delta("x\u180Ey"));       // \s in PCRE2, not in Oniguruma
    // Both paths of one Regex: without a delta code point, with one at the end.
    Regex regex("\\p{L}+|\\s+", "test");
    EXPECT_EQ(regex.find_all("ab cd").size(), 3u);
    EXPECT_EQ(regex.find_all("ab cd\U00031350").size(), 3u);
    EXPECT_EQ(regex.find_all("ab\u180Ecd").size(), 2u);
}

TEST(UnicodeCompatTest, WhiteSpaceMatchesHuggingFaceForEveryCodePoint) {
    const CpSet hf = parse_ranges(probe()["white_space"].get<std::string>());
    for (const char* p : {"\\s", "[\\s]"}) {
        const CpSet ours = regex_members(p);
        EXPECT_TRUE(ours == hf) << p << ": " << differences(ours, hf);
    }
    const CpSet non_space = regex_members("\\S");
    EXPECT_TRUE(non_space == complement(hf)) << "\\S: " << differences(non_space, complement(hf));
}

// Replays every NFC probe of probe_unicode.js (each led by '|') through our NFC normalizer.
TEST(UnicodeCompatTest, NfcMatchesHuggingFaceOnEveryProbe) {
    const auto& nfc_probe = probe()["nfc"];
    auto nfc = make_normalizer(nlohmann::json{{"type", "NFC"}}, "test");
    ASSERT_NE(nfc, nullptr);
    int failures = 0;
    auto check = [&](const std::string& input, const std::string& expected, const char* kind) {
        std::string got = nfc->normalize("|" + input);
        if (got == "|" + expected || ++failures > 20) return;
        ADD_FAILURE() << kind << ": NFC(" << nlohmann::json("|" + input).dump() << ") = " << nlohmann::json(got).dump()
                      << ", HF: " << nlohmann::json("|" + expected).dump();
    };
    auto split = [](const std::string& entry) {
        auto gt = entry.find('>');
        return std::pair{from_hex(entry.substr(0, gt)), from_hex(entry.substr(gt + 1))};
    };
    std::map<std::string, std::string> single;
    for (const auto& e : nfc_probe["single"]) single.insert(split(e.get<std::string>()));
    const CpSet swap1 = parse_ranges(nfc_probe["after_ccc1_swapped"].get<std::string>());
    const CpSet swap7 = parse_ranges(nfc_probe["before_ccc7_swapped"].get<std::string>());
    std::map<char32_t, unsigned> masks;
    std::stringstream ss(nfc_probe["class_masks"].get<std::string>());
    for (std::string part; std::getline(ss, part, ',');) {
        auto colon = part.find(':');
        CpSet range = parse_ranges(part.substr(0, colon));
        auto mask = static_cast<unsigned>(std::stoul(part.substr(colon + 1), nullptr, 16));
        for (char32_t cp = 0; cp <= kMax; ++cp) {
            if (range[cp]) masks[cp] = mask;
        }
    }
    std::vector<std::string> marks;
    {
        std::stringstream ms(nfc_probe["class_marks"].get<std::string>());
        for (std::string word; ms >> word;) marks.push_back(from_hex(word));
    }
    const std::string m1 = "\u0334";
    const std::string m7 = "\u093C";
    for (char32_t cp = 0; cp <= kMax; ++cp) {
        if (is_surrogate(cp)) continue;
        const std::string x = cp_string(cp);
        auto it = single.find(x);
        check(x, it == single.end() ? x : it->second, "single");
        if (it != single.end()) continue;  // as in the probe: X decomposes, its parts are probed
        check(x + m1, swap1[cp] ? m1 + x : x + m1, "after_ccc1");
        check(m7 + x, swap7[cp] ? x + m7 : m7 + x, "before_ccc7");
        if (!swap1[cp] && !swap7[cp]) continue;
        for (size_t i = 0; i < marks.size(); ++i) {
            const bool changes = (masks[cp] >> i) & 1u;
            const std::string input = x + marks[i];
            const std::string got = nfc->normalize("|" + input);
            if ((got != "|" + input) != changes && ++failures <= 20) {
                ADD_FAILURE() << "class: NFC(" << nlohmann::json("|" + input).dump()
                              << ") = " << nlohmann::json(got).dump() << "; HF " << (changes ? "changes" : "keeps")
                              << " it";
            }
        }
    }
    for (const auto& e : nfc_probe["icu_nfd"]) {
        auto [input, expected] = split(e.get<std::string>());
        check(input, expected, "icu_nfd");
    }
    EXPECT_EQ(failures, 0);
}

TEST(UnicodeCompatTest, NfcKeepsMarksHuggingFaceDoesNotKnowInPlace) {
    auto nfc = make_normalizer(nlohmann::json{{"type", "NFC"}}, "test");
    // U+1AC1 (Unicode 13.0, class 230) before U+0316 (class 220): utf8proc would swap them;
    // to HF's Unicode 9.0 data U+1AC1 is an unassigned starter. U+0301 still composes with e.
    EXPECT_EQ(nfc->normalize("a\u1AC1\u0316 e\u0301"), "a\u1AC1\u0316 \u00E9");
    // U+11935 U+11930 compose to U+11938 in Unicode 13.0; not for HF.
    EXPECT_EQ(nfc->normalize("\U00011935\U00011930"), "\U00011935\U00011930");
    // A mark HF knows is still reordered around the unknown one's neighbours.
    EXPECT_EQ(nfc->normalize("a\u0301\u0316\u1AC1"), "\u00E1\u0316\u1AC1");
    EXPECT_TRUE(hf_normalizer_unknown(0x1AC1));
    EXPECT_FALSE(hf_normalizer_unknown(0x0301));
}

}  // namespace
}  // namespace moeserve::tokenizer
