// Data sets with the real Qwen3 tokenizer: random prompts have exactly the token count they
// claim, within the requested range; ShareGPT filtering and oversampling as vLLM.
#include "moeserve/bench/datasets.h"

#include <gtest/gtest.h>

#include <fstream>
#include <set>

#include "moeserve/core/error.h"
#include "test_support.h"

namespace moeserve::bench {
namespace {

class DatasetsTest : public ::testing::Test {
protected:
    tokenizer::Tokenizer tok_ = tokenizer::Tokenizer::from_dir(test::tokenizer_dir("qwen3"));
};

int64_t count(const tokenizer::Tokenizer& tok, const std::string& text) {
    return static_cast<int64_t>(tok.encode(text, /*add_special_tokens=*/false).size());
}

TEST_F(DatasetsTest, RandomPromptsHaveExactTokenCounts) {
    const auto& tok = tok_;
    const auto reqs = sample_random(tok, {.num_prompts = 40, .input_len = 128, .output_len = 16, .seed = 1});
    ASSERT_EQ(reqs.size(), 40u);
    for (const auto& r : reqs) {
        EXPECT_EQ(r.prompt_len, 128);
        EXPECT_EQ(count(tok, r.prompt), 128) << r.prompt;
        EXPECT_EQ(r.expected_output_len, 16);
    }
    EXPECT_NE(reqs[0].prompt, reqs[1].prompt);
}

TEST_F(DatasetsTest, RandomRangeAndPrefix) {
    const auto& tok = tok_;
    const auto reqs = sample_random(
        tok, {.num_prompts = 30, .input_len = 32, .output_len = 20, .range_ratio = 0.5, .prefix_len = 8, .seed = 7});
    std::set<int64_t> lens;
    for (const auto& r : reqs) {
        EXPECT_EQ(count(tok, r.prompt), r.prompt_len);
        EXPECT_GE(r.prompt_len, 8 + 16);
        EXPECT_LE(r.prompt_len, 8 + 48);
        EXPECT_GE(r.expected_output_len, 10);
        EXPECT_LE(r.expected_output_len, 30);
        lens.insert(r.prompt_len);
    }
    EXPECT_GT(lens.size(), 3u);  // lengths vary
}

TEST_F(DatasetsTest, RandomIsDeterministicInSeed) {
    const auto& tok = tok_;
    const RandomDatasetOptions o{.num_prompts = 3, .input_len = 16, .output_len = 4, .seed = 42};
    const auto a = sample_random(tok, o);
    const auto b = sample_random(tok, o);
    RandomDatasetOptions o2 = o;
    o2.seed = 43;
    const auto c = sample_random(tok, o2);
    for (size_t i = 0; i < a.size(); ++i) EXPECT_EQ(a[i].prompt, b[i].prompt);
    EXPECT_NE(a[0].prompt, c[0].prompt);
}

TEST_F(DatasetsTest, RandomRejectsBadOptions) {
    const auto& tok = tok_;
    EXPECT_THROW(sample_random(tok, {.num_prompts = 1, .range_ratio = 1.0}), Error);
    EXPECT_THROW(sample_random(tok, {.num_prompts = 0}), Error);
}

TEST_F(DatasetsTest, ShareGptFiltersShufflesAndOversamples) {
    const auto& tok = tok_;
    const auto dir = test::scratch_dir("bench_sharegpt");
    const auto path = dir / "sharegpt.json";
    std::ofstream(path) << R"([
      {"id": "a", "conversations": [{"from": "human", "value": "What is the capital of France? Answer briefly."},
                                     {"from": "gpt", "value": "The capital of France is Paris, a large city."}]},
      {"id": "short", "conversations": [{"from": "human", "value": "Hi"}, {"from": "gpt", "value": "Hello there, how are you doing today?"}]},
      {"id": "one-turn", "conversations": [{"from": "human", "value": "Only one turn in this conversation here."}]},
      {"id": "b", "conversations": [{"from": "human", "value": "Name three colours of the rainbow please."},
                                     {"from": "gpt", "value": "Red, orange and yellow are three of them."}]}
    ])";
    const auto reqs = sample_sharegpt(tok, {.path = path, .num_prompts = 5, .seed = 0});
    ASSERT_EQ(reqs.size(), 5u);  // 2 usable entries, oversampled to 5
    for (const auto& r : reqs) {
        EXPECT_TRUE(r.prompt.rfind("What is", 0) == 0 || r.prompt.rfind("Name three", 0) == 0) << r.prompt;
        EXPECT_EQ(r.prompt_len, static_cast<int64_t>(tok.encode(r.prompt).size()));
        EXPECT_GE(r.expected_output_len, 4);
    }
    const auto fixed = sample_sharegpt(tok, {.path = path, .num_prompts = 2, .output_len = 64, .seed = 0});
    ASSERT_EQ(fixed.size(), 2u);
    EXPECT_EQ(fixed[0].expected_output_len, 64);
    EXPECT_THROW(sample_sharegpt(tok, {.path = dir / "missing.json", .num_prompts = 1}), Error);
    std::ofstream(dir / "bad.json") << "{not json";
    EXPECT_THROW(sample_sharegpt(tok, {.path = dir / "bad.json", .num_prompts = 1}), Error);
}

}  // namespace
}  // namespace moeserve::bench
