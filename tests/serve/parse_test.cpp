// OpenAI request parsing: accepted shapes, defaults, and the 400/404 errors with the offending
// parameter named. The sampling values and token ids are ipc::validate_request's rules
// (tests/ipc/request_validation_test.cpp); parsing lets them through.
#include "moeserve/serve/openai/parse.h"

#include <gtest/gtest.h>

#include "moeserve/serve/openai/chat_messages.h"

namespace moeserve::serve::openai {
namespace {

const ModelLimits kLimits{"tiny", 64, 1000};

int status_of(const std::string& body, bool chat = false, std::string* param = nullptr) {
    try {
        const auto j = parse_body(body);
        if (chat)
            parse_chat_request(j, kLimits);
        else
            parse_completion_request(j, kLimits);
    } catch (const ApiError& e) {
        if (param) *param = e.param().value_or("");
        return e.status();
    }
    return 200;
}

std::string message_of(const std::string& body) {
    try {
        parse_body(body);
    } catch (const ApiError& e) {
        return e.message();
    }
    return "";
}

TEST(ParseBodyTest, ShapeIsBoundedBeforeTheBodyIsBuilt) {
    std::string wide = "{";
    for (int i = 0; i < 4097; ++i) wide += (i ? ",\"k" : "\"k") + std::to_string(i) + "\":1";
    wide += "}";
    EXPECT_EQ(message_of(wide), "A JSON object in the body has more than 4096 members.");
    // Colons in strings and members of sibling objects do not count; arrays may be long.
    std::string ok = R"({"a": ")" + std::string(10000, ':') + R"(", "b": [)";
    for (int i = 0; i < 3000; ++i) ok += R"({"x": 1, "y": 2},)";
    ok += "1]}";
    EXPECT_EQ(message_of(ok), "");
    EXPECT_EQ(message_of(std::string(65, '[') + std::string(65, ']')), "The JSON body nests deeper than 64 levels.");
    EXPECT_EQ(message_of(R"({"a": "\"{{{"})"), "");  // an escaped quote does not end the string
}

TEST(ParseTest, PromptForms) {
    auto r = parse_completion_request(parse_body(R"({"prompt": "hi"})"), kLimits);
    EXPECT_EQ(r.prompts.size(), 1u);
    EXPECT_EQ(*r.prompts[0].text, "hi");
    EXPECT_EQ(r.model, "tiny");
    r = parse_completion_request(parse_body(R"({"prompt": ["a", "b"]})"), kLimits);
    EXPECT_EQ(r.prompts.size(), 2u);
    r = parse_completion_request(parse_body(R"({"prompt": [1, 2, 3]})"), kLimits);
    EXPECT_EQ(r.prompts[0].token_ids, (std::vector<TokenId>{1, 2, 3}));
    r = parse_completion_request(parse_body(R"({"prompt": [[1], [2, 3]], "n": 2})"), kLimits);
    EXPECT_EQ(r.prompts.size(), 2u);
    EXPECT_EQ(r.params.n, 2);
}

TEST(ParseTest, ExtrasAndDefaults) {
    const auto r = parse_completion_request(
        parse_body(
            R"({"prompt": "x", "top_k": -1, "min_p": 0.1, "repetition_penalty": 1.1, "ignore_eos": true,
            "min_tokens": 2, "max_tokens": 8.0, "skip_special_tokens": false, "stop": "\n",
            "include_stop_str_in_output": true, "stream": true, "stream_options": {"include_usage": true},
            "seed": 7, "logprobs": 3, "user": "u"})"),
        kLimits);
    EXPECT_EQ(r.params.top_k, -1);
    EXPECT_FLOAT_EQ(r.params.min_p, 0.1f);
    EXPECT_TRUE(r.params.ignore_eos);
    EXPECT_EQ(r.params.max_tokens, 8);
    EXPECT_FALSE(r.params.skip_special_tokens);
    EXPECT_EQ(r.params.stop, std::vector<std::string>{"\n"});
    EXPECT_TRUE(r.params.include_usage);
    EXPECT_EQ(r.params.seed, std::optional<uint64_t>(7));
    EXPECT_EQ(r.params.logprobs, 3);
    EXPECT_EQ(resolve_max_tokens(10, r.params, kLimits, false), 8);
    GenerationParams defaults;
    EXPECT_EQ(resolve_max_tokens(10, defaults, kLimits, false), 16);
    EXPECT_EQ(resolve_max_tokens(10, defaults, kLimits, true), 54);
}

TEST(ParseTest, ChatLogprobs) {
    const auto r = parse_chat_request(
        parse_body(
            R"({"messages": [{"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]}],
            "logprobs": true, "top_logprobs": 2, "max_completion_tokens": 5})"),
        kLimits);
    EXPECT_EQ(r.params.logprobs, 2);
    EXPECT_EQ(r.params.max_tokens, 5);
    EXPECT_EQ(prepare_chat_messages(&r.messages)[0]["content"], "a\nb");
}

// reasoning_effort reaches the chat template as a variable (gpt-oss's "Reasoning: high"), unless
// chat_template_kwargs names it already; other values are a 400.
TEST(ParseTest, ReasoningEffortIsATemplateVariable) {
    const std::string head = R"({"messages": [{"role": "user", "content": "x"}], )";
    auto r = parse_chat_request(parse_body(head + R"("reasoning_effort": "high"})"), kLimits);
    EXPECT_EQ(r.chat_template_kwargs["reasoning_effort"], "high");
    EXPECT_TRUE(r.unknown_fields.empty());
    r = parse_chat_request(
        parse_body(head + R"("reasoning_effort": "low", "chat_template_kwargs": {"reasoning_effort": "medium"}})"),
        kLimits);
    EXPECT_EQ(r.chat_template_kwargs["reasoning_effort"], "medium");
    r = parse_chat_request(parse_body(head + R"("reasoning_effort": null})"), kLimits);
    EXPECT_FALSE(r.chat_template_kwargs.contains("reasoning_effort"));
    std::string param;
    EXPECT_EQ(status_of(head + R"("reasoning_effort": "max"})", true, &param), 400);
    EXPECT_EQ(param, "reasoning_effort");
}

TEST(ParseTest, UnknownFieldsAreListedNotRefused) {
    const auto r = parse_completion_request(parse_body(R"({"prompt": "x", "whatever": 1, "audio": null})"), kLimits);
    EXPECT_EQ(r.unknown_fields, (std::vector<std::string>{"whatever", "audio"}));
    // Known fields keep their checks.
    std::string param;
    EXPECT_EQ(status_of(R"({"prompt": "x", "logit_bias": "xx"})", false, &param), 400);
    EXPECT_EQ(param, "logit_bias");
    EXPECT_EQ(status_of(R"({"prompt": "x", "stream": true, "stream_options": {"bogus": 1}})", false, &param), 400);
    EXPECT_EQ(param, "bogus");
}

// Ignoring these would answer something other than what was asked (issue 34): true is a 400
// naming the field, false changes nothing; both endpoints.
TEST(ParseTest, OutputChangingSwitchesAreRefused) {
    for (const bool chat : {false, true}) {
        const std::string head = chat ? R"({"messages": [{"role": "user", "content": "x"}], )" : R"({"prompt": "x", )";
        for (const std::string key : {"use_beam_search", "return_tokens_as_token_ids"}) {
            std::string param;
            EXPECT_EQ(status_of(head + "\"" + key + "\": true}", chat, &param), 400) << key;
            EXPECT_EQ(param, key);
            EXPECT_EQ(status_of(head + "\"" + key + "\": false}", chat), 200) << key;
        }
    }
}

TEST(ParseTest, LogitsProcessorsAndVllmExtras) {
    const auto r = parse_completion_request(parse_body(R"({"prompt": "x", "logit_bias": {"5": 150, "7": -3.5},
        "allowed_token_ids": [5, 7, 9], "bad_words": ["no"], "prompt_logprobs": 2, "truncate_prompt_tokens": 3,
        "cache_salt": "s", "request_id": "abc"})"),
                                            kLimits);
    const auto& p = r.params;
    EXPECT_EQ(p.logit_bias, (std::vector<std::pair<TokenId, float>>{{5, 100.0f}, {7, -3.5f}}));  // clamped
    EXPECT_EQ(p.allowed_token_ids, (std::vector<TokenId>{5, 7, 9}));
    EXPECT_EQ(p.bad_words, std::vector<std::string>{"no"});
    EXPECT_EQ(p.prompt_logprobs, 2);
    EXPECT_EQ(p.truncate_prompt_tokens, 3);
    EXPECT_EQ(p.cache_salt, "s");
    EXPECT_EQ(p.request_id, "abc");
    std::string param;
    EXPECT_EQ(status_of(R"({"prompt": "x", "logit_bias": {"x": 1}})", false, &param), 400);
    EXPECT_EQ(status_of(R"({"prompt": "x", "logit_bias": {"-1": 1}})", false, &param), 400);
    EXPECT_EQ(param, "logit_bias");
    EXPECT_EQ(status_of(R"({"prompt": "x", "logit_bias": {"999999": 1}})"), 200);  // the vocabulary: validate_request
    EXPECT_EQ(status_of(R"({"prompt": "x", "allowed_token_ids": []})", false, &param), 400);
    EXPECT_EQ(param, "allowed_token_ids");
    // echo with max_tokens 0 (lm-eval loglikelihood) is allowed; without echo it is not.
    EXPECT_EQ(parse_completion_request(parse_body(R"({"prompt": "x", "echo": true, "max_tokens": 0, "logprobs": 1})"),
                                       kLimits)
                  .params.max_tokens,
              0);
    EXPECT_EQ(status_of(R"({"prompt": "x", "max_tokens": 0})", false, &param), 400);
}

TEST(ParseTest, ErrorsNameTheParameter) {
    std::string param;
    EXPECT_EQ(status_of(R"({"prompt": "x", "max_tokens": 0})", false, &param), 400);
    EXPECT_EQ(param, "max_tokens");
    EXPECT_EQ(status_of(R"({"prompt": "x", "temperature": -0.5})"), 200);  // a value rule: validate_request
    EXPECT_EQ(status_of(R"({"prompt": "x", "max_tokens": "3"})", false, &param), 400);
    EXPECT_EQ(param, "max_tokens");
    EXPECT_EQ(status_of(R"({"prompt": [-1]})", false, &param), 400);
    EXPECT_EQ(param, "prompt");
    EXPECT_EQ(status_of(R"({"prompt": [5000]})"), 200);  // out of the vocabulary: validate_request
    EXPECT_EQ(status_of(R"({"prompt": "x", "model": "other"})", false, &param), 404);
    EXPECT_EQ(status_of(R"({"prompt": "x", "stream_options": {"include_usage": true}})"), 400);
    EXPECT_EQ(status_of(R"({"messages": []})", true), 400);
    EXPECT_EQ(status_of(R"({"messages": [{"role": "user", "content": 5}]})", true), 400);
    EXPECT_EQ(status_of(R"({"messages": [{"content": "x"}]})", true), 400);
    EXPECT_EQ(status_of("not json"), 400);
    EXPECT_EQ(status_of("[]"), 400);
    EXPECT_EQ(status_of(std::string(100, '[')), 400);
    EXPECT_EQ(status_of(R"({"prompt": "x", "n": 1e300})"), 400);
    EXPECT_EQ(status_of(R"({"prompt": "x", "seed": 18446744073709551615})"), 400);
    GenerationParams p;
    p.max_tokens = 60;
    EXPECT_EQ(resolve_max_tokens(10, p, kLimits, false), 60);  // too long: validate_request says so
    EXPECT_EQ(resolve_max_tokens(70, GenerationParams{}, kLimits, true), 1);
}

}  // namespace
}  // namespace moeserve::serve::openai
