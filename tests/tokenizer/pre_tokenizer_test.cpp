// Split behaviours, invert, Digits and ByteLevel pre-tokenizers against HF's documented results.
#include "moeserve/tokenizer/pre_tokenizer.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "moeserve/core/error.h"

namespace moeserve::tokenizer {
namespace {

using Pieces = std::vector<std::string>;

Pieces run(const std::string& spec_json, const std::string& text) {
    auto pre_tokenizer = make_pre_tokenizer(nlohmann::json::parse(spec_json), "test");
    Pieces pieces{text};
    pre_tokenizer->pre_tokenize(pieces);
    return pieces;
}

std::string split_spec(const std::string& behavior, bool invert = false) {
    return R"({"type": "Split", "pattern": {"String": "-"}, "behavior": ")" + behavior + R"(", "invert": )" +
           (invert ? "true" : "false") + "}";
}

// The example of HF's SplitDelimiterBehavior documentation: "the-final--countdown" split on '-'.
TEST(SplitTest, BehavioursMatchHuggingFaceDocumentation) {
    const std::string text = "the-final--countdown";
    EXPECT_EQ(run(split_spec("Removed"), text), (Pieces{"the", "final", "countdown"}));
    EXPECT_EQ(run(split_spec("Isolated"), text), (Pieces{"the", "-", "final", "-", "-", "countdown"}));
    EXPECT_EQ(run(split_spec("MergedWithPrevious"), text), (Pieces{"the-", "final-", "-", "countdown"}));
    EXPECT_EQ(run(split_spec("MergedWithNext"), text), (Pieces{"the", "-final", "-", "-countdown"}));
    EXPECT_EQ(run(split_spec("Contiguous"), text), (Pieces{"the", "-", "final", "--", "countdown"}));
}

TEST(SplitTest, InvertKeepsTheNonMatchesAsDelimiters) {
    // Inverted, the words are the "matches": Removed drops them and keeps each dash (checked
    // with HF's splitPreTokenizer('-', 'removed', true)).
    EXPECT_EQ(run(split_spec("Removed", true), "the-final--countdown"), (Pieces{"-", "-", "-"}));
}

TEST(SplitTest, RegexWithUnicodeClassesAndLookahead) {
    const std::string spec =
        R"({"type": "Split", "pattern": {"Regex": "\\p{L}+|\\s+(?!\\S)|\\s+"}, "behavior": "Isolated"})";
    EXPECT_EQ(run(spec, "héllo   wörld"), (Pieces{"héllo", "  ", " ", "wörld"}));
}

TEST(SplitTest, WhitespaceClassIncludesNextLineLikeOniguruma) {
    const std::string spec = R"({"type": "Split", "pattern": {"Regex": "\\s+"}, "behavior": "Removed"})";
    EXPECT_EQ(run(spec, "a\u0085b\u3000c"), (Pieces{"a", "b", "c"}));
}

TEST(DigitsTest, IndividualAndContiguous) {
    EXPECT_EQ(run(R"({"type": "Digits", "individual_digits": true})", "ab123c"), (Pieces{"ab", "1", "2", "3", "c"}));
    EXPECT_EQ(run(R"({"type": "Digits", "individual_digits": false})", "ab123c4"), (Pieces{"ab", "123", "c", "4"}));
}

TEST(ByteLevelTest, MapsBytesAndSplitsWithGpt2Regex) {
    EXPECT_EQ(run(R"({"type": "ByteLevel", "add_prefix_space": false, "use_regex": false})", "a b\n"),
              (Pieces{"aĠbĊ"}));
    EXPECT_EQ(run(R"({"type": "ByteLevel", "add_prefix_space": true, "use_regex": true})", "Hello world's 42"),
              (Pieces{"ĠHello", "Ġworld", "'s", "Ġ42"}));
    EXPECT_EQ(run(R"({"type": "ByteLevel", "add_prefix_space": false, "use_regex": false})", "é"), (Pieces{"Ã©"}));
}

TEST(PreTokenizerTest, UnknownTypeIsUnsupportedAndNamed) {
    try {
        run(R"({"type": "Metaspace", "replacement": "_"})", "x");
        FAIL() << "expected an error";
    } catch (const Error& e) {
        EXPECT_EQ(e.code(), ErrorCode::kUnsupported);
        EXPECT_NE(std::string(e.what()).find("Metaspace"), std::string::npos) << e.what();
    }
}

}  // namespace
}  // namespace moeserve::tokenizer

namespace moeserve::tokenizer {
namespace {

// Checked with HF: sequencePreTokenizer([splitPreTokenizer('-', 'isolated'),
// byteLevelPreTokenizer(true, true)]).preTokenizeString('a-b c').
TEST(ByteLevelTest, PrefixSpaceIsAddedToEverySplit) {
    const std::string spec = R"({"type": "Sequence", "pretokenizers": [
        {"type": "Split", "pattern": {"String": "-"}, "behavior": "Isolated"},
        {"type": "ByteLevel", "add_prefix_space": true, "use_regex": true}]})";
    EXPECT_EQ(run(spec, "a-b c"), (Pieces{"Ġa", "Ġ-", "Ġb", "Ġc"}));
}

}  // namespace
}  // namespace moeserve::tokenizer
