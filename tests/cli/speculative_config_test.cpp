// parse_speculative_config: vLLM's --speculative-config JSON for n-gram drafting, its defaults, and
// one-sentence refusals naming the flag and field (unknown method or field, k out of range,
// deepseek_mtp without an MTP layer or with more than one token per step).
#include "moeserve/cli/speculative_config.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "moeserve/core/error.h"

namespace moeserve::cli {
namespace {

using engine::SpeculativeConfig;

// A model without an MTP layer, opened once (n-gram drafting never looks at it).
const model::ModelSource& tiny() {
    static const model::ModelSource source = model::open_model_source(MOESERVE_DSV3_TINY_DIR);
    return source;
}

// The message of the Error that parsing `text` raises ("" if none).
std::string refusal(const std::string& text, const model::ModelSource& model = tiny()) {
    try {
        parse_speculative_config(text, model);
    } catch (const Error& e) {
        return e.what();
    }
    return "";
}

TEST(SpeculativeConfigTest, ReadsNgram) {
    const SpeculativeConfig c = parse_speculative_config(
        R"({"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_max": 4, "prompt_lookup_min": 2})", tiny());
    EXPECT_EQ(c.method, SpeculativeConfig::Method::kNgram);
    EXPECT_EQ(c.num_speculative_tokens, 4);
    EXPECT_EQ(c.prompt_lookup_max, 4);
    EXPECT_EQ(c.prompt_lookup_min, 2);
    EXPECT_TRUE(c.enabled());
    const SpeculativeConfig d = parse_speculative_config(R"({"method": "ngram", "num_speculative_tokens": 1})", tiny());
    EXPECT_EQ(d.prompt_lookup_max, 5);
    EXPECT_EQ(d.prompt_lookup_min, 5);
    const SpeculativeConfig e =
        parse_speculative_config(R"({"method": "ngram", "num_speculative_tokens": 2, "prompt_lookup_max": 3})", tiny());
    EXPECT_EQ(e.prompt_lookup_min, 3);
    EXPECT_FALSE(parse_speculative_config("", tiny()).enabled());
}

// moeserve's "adaptive" (DraftBudget): on unless turned off.
TEST(SpeculativeConfigTest, TheDraftBudgetAdaptsUnlessTurnedOff) {
    EXPECT_TRUE(parse_speculative_config(R"({"method": "ngram", "num_speculative_tokens": 2})", tiny()).adaptive);
    EXPECT_FALSE(
        parse_speculative_config(R"({"method": "ngram", "num_speculative_tokens": 2, "adaptive": false})", tiny())
            .adaptive);
    EXPECT_EQ(refusal(R"({"method": "ngram", "num_speculative_tokens": 2, "adaptive": 1})"),
              "--speculative-config: 'adaptive' must be true or false; got 1");
}

TEST(SpeculativeConfigTest, RefusesBadConfigsInOneSentence) {
    EXPECT_EQ(refusal(R"({"method": "eagle", "num_speculative_tokens": 2})"),
              "--speculative-config: method 'eagle' is not supported: expected \"ngram\" or \"deepseek_mtp\"");
    EXPECT_EQ(refusal(R"({"method": "ngram", "num_speculative_tokens": 0})"),
              "--speculative-config: 'num_speculative_tokens' must be an integer in [1, 16]; got 0");
    EXPECT_EQ(refusal(R"({"method": "ngram", "num_speculative_tokens": 17})"),
              "--speculative-config: 'num_speculative_tokens' must be an integer in [1, 16]; got 17");
    EXPECT_EQ(refusal(R"({"method": "ngram"})"),
              "--speculative-config: 'num_speculative_tokens' is required (an integer in [1, 16])");
    EXPECT_EQ(refusal(R"({"method": "ngram", "num_speculative_tokens": 2, "prompt_lookup_min": 0})"),
              "--speculative-config: 'prompt_lookup_min' must be an integer in [1, 64]; got 0");
    EXPECT_EQ(
        refusal(R"({"method": "ngram", "num_speculative_tokens": 2, "prompt_lookup_min": 3, "prompt_lookup_max": 2})"),
        "--speculative-config: 'prompt_lookup_min' (3) must not exceed 'prompt_lookup_max' (2)");
    EXPECT_EQ(refusal(R"({"method": "ngram", "num_speculative_tokens": 2, "model": "x"})"),
              "--speculative-config: field 'model' is not supported (known: method, num_speculative_tokens, "
              "prompt_lookup_max, prompt_lookup_min, adaptive)");
    EXPECT_EQ(refusal(R"({"num_speculative_tokens": 2})"),
              "--speculative-config: 'method' must be a string: \"ngram\" or \"deepseek_mtp\"");
    EXPECT_EQ(refusal("[1]"), "--speculative-config: expected a JSON object");
    EXPECT_NE(refusal("{").find("--speculative-config: not valid JSON"), std::string::npos);
}

TEST(SpeculativeConfigTest, DeepseekMtpNeedsAnMtpLayer) {
    const std::string mtp = R"({"method": "deepseek_mtp", "num_speculative_tokens": 1})";
    // The tiny generated DeepSeek-V3 has no MTP layer (the generator leaves it out).
    const std::string none = refusal(mtp);
    EXPECT_NE(none.find("method deepseek_mtp needs a checkpoint with an MTP layer"), std::string::npos) << none;
    EXPECT_EQ(none.find('\n'), std::string::npos);
    // The trained one has it (layer 3 of 3): its draft head drafts one token per step.
    const model::ModelSource trained = model::open_model_source(MOESERVE_SOURCE_DIR "/models/deepseek-v3-kjv");
    for (const char* name : {"deepseek_mtp", "mtp"}) {
        const SpeculativeConfig c =
            parse_speculative_config(fmt::format(R"({{"method": "{}", "num_speculative_tokens": 1}})", name), trained);
        EXPECT_EQ(c.method, SpeculativeConfig::Method::kDraftHead) << name;
        EXPECT_EQ(c.num_speculative_tokens, 1);
        EXPECT_TRUE(c.uses_draft_head());
    }
    EXPECT_EQ(refusal(R"({"method": "deepseek_mtp", "num_speculative_tokens": 2})", trained),
              "--speculative-config: method deepseek_mtp drafts 1 token per step (the checkpoint's first MTP layer); "
              "'num_speculative_tokens' is 2: set it to 1");
    EXPECT_EQ(refusal(R"({"method": "deepseek_mtp", "num_speculative_tokens": 1, "prompt_lookup_max": 3})", trained),
              "--speculative-config: 'prompt_lookup_max' is a field of method ngram, not deepseek_mtp");
}

}  // namespace
}  // namespace moeserve::cli
