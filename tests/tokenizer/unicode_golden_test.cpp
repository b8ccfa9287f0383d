// Unicode edge-case goldens (#15): strings over the code points where Hugging Face's Unicode
// data differs from PCRE2's and utf8proc's (tools/goldens/unicode_cases.js), with the ids and
// decoded text HF tokenizers produced for the real Qwen3 and DeepSeek-V3 tokenizer.json files.
#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <nlohmann/json.hpp>

#include "moeserve/tokenizer/detokenizer.h"
#include "moeserve/tokenizer/tokenizer.h"
#include "real_tokenizers.h"
#include "test_support.h"

namespace moeserve::tokenizer {
namespace {

nlohmann::json load_unicode_goldens(const std::string& name) {
    std::ifstream in(test::data_dir() / "tokenizer" / (name + "_unicode_goldens.json"));
    EXPECT_TRUE(in.good()) << name;
    return nlohmann::json::parse(in);
}

// The text with every non-ASCII code point as \uXXXX, for failure messages.
std::string describe(const nlohmann::json& c) { return nlohmann::json(c["text"]).dump(-1, ' ', /*ensure_ascii=*/true); }

class UnicodeGoldenTest : public ::testing::TestWithParam<std::string> {
protected:
    static const Tokenizer& tokenizer() { return real_tokenizer(GetParam()); }
};

TEST_P(UnicodeGoldenTest, EncodeMatchesHuggingFaceIdsExactly) {
    const Tokenizer& tokenizer = UnicodeGoldenTest::tokenizer();
    const auto goldens = load_unicode_goldens(GetParam());
    ASSERT_GE(goldens["cases"].size(), 300u);
    for (const auto& c : goldens["cases"]) {
        auto ids = tokenizer.encode(c["text"].get<std::string>(), /*add_special_tokens=*/false);
        EXPECT_EQ(ids, c["ids"].get<std::vector<int32_t>>()) << describe(c);
    }
}

TEST_P(UnicodeGoldenTest, DecodeAndStreamingMatchHuggingFaceText) {
    // Decoding is byte-level (no Unicode tables), so HF's decode of its ids is what NFC left.
    const Tokenizer& tokenizer = UnicodeGoldenTest::tokenizer();
    const auto goldens = load_unicode_goldens(GetParam());  // named: outlives the loop
    for (const auto& c : goldens["cases"]) {
        auto ids = c["ids"].get<std::vector<int32_t>>();
        const auto expected = c["decoded"].get<std::string>();
        EXPECT_EQ(tokenizer.decode(ids), expected) << describe(c);
        IncrementalDetokenizer detokenizer(tokenizer, /*skip_special_tokens=*/false);
        std::string streamed;
        for (int32_t id : ids) streamed += detokenizer.push(id);
        streamed += detokenizer.flush();
        EXPECT_EQ(streamed, expected) << describe(c);
    }
}

INSTANTIATE_TEST_SUITE_P(RealTokenizers, UnicodeGoldenTest, ::testing::Values("qwen3", "deepseek_v3", "gpt_oss"));

}  // namespace
}  // namespace moeserve::tokenizer
