// Tokenizer goldens: the real Qwen3 and DeepSeek-V3 tokenizer.json files against ids and decoded
// text written by Hugging Face tokenizers (tools/goldens/make_tokenizer_goldens.js).
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

nlohmann::json load_goldens(const std::string& name) {
    std::ifstream in(test::data_dir() / "tokenizer" / (name + "_goldens.json"));
    EXPECT_TRUE(in.good()) << name;
    return nlohmann::json::parse(in);
}

// Short, printable description of a case for failure messages.
std::string describe(const nlohmann::json& c) {
    std::string text = c["text"].get<std::string>();
    if (text.size() > 60) text = text.substr(0, 60) + "...";
    return nlohmann::json(text).dump() +
           " add_special_tokens=" + (c["add_special_tokens"].get<bool>() ? "true" : "false");
}

class GoldenTest : public ::testing::TestWithParam<std::string> {
protected:
    static const Tokenizer& tokenizer() { return real_tokenizer(GetParam()); }
};

TEST_P(GoldenTest, EncodeMatchesHuggingFaceIdsExactly) {
    const Tokenizer& tokenizer = GoldenTest::tokenizer();
    const auto goldens = load_goldens(GetParam());
    ASSERT_GE(goldens["cases"].size(), 70u);
    for (const auto& c : goldens["cases"]) {
        auto ids = tokenizer.encode(c["text"].get<std::string>(), c["add_special_tokens"].get<bool>());
        EXPECT_EQ(ids, c["ids"].get<std::vector<int32_t>>()) << describe(c);
    }
}

TEST_P(GoldenTest, DecodeMatchesHuggingFaceText) {
    const Tokenizer& tokenizer = GoldenTest::tokenizer();
    const auto goldens = load_goldens(GetParam());  // named: a temporary would die before the loop
    for (const auto& c : goldens["cases"]) {
        auto ids = c["ids"].get<std::vector<int32_t>>();
        EXPECT_EQ(tokenizer.decode(ids), c["decoded"].get<std::string>()) << describe(c);
        EXPECT_EQ(tokenizer.decode(ids, /*skip_special_tokens=*/true), c["decoded_skip_special"].get<std::string>())
            << describe(c);
    }
}

TEST_P(GoldenTest, DecodeOfEncodeRoundTripsWithoutSpecialTokens) {
    // Byte-level BPE is lossless: only normalization (NFC for Qwen3) may change the text.
    const Tokenizer& tokenizer = GoldenTest::tokenizer();
    const auto goldens = load_goldens(GetParam());  // named: a temporary would die before the loop
    for (const auto& c : goldens["cases"]) {
        if (c["add_special_tokens"].get<bool>()) continue;
        const auto text = c["text"].get<std::string>();
        auto decoded = tokenizer.decode(tokenizer.encode(text, false));
        EXPECT_EQ(decoded, c["decoded"].get<std::string>()) << describe(c);
    }
}

TEST_P(GoldenTest, StreamingDetokenizerEqualsDecode) {
    const Tokenizer& tokenizer = GoldenTest::tokenizer();
    const auto goldens = load_goldens(GetParam());  // named: a temporary would die before the loop
    for (const auto& c : goldens["cases"]) {
        auto ids = c["ids"].get<std::vector<int32_t>>();
        for (bool skip : {false, true}) {
            IncrementalDetokenizer detokenizer(tokenizer, skip);
            std::string streamed;
            for (int32_t id : ids) streamed += detokenizer.push(id);
            streamed += detokenizer.flush();
            EXPECT_EQ(streamed, c[skip ? "decoded_skip_special" : "decoded"].get<std::string>()) << describe(c);
        }
    }
}

TEST_P(GoldenTest, VocabSizeMatchesHuggingFace) {
    const Tokenizer& tokenizer = GoldenTest::tokenizer();
    EXPECT_EQ(tokenizer.vocab_size(), load_goldens(GetParam())["vocab_size"].get<int32_t>());
}

INSTANTIATE_TEST_SUITE_P(RealTokenizers, GoldenTest, ::testing::Values("qwen3", "deepseek_v3"));

}  // namespace
}  // namespace moeserve::tokenizer
