// validate_request, the one owner of a request's rules: each bound with the field it names, the
// EOS set merged into the stop ids (once) unless ignore_eos, and the EOS set's sources in order.
#include "moeserve/ipc/request_validation.h"

#include <gtest/gtest.h>

#include <functional>
#include <limits>

namespace moeserve::ipc {
namespace {

const RequestLimits kLimits{.max_model_len = 64, .vocab_size = 1000, .max_logprobs = 5, .eos_token_ids = {2, 7}};

AddRequest ok() {
    AddRequest a;
    a.request_id = "r";
    a.prompt_token_ids = {5, 6, 7};
    a.sampling.max_tokens = 10;
    return a;
}

// The field validate_request names for raw, or "" when it passes.
std::string broken(const std::function<void(AddRequest&)>& change, bool ignore_eos = false) {
    AddRequest a = ok();
    change(a);
    try {
        validate_request(a, ignore_eos, kLimits);
    } catch (const InvalidRequest& e) {
        EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
        return e.param();
    }
    return "";
}

TEST(RequestValidationTest, EachBoundNamesItsField) {
    EXPECT_EQ(broken([](AddRequest&) {}), "");
    EXPECT_EQ(broken([](AddRequest& a) { a.prompt_token_ids.clear(); }), "prompt");
    EXPECT_EQ(broken([](AddRequest& a) { a.prompt_token_ids = {5, 1000}; }), "prompt");
    EXPECT_EQ(broken([](AddRequest& a) { a.prompt_token_ids = {-1}; }), "prompt");
    EXPECT_EQ(broken([](AddRequest& a) { a.sampling.max_tokens = 0; }), "max_tokens");
    EXPECT_EQ(broken([](AddRequest& a) { a.sampling.max_tokens = 62; }), "prompt");  // 3 + 62 > 64
    EXPECT_EQ(broken([](AddRequest& a) { a.sampling.max_tokens = 61; }), "");        // 3 + 61 fill it
    EXPECT_EQ(broken([](AddRequest& a) { a.sampling.min_tokens = -1; }), "min_tokens");
    EXPECT_EQ(broken([](AddRequest& a) { a.sampling.min_tokens = 11; }), "min_tokens");
    EXPECT_EQ(broken([](AddRequest& a) { a.sampling.min_tokens = 10; }), "");
    EXPECT_EQ(broken([](AddRequest& a) { a.sampling.temperature = -0.1f; }), "temperature");
    EXPECT_EQ(broken([](AddRequest& a) { a.sampling.temperature = std::numeric_limits<float>::quiet_NaN(); }),
              "temperature");
    EXPECT_EQ(broken([](AddRequest& a) { a.sampling.temperature = 0; }), "");
    EXPECT_EQ(broken([](AddRequest& a) { a.sampling.top_p = 0; }), "top_p");
    EXPECT_EQ(broken([](AddRequest& a) { a.sampling.top_p = 1.01f; }), "top_p");
    EXPECT_EQ(broken([](AddRequest& a) { a.sampling.top_k = -2; }), "top_k");
    EXPECT_EQ(broken([](AddRequest& a) { a.sampling.top_k = -1; }), "");
    EXPECT_EQ(broken([](AddRequest& a) { a.sampling.min_p = -0.1f; }), "min_p");
    EXPECT_EQ(broken([](AddRequest& a) { a.sampling.min_p = 1.5f; }), "min_p");
    EXPECT_EQ(broken([](AddRequest& a) { a.sampling.presence_penalty = 2.5f; }), "presence_penalty");
    EXPECT_EQ(broken([](AddRequest& a) { a.sampling.presence_penalty = -2.0f; }), "");
    EXPECT_EQ(broken([](AddRequest& a) { a.sampling.frequency_penalty = -2.5f; }), "frequency_penalty");
    EXPECT_EQ(broken([](AddRequest& a) { a.sampling.repetition_penalty = 0; }), "repetition_penalty");
    EXPECT_EQ(broken([](AddRequest& a) { a.sampling.repetition_penalty = 2.5f; }), "repetition_penalty");
    EXPECT_EQ(broken([](AddRequest& a) { a.sampling.logprobs = 6; }), "logprobs");
    EXPECT_EQ(broken([](AddRequest& a) { a.sampling.logprobs = 5; }), "");
    EXPECT_EQ(broken([](AddRequest& a) { a.sampling.logprobs = -1; }), "logprobs");
    EXPECT_EQ(broken([](AddRequest& a) { a.sampling.prompt_logprobs = 6; }), "prompt_logprobs");
    EXPECT_EQ(broken([](AddRequest& a) { a.sampling.stop_token_ids = {1000}; }), "stop_token_ids");
    EXPECT_EQ(broken([](AddRequest& a) { a.sampling.logit_bias = {{1000, 1.0f}}; }), "logit_bias");
    EXPECT_EQ(broken([](AddRequest& a) {
                  a.sampling.logit_bias = {{3, std::numeric_limits<float>::infinity()}};
              }),
              "logit_bias");
    EXPECT_EQ(broken([](AddRequest& a) { a.sampling.allowed_token_ids = {3, -4}; }), "allowed_token_ids");
    EXPECT_EQ(broken([](AddRequest& a) { a.sampling.bad_words_token_ids = {{3}, {4, 1000}}; }), "bad_words");
    EXPECT_EQ(broken([](AddRequest& a) { a.sampling.grammar_after_token_ids = {1000}; }), "response_format");
}

TEST(RequestValidationTest, TheMessageSaysWhatWasWrong) {
    AddRequest a = ok();
    a.sampling.max_tokens = 70;
    try {
        validate_request(a, false, kLimits);
        FAIL() << "not refused";
    } catch (const InvalidRequest& e) {
        EXPECT_EQ(e.param(), "prompt");
        EXPECT_NE(std::string(e.what()).find("maximum context length is 64 tokens"), std::string::npos) << e.what();
        EXPECT_NE(std::string(e.what()).find("73 tokens (3 in the prompt, 70 in the completion)"), std::string::npos)
            << e.what();
    }
}

TEST(RequestValidationTest, StopIdsGainTheEosSetOnceUnlessIgnoreEos) {
    AddRequest a = ok();
    a.sampling.stop_token_ids = {9, 7, 9};  // 7 is also an EOS id
    const AddRequest with_eos = validate_request(a, false, kLimits);
    EXPECT_EQ(with_eos.sampling.stop_token_ids, (std::vector<TokenId>{9, 7, 2}));
    const AddRequest ignoring = validate_request(a, true, kLimits);
    EXPECT_EQ(ignoring.sampling.stop_token_ids, (std::vector<TokenId>{9, 7}));
    EXPECT_EQ(validate_request(ok(), true, kLimits).sampling.stop_token_ids, std::vector<TokenId>{});
    EXPECT_EQ(validate_request(ok(), false, kLimits).sampling.stop_token_ids, (std::vector<TokenId>{2, 7}));
    // Everything else passes through unchanged.
    EXPECT_EQ(with_eos.request_id, "r");
    EXPECT_EQ(with_eos.prompt_token_ids, a.prompt_token_ids);
    EXPECT_EQ(with_eos.sampling.max_tokens, 10);
}

TEST(RequestValidationTest, EosSetIsConfigThenTokenizerThenGenerationConfigEachOnce) {
    const std::vector<TokenId> config = {151645};
    const std::vector<TokenId> generation = {151643, 151645};  // generation_config.json's list
    EXPECT_EQ(eos_token_set(config, 151645, generation), (std::vector<TokenId>{151645, 151643}));
    EXPECT_EQ(eos_token_set(config, 151643, {}), (std::vector<TokenId>{151645, 151643}));
    EXPECT_EQ(eos_token_set({}, std::nullopt, generation), (std::vector<TokenId>{151643, 151645}));
    EXPECT_EQ(eos_token_set(std::vector<TokenId>{1, 2}, 3, std::vector<TokenId>{4}),
              (std::vector<TokenId>{1, 2, 3, 4}));
    EXPECT_TRUE(eos_token_set({}, std::nullopt, {}).empty());
}

}  // namespace
}  // namespace moeserve::ipc
