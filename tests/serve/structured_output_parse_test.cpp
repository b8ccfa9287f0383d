// The structured-output request fields -> GBNF, and their 400 errors (param + path in message).
#include "moeserve/serve/openai/structured_output_parse.h"

#include <gtest/gtest.h>

#include <chrono>

#include "moeserve/serve/openai/parse.h"
#include "moeserve/structured/grammar.h"

namespace moeserve::serve::openai {
namespace {

using Json = nlohmann::ordered_json;

ModelLimits limits() {
    ModelLimits l;
    l.served_model_name = "tiny";
    l.max_model_len = 512;
    l.vocab_size = 1000;
    return l;
}
const ModelLimits kLimits = limits();

std::pair<std::string, std::string> error_of(const char* body) {
    try {
        parse_chat_request(Json::parse(body), kLimits);
    } catch (const ApiError& e) {
        EXPECT_EQ(e.status(), 400);
        return {e.param().value_or(""), e.what()};
    }
    return {"", "no error"};
}

TEST(StructuredOutputParseTest, EveryShapeGivesAGrammar) {
    const char* bodies[] = {
        R"({"messages": [{"role": "user", "content": "x"}], "response_format": {"type": "json_object"}})",
        R"({"messages": [{"role": "user", "content": "x"}], "response_format": {"type": "json_schema", "json_schema": {"name": "a", "strict": true, "schema": {"type": "integer"}}}})",
        R"({"messages": [{"role": "user", "content": "x"}], "guided_json": "{\"type\": \"boolean\"}"})",
        R"({"messages": [{"role": "user", "content": "x"}], "guided_regex": "[ab]+", "guided_decoding_backend": "xgrammar"})",
        R"({"messages": [{"role": "user", "content": "x"}], "guided_choice": ["a", "b"]})",
        R"({"messages": [{"role": "user", "content": "x"}], "guided_grammar": "root ::= \"x\""})",
        R"({"messages": [{"role": "user", "content": "x"}], "structured_outputs": {"json": {"type": "null"}}})",
        R"({"messages": [{"role": "user", "content": "x"}], "structured_outputs": {"choice": ["x"]}})",
    };
    for (const char* b : bodies) {
        const auto r = parse_chat_request(Json::parse(b), kLimits);
        EXPECT_FALSE(r.params.grammar.empty()) << b;
        EXPECT_NO_THROW(structured::parse_gbnf(r.params.grammar)) << r.params.grammar;
    }
    const auto text = parse_chat_request(
        Json::parse(R"({"messages": [{"role": "user", "content": "x"}], "response_format": {"type": "text"}})"),
        kLimits);
    EXPECT_TRUE(text.params.grammar.empty());
    const auto c = parse_completion_request(
        Json::parse(R"({"prompt": "x", "response_format": {"type": "json_object"}})"), kLimits);
    EXPECT_FALSE(c.params.grammar.empty());
}

TEST(StructuredOutputParseTest, ErrorsNameParamAndPath) {
    EXPECT_EQ(
        error_of(R"({"messages": [{"role": "user", "content": "x"}], "response_format": {"type": "bogus"}})"),
        std::make_pair(
            std::string("response_format"),
            std::string("'response_format.type' must be one of 'text', 'json_object', 'json_schema'; got 'bogus'")));
    const auto [param, message] = error_of(
        R"({"messages": [{"role": "user", "content": "x"}], "response_format": {"type": "json_schema", "json_schema": {"name": "a", "schema": {"properties": {"age": {"type": "foo"}}}}}})");
    EXPECT_EQ(param, "response_format");
    EXPECT_EQ(message.rfind("response_format.json_schema.schema.properties.age: unsupported type 'foo'", 0), 0u)
        << message;
    EXPECT_EQ(
        error_of(R"({"messages": [{"role": "user", "content": "x"}], "guided_regex": "(", "guided_choice": ["a"]})")
            .first,
        "guided_choice");
    EXPECT_EQ(error_of(R"({"messages": [{"role": "user", "content": "x"}], "guided_regex": "("})").first,
              "guided_regex");
    EXPECT_EQ(error_of(R"({"messages": [{"role": "user", "content": "x"}], "guided_grammar": "root ::= ("})").first,
              "guided_grammar");
    EXPECT_EQ(error_of(R"({"messages": [{"role": "user", "content": "x"}], "structured_outputs": {"regex": 3}})").first,
              "structured_outputs");
    EXPECT_EQ(error_of(R"({"messages": [{"role": "user", "content": "x"}], "response_format": "json"})").first,
              "response_format");
}

// Hardening 2, item 5: a 3 MB schema took 8.7 s of a worker to refuse. Oversized constraints are
// refused before any conversion, in well under 100 ms; a big but reasonable schema still passes.
TEST(StructuredOutputParseTest, OversizedConstraintsAreRefusedAtOnce) {
    Json values = Json::array();  // (an array: an ordered_json object inserts in linear time)
    for (int i = 0; i < 400000; ++i) values.push_back(1000000 + i);
    Json body = {{"messages", {{{"role", "user"}, {"content", "x"}}}},
                 {"response_format",
                  {{"type", "json_schema"},
                   {"json_schema", {{"name", "big"}, {"schema", {{"type", "integer"}, {"enum", values}}}}}}}};
    EXPECT_GT(body.dump().size(), 3000000u);
    const auto start = std::chrono::steady_clock::now();
    try {
        parse_chat_request(body, kLimits);
        ADD_FAILURE() << "expected a 400";
    } catch (const ApiError& e) {
        EXPECT_EQ(e.status(), 400);
        EXPECT_EQ(e.param(), "response_format");
        EXPECT_NE(std::string(e.what()).find("more than 10000 values"), std::string::npos) << e.what();
    }
    // The conversion it no longer attempts took 8.7 s; parsing the 4 MB body itself stays, so the
    // bound is loose enough for a loaded machine and the sanitizer builds.
    EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(2));
    const std::string long_regex(70000, 'a');
    EXPECT_EQ(
        error_of((R"({"messages": [{"role": "user", "content": "x"}], "guided_regex": ")" + long_regex + "\"}").c_str())
            .first,
        "guided_regex");
    Json props = Json::object();
    for (int i = 0; i < 200; ++i) props["f" + std::to_string(i)] = {{"type", "integer"}};
    body["response_format"]["json_schema"]["schema"] = {{"type", "object"}, {"properties", props}};
    EXPECT_FALSE(parse_chat_request(body, kLimits).params.grammar.empty());
}

}  // namespace
}  // namespace moeserve::serve::openai
