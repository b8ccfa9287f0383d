// Tool-call and reasoning parsers on crafted model outputs (the random-weight test models never
// write them): every split of the text into deltas gives the same result as the whole text at
// once, markers split anywhere included; the forced tool choices; chat history preparation.
#include "moeserve/serve/openai/chat_output.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "moeserve/serve/openai/chat_messages.h"
#include "moeserve/serve/openai/protocol.h"

namespace moeserve::serve::openai {
namespace {

using Json = nlohmann::ordered_json;

struct Folded {
    std::string reasoning, content;
    std::vector<ToolCall> calls;
    int32_t num_name_deltas = 0;
};

// Feeds text in pieces of `step` bytes (0 = all at once) and folds the deltas.
Folded run(const ChatOutputOptions& options, const std::string& text, size_t step) {
    ChatOutput out(options);
    Folded f;
    ToolParseResult calls;
    const auto fold = [&](const ChatDelta& d) {
        f.reasoning += d.reasoning;
        calls.add({d.content, d.tool_calls});
        for (const auto& c : d.tool_calls) {
            if (c.name) {
                ++f.num_name_deltas;
                EXPECT_TRUE(c.id.has_value());  // ours, or the model's own (kimi_k2: functions.NAME:I)
                EXPECT_TRUE(c.id->rfind("call_", 0) == 0 || c.id->rfind("functions.", 0) == 0) << *c.id;
            }
        }
    };
    if (step == 0) {
        fold(out.push(text));
    } else {
        for (size_t i = 0; i < text.size(); i += step) fold(out.push(std::string_view(text).substr(i, step)));
    }
    fold(out.finish());
    f.content = calls.content;
    f.calls = calls.calls;
    return f;
}

// The result must not depend on how the text was split.
Folded run_all_splits(const ChatOutputOptions& options, const std::string& text) {
    const Folded whole = run(options, text, 0);
    for (size_t step : {1, 2, 3, 5, 7, 13}) {
        const Folded split = run(options, text, step);
        EXPECT_EQ(split.reasoning, whole.reasoning) << "step " << step;
        EXPECT_EQ(split.content, whole.content) << "step " << step;
        EXPECT_EQ(split.num_name_deltas, whole.num_name_deltas) << "step " << step;
        EXPECT_EQ(split.calls.size(), whole.calls.size()) << "step " << step;
        for (size_t i = 0; i < std::min(split.calls.size(), whole.calls.size()); ++i) {
            EXPECT_EQ(split.calls[i].name, whole.calls[i].name) << "step " << step;
            EXPECT_EQ(split.calls[i].arguments, whole.calls[i].arguments) << "step " << step;
        }
    }
    return whole;
}

ToolRequest auto_tools() {
    ToolRequest t;
    t.tools = Json::parse(R"([{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object",
        "properties": {"city": {"type": "string"}}, "required": ["city"]}}}])");
    t.choice = ToolRequest::Choice::kAuto;
    return t;
}

TEST(ToolParserTest, HermesCallsAfterContent) {
    const ToolRequest tools = auto_tools();
    const ChatOutputOptions o{std::nullopt, ReasoningParser::Start::kOpen, &tools, "hermes"};
    const Folded f =
        run_all_splits(o,
                       "Let me check.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris "
                       "\\\"}\"}}\n</tool_call>\n"
                       "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Oslo\"}}\n</tool_call>");
    EXPECT_EQ(f.content, "Let me check.\n");
    ASSERT_EQ(f.calls.size(), 2u);
    EXPECT_EQ(f.calls[0].name, "get_weather");
    EXPECT_EQ(Json::parse(f.calls[0].arguments), Json::parse(R"({"city": "Paris \"}"})"));
    EXPECT_EQ(Json::parse(f.calls[1].arguments)["city"], "Oslo");
    EXPECT_EQ(f.num_name_deltas, 2);
}

TEST(ToolParserTest, HermesWithoutCallsAndMalformedCalls) {
    const ToolRequest tools = auto_tools();
    const ChatOutputOptions o{std::nullopt, ReasoningParser::Start::kOpen, &tools, "hermes"};
    EXPECT_EQ(run_all_splits(o, "a < b and <tool is not a call").content, "a < b and <tool is not a call");
    const Folded bad = run_all_splits(o, "x <tool_call>not json</tool_call>");
    EXPECT_EQ(bad.content, "x <tool_call>not json");
    EXPECT_TRUE(bad.calls.empty());
    // An unclosed call at the end (max_tokens) is parsed as far as it is valid.
    const Folded open = run_all_splits(o, "<tool_call>{\"name\": \"get_weather\", \"arguments\": {}}");
    ASSERT_EQ(open.calls.size(), 1u);
    EXPECT_EQ(open.calls[0].arguments, "{}");
}

TEST(ToolParserTest, DeepSeekV3Calls) {
    const ToolRequest tools = auto_tools();
    const ChatOutputOptions o{std::nullopt, ReasoningParser::Start::kOpen, &tools, "deepseek_v3"};
    const Folded f = run_all_splits(o,
                                    "Sure.<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_"
                                    "weather\n```json\n{\"city\": \"Paris\"}\n```"
                                    "<｜tool▁call▁end｜>\n<｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n```"
                                    "json\n{\"city\": \"Rome\"}\n```"
                                    "<｜tool▁call▁end｜><｜tool▁calls▁end｜>");
    EXPECT_EQ(f.content, "Sure.");
    ASSERT_EQ(f.calls.size(), 2u);
    EXPECT_EQ(f.calls[0].name, "get_weather");
    EXPECT_EQ(f.calls[0].arguments, "{\"city\": \"Paris\"}");
    EXPECT_EQ(f.calls[1].arguments, "{\"city\": \"Rome\"}");
    // The later DeepSeek form: NAME<sep>ARGS.
    const Folded v31 =
        run_all_splits(o,
                       "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>get_weather<｜tool▁sep｜>{\"city\": \"Oslo\"}"
                       "<｜tool▁call▁end｜><｜tool▁calls▁end｜>");
    ASSERT_EQ(v31.calls.size(), 1u);
    EXPECT_EQ(v31.calls[0].name, "get_weather");
    EXPECT_EQ(v31.calls[0].arguments, "{\"city\": \"Oslo\"}");
    EXPECT_EQ(v31.content, "");
}

TEST(ToolParserTest, KimiK2Calls) {
    const ToolRequest tools = auto_tools();
    const ChatOutputOptions o{std::nullopt, ReasoningParser::Start::kOpen, &tools, "kimi_k2"};
    const Folded f =
        run_all_splits(o,
                       "I will look.<|tool_calls_section_begin|>\n<|tool_call_begin|>functions.get_weather:0"
                       "<|tool_call_argument_begin|>{\"city\": \"Paris\"}<|tool_call_end|>\n<|tool_call_begin|>"
                       "functions.get_weather:1<|tool_call_argument_begin|> {\"city\": \"Rome\"} <|tool_call_end|>"
                       "<|tool_calls_section_end|>");
    EXPECT_EQ(f.content, "I will look.");
    ASSERT_EQ(f.calls.size(), 2u);
    EXPECT_EQ(f.calls[0].id, "functions.get_weather:0");
    EXPECT_EQ(f.calls[0].name, "get_weather");
    EXPECT_EQ(f.calls[0].arguments, "{\"city\": \"Paris\"}");
    EXPECT_EQ(f.calls[1].id, "functions.get_weather:1");
    EXPECT_EQ(f.calls[1].arguments, "{\"city\": \"Rome\"}");
    // Cut off at max_tokens inside the arguments: the call as far as it went.
    const Folded open = run_all_splits(o, "<|tool_call_begin|>functions.get_weather:0<|tool_call_argument_begin|>{\"c");
    ASSERT_EQ(open.calls.size(), 1u);
    EXPECT_EQ(open.calls[0].arguments, "{\"c");
    EXPECT_EQ(run_all_splits(o, "no <|tool call here").content, "no <|tool call here");
}

TEST(ToolParserTest, Glm45CallsTypedByTheSchema) {
    ToolRequest tools;
    tools.tools = Json::parse(R"([{"type": "function", "function": {"name": "book", "parameters": {"type": "object",
        "properties": {"city": {"type": "string"}, "nights": {"type": "integer"}, "code": {"type": "string"},
                       "extras": {"type": "object"}}}}}])");
    tools.choice = ToolRequest::Choice::kAuto;
    const ChatOutputOptions o{std::nullopt, ReasoningParser::Start::kOpen, &tools, "glm45"};
    const Folded f = run_all_splits(o,
                                    "Booking.\n<tool_call>book\n<arg_key>city</arg_key>\n<arg_value>Paris</arg_value>\n"
                                    "<arg_key>nights</arg_key>\n<arg_value>3</arg_value>\n<arg_key>code</arg_key>\n"
                                    "<arg_value>007</arg_value>\n<arg_key>extras</arg_key>\n<arg_value>{\"bed\": "
                                    "\"twin\"}</arg_value>\n</tool_call>\n<tool_call>book\n</tool_call>");
    EXPECT_EQ(f.content, "Booking.\n");
    ASSERT_EQ(f.calls.size(), 2u);
    EXPECT_EQ(f.calls[0].name, "book");
    EXPECT_EQ(Json::parse(f.calls[0].arguments),
              Json::parse(R"({"city": "Paris", "nights": 3, "code": "007", "extras": {"bed": "twin"}})"));
    EXPECT_EQ(f.calls[1].arguments, "{}");
    EXPECT_EQ(f.num_name_deltas, 2);
}

TEST(ReasoningParserTest, Qwen3AndDeepSeekR1) {
    const ChatOutputOptions qwen{ReasoningParser::Format::kQwen3, ReasoningParser::Start::kOpen};
    Folded f = run_all_splits(qwen, "<think>\nweigh it\n</think>\n\nThe answer.");
    EXPECT_EQ(f.reasoning, "\nweigh it\n");
    EXPECT_EQ(f.content, "\n\nThe answer.");
    f = run_all_splits(qwen, "No thinking here.");  // Qwen3 opens <think> itself when it thinks
    EXPECT_EQ(f.reasoning, "");
    EXPECT_EQ(f.content, "No thinking here.");
    // The template opened <think> (R1, thinking-only Qwen3): reasoning from the first byte.
    const ChatOutputOptions opened{ReasoningParser::Format::kQwen3, ReasoningParser::Start::kReasoning};
    f = run_all_splits(opened, "hmm</think>done");
    EXPECT_EQ(f.reasoning, "hmm");
    EXPECT_EQ(f.content, "done");
    // enable_thinking false: the template closed it; everything is content.
    const ChatOutputOptions closed{ReasoningParser::Format::kQwen3, ReasoningParser::Start::kContent};
    EXPECT_EQ(run_all_splits(closed, "<think>x</think>y").content, "<think>x</think>y");
    // R1 starts thinking without <think>; never closed stays reasoning.
    const ChatOutputOptions r1{ReasoningParser::Format::kDeepSeekR1, ReasoningParser::Start::kOpen};
    f = run_all_splits(r1, "step 1, step 2");
    EXPECT_EQ(f.reasoning, "step 1, step 2");
    EXPECT_EQ(f.content, "");
    f = run_all_splits(r1, "<think>a</think>b");
    EXPECT_EQ(f.reasoning, "a");
    EXPECT_EQ(f.content, "b");
    EXPECT_EQ(ReasoningParser::start_of("<|im_start|>assistant\n<think>\n"), ReasoningParser::Start::kReasoning);
    EXPECT_EQ(ReasoningParser::start_of("assistant\n<think>\n\n</think>\n\n"), ReasoningParser::Start::kContent);
    EXPECT_EQ(ReasoningParser::start_of("<|im_start|>assistant\n"), ReasoningParser::Start::kOpen);
}

TEST(ReasoningParserTest, ReasoningThenToolCalls) {
    const ToolRequest tools = auto_tools();
    const ChatOutputOptions o{ReasoningParser::Format::kQwen3, ReasoningParser::Start::kOpen, &tools, "hermes"};
    const Folded f = run_all_splits(o,
                                    "<think>need weather</think>\n\n<tool_call>\n{\"name\": \"get_weather\", "
                                    "\"arguments\": {\"city\": \"Lima\"}}\n</tool_call>");
    EXPECT_EQ(f.reasoning, "need weather");
    EXPECT_EQ(f.content, "\n\n");
    ASSERT_EQ(f.calls.size(), 1u);
    EXPECT_EQ(Json::parse(f.calls[0].arguments)["city"], "Lima");
}

TEST(ToolChoiceTest, ParseAndForcedShapes) {
    const auto parse = [](const std::string& body) { return parse_tool_request(Json::parse(body)); };
    const std::string tools =
        R"("tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "object",
        "properties": {"x": {"type": "integer"}}, "required": ["x"]}}}, {"type": "function", "function": {"name": "g"}}])";
    EXPECT_EQ(parse("{" + tools + "}").choice, ToolRequest::Choice::kAuto);
    EXPECT_EQ(parse("{}").choice, ToolRequest::Choice::kNone);
    const auto status = [&](const std::string& body) {
        try {
            parse(body);
        } catch (const ApiError& e) {
            return e.status();
        }
        return 200;
    };
    EXPECT_EQ(status("{" + tools + R"(, "tool_choice": "bogus"})"), 400);
    EXPECT_EQ(status("{" + tools + R"(, "tool_choice": {"type": "function", "function": {"name": "nope"}}})"), 400);
    EXPECT_EQ(status(R"({"tool_choice": "required"})"), 400);
    EXPECT_EQ(status(R"({"tools": [{"type": "function", "function": {}}]})"), 400);

    const ToolRequest named =
        parse("{" + tools + R"(, "tool_choice": {"type": "function", "function": {"name": "f"}}})");
    ASSERT_EQ(named.choice, ToolRequest::Choice::kNamed);
    EXPECT_FALSE(forced_tool_grammar(named).empty());
    Folded f = run_all_splits({std::nullopt, ReasoningParser::Start::kOpen, &named, ""}, "{\"x\": 3}");
    ASSERT_EQ(f.calls.size(), 1u);
    EXPECT_EQ(f.calls[0].name, "f");
    EXPECT_EQ(f.calls[0].arguments, "{\"x\": 3}");

    const ToolRequest required = parse("{" + tools + R"(, "tool_choice": "required", "parallel_tool_calls": false})");
    EXPECT_FALSE(forced_tool_grammar(required).empty());
    f = run_all_splits({std::nullopt, ReasoningParser::Start::kOpen, &required, ""},
                       R"([{"name": "f", "parameters": {"x": 1}}, {"name": "g", "parameters": {}}])");
    ASSERT_EQ(f.calls.size(), 2u);
    EXPECT_EQ(f.calls[1].name, "g");
    EXPECT_EQ(Json::parse(f.calls[0].arguments)["x"], 1);
}

TEST(ChatMessagesTest, HistoryAsVllmPreparesIt) {
    const Json m = Json::parse(R"([
        {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}], "extra": 1},
        {"role": "assistant", "content": null, "tool_calls": [{"id": "call_1", "type": "function",
            "function": {"name": "f", "arguments": {"x": 1}}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "42"},
        {"role": "assistant", "tool_calls": [{"id": "call_2", "function": {"name": "f", "arguments": "{\"x\": 2}"}}]}])");
    const Json p = prepare_chat_messages(&m);
    EXPECT_EQ(p[0], Json::parse(R"({"role": "user", "content": "a\nb"})"));
    EXPECT_EQ(p[1]["content"], "");
    EXPECT_EQ(p[1]["tool_calls"][0]["function"]["arguments"], "{\"x\":1}");
    EXPECT_EQ(p[2]["tool_call_id"], "call_1");
    EXPECT_EQ(p[3]["tool_calls"][0]["function"]["arguments"], "{\"x\": 2}");
    EXPECT_TRUE(has_tool_calls_without_content(m));
    EXPECT_TRUE(prepare_chat_messages(&m, NullContent::kKeepWithToolCalls)[1]["content"].is_null());
    // For templates that apply tojson to them (gpt-oss's), object arguments stay objects.
    const Json objects = prepare_chat_messages(&m, NullContent::kEmpty, ToolArguments::kObject);
    EXPECT_EQ(objects[1]["tool_calls"][0]["function"]["arguments"], Json::parse(R"({"x": 1})"));
    EXPECT_EQ(objects[3]["tool_calls"][0]["function"]["arguments"], Json::parse(R"({"x": 2})"));
    // An assistant turn's reasoning is also `thinking` (gpt-oss's template reads that).
    const Json reasoning = Json::parse(R"([{"role": "user", "content": "q"},
        {"role": "assistant", "content": "a", "reasoning_content": "r"},
        {"role": "assistant", "content": "b", "thinking": "t"}])");
    const Json prepared = prepare_chat_messages(&reasoning);
    EXPECT_EQ(prepared[1]["thinking"], "r");
    EXPECT_EQ(prepared[1]["reasoning_content"], "r");
    EXPECT_EQ(prepared[2]["thinking"], "t");
    EXPECT_FALSE(prepared[0].contains("thinking"));
    // Not beside a tool-call turn's content (gpt-oss's template refuses both; the content renders).
    const Json preamble = Json::parse(R"([{"role": "assistant", "content": "Checking.", "reasoning_content": "r",
        "tool_calls": [{"id": "c", "function": {"name": "f", "arguments": "{}"}}]}])");
    EXPECT_FALSE(prepare_chat_messages(&preamble)[0].contains("thinking"));
    const Json broken =
        Json::parse(R"([{"role": "assistant", "tool_calls": [{"function": {"name": "f", "arguments": "{"}}]}])");
    try {
        prepare_chat_messages(&broken);
        FAIL() << "no error";
    } catch (const ApiError& e) {
        EXPECT_EQ(e.status(), 400);
        EXPECT_NE(std::string(e.what()).find("messages[0].tool_calls[0].function.arguments"), std::string::npos)
            << e.what();
    }
}

}  // namespace
}  // namespace moeserve::serve::openai
