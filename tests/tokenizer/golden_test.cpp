// Tokenizer goldens: the real Qwen3, DeepSeek-V3 and gpt-oss tokenizer.json files against ids and decoded
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

INSTANTIATE_TEST_SUITE_P(RealTokenizers, GoldenTest, ::testing::Values("qwen3", "deepseek_v3", "gpt_oss"));

// gpt-oss (o200k_harmony, setup.sh derives it from GPT-4o's o200k_base): the harmony markers are
// single special tokens at OpenAI's ids, found inside text, and dropped by skip_special_tokens.
TEST(GptOssTokenizerTest, HarmonySpecialTokensHaveOpenAIsIds) {
    const Tokenizer& tokenizer = real_tokenizer("gpt_oss");
    const std::map<std::string, int32_t> expected = {
        {"<|startoftext|>", 199998}, {"<|endoftext|>", 199999},       {"<|return|>", 200002},
        {"<|constrain|>", 200003},   {"<|channel|>", 200005},         {"<|start|>", 200006},
        {"<|end|>", 200007},         {"<|message|>", 200008},         {"<|call|>", 200012},
        {"<|endofprompt|>", 200018}, {"<|reserved_200000|>", 200000}, {"<|reserved_201087|>", 201087}};
    for (const auto& [text, id] : expected) {
        EXPECT_EQ(tokenizer.encode(text, false), std::vector<int32_t>{id}) << text;
        EXPECT_EQ(tokenizer.decode(std::vector<int32_t>{id}), text);
        EXPECT_EQ(tokenizer.decode(std::vector<int32_t>{id}, /*skip_special_tokens=*/true), "");
    }
    EXPECT_EQ(tokenizer.vocab_size(), 201088);
    const auto ids = tokenizer.encode("<|start|>assistant<|channel|>final<|message|>Hi<|return|>", false);
    ASSERT_EQ(ids.size(), 7u);
    EXPECT_EQ(ids.front(), 200006);
    EXPECT_EQ(ids.back(), 200002);
}

}  // namespace
}  // namespace moeserve::tokenizer
