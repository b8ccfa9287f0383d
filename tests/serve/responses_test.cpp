// The Responses API over chat (issue 34 item 6): requests become the chat request that runs them
// (instructions, history, input items, tools, text.format), chat answers and streams become the
// Response object and its events, and the store evicts its oldest entry.
#include "moeserve/serve/openai/responses.h"

#include <gtest/gtest.h>

#include "moeserve/serve/response_store.h"

namespace moeserve::serve::openai {
namespace {

std::string param_of(const OJson& body) {
    try {
        parse_responses_request(body);
    } catch (const ApiError& e) {
        return e.param().value_or("?");
    }
    return "";
}

TEST(ResponsesTest, RequestBecomesAChatRequest) {
    const OJson body = OJson::parse(R"({"model": "m", "instructions": "Be brief", "max_output_tokens": 7,
        "temperature": 0, "input": [
          {"role": "user", "content": "hi"},
          {"type": "message", "role": "developer", "content": [{"type": "input_text", "text": "rules"}]},
          {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}"},
          {"type": "function_call", "call_id": "c2", "name": "g", "arguments": "{\"a\":1}"},
          {"type": "function_call_output", "call_id": "c1", "output": "sunny"},
          {"type": "reasoning", "id": "rs_1", "summary": []}],
        "tools": [{"type": "function", "name": "f", "parameters": {"type": "object"}}],
        "tool_choice": {"type": "function", "name": "f"},
        "text": {"format": {"type": "json_schema", "name": "x", "schema": {"type": "object"}, "strict": true}}})");
    const ResponsesRequest r = parse_responses_request(body);
    const OJson history = OJson::array({{{"role", "user"}, {"content", "before"}}});
    const OJson chat = chat_request_body(r, history);
    EXPECT_EQ(chat["model"], "m");
    EXPECT_EQ(chat["max_tokens"], 7);
    EXPECT_EQ(chat["temperature"], 0);
    const OJson& m = chat["messages"];
    ASSERT_EQ(m.size(), 6u) << m.dump();
    EXPECT_EQ(m[0], (OJson{{"role", "system"}, {"content", "Be brief"}}));
    EXPECT_EQ(m[1]["content"], "before");
    EXPECT_EQ(m[3]["role"], "system");  // developer
    EXPECT_EQ(m[3]["content"], OJson::parse(R"([{"type": "text", "text": "rules"}])"));
    EXPECT_EQ(m[4]["tool_calls"].size(), 2u);  // two calls in a row: one assistant message
    EXPECT_EQ(m[4]["tool_calls"][1]["function"]["arguments"], "{\"a\":1}");
    EXPECT_EQ(m[5], (OJson{{"role", "tool"}, {"tool_call_id", "c1"}, {"content", "sunny"}}));
    EXPECT_EQ(chat["tools"][0]["function"]["name"], "f");
    EXPECT_EQ(chat["tool_choice"], OJson::parse(R"({"type": "function", "function": {"name": "f"}})"));
    EXPECT_EQ(chat["response_format"]["json_schema"]["name"], "x");
    EXPECT_FALSE(chat.contains("stream"));
    EXPECT_EQ(r.input_messages.size(), 4u);  // what is stored: no instructions, no history
}

TEST(ResponsesTest, ReasoningEffortReachesTheChatRequest) {
    const ResponsesRequest r =
        parse_responses_request(OJson::parse(R"({"input": "hi", "reasoning": {"effort": "high"}})"));
    EXPECT_EQ(r.chat["reasoning_effort"], "high");
    EXPECT_FALSE(parse_responses_request(OJson::parse(R"({"input": "hi", "reasoning": {"effort": null}})"))
                     .chat.contains("reasoning_effort"));
}

TEST(ResponsesTest, RefusalsNameTheField) {
    EXPECT_EQ(param_of(OJson::parse(R"({})")), "input");
    EXPECT_EQ(param_of(OJson::parse(R"({"input": 3})")), "input");
    EXPECT_EQ(param_of(OJson::parse(R"({"input": [{"role": "user", "content": [{"type": "input_image"}]}]})")),
              "input[0].content");
    EXPECT_EQ(param_of(OJson::parse(R"({"input": [{"type": "web_search_call"}]})")), "input[0].type");
    EXPECT_EQ(param_of(OJson::parse(R"({"input": "x", "tools": [{"type": "web_search"}]})")), "tools");
    EXPECT_EQ(param_of(OJson::parse(R"({"input": "x", "background": true})")), "background");
    EXPECT_EQ(param_of(OJson::parse(R"({"input": "x", "text": {"format": {"type": "yaml"}}})")), "text.format");
    EXPECT_EQ(param_of(OJson::parse(R"({"input": "x", "background": false, "stream": true})")), "");
}

TEST(ResponsesTest, ChatAnswerBecomesAResponse) {
    const ResponseHead head{
        .id = "resp_ab", .created_at = 5, .model = "m", .echo = {{"store", true}}, .previous_response_id = "resp_prev"};
    const OJson message = OJson::parse(R"({"role": "assistant", "content": "hello", "reasoning_content": "think",
        "tool_calls": [{"id": "call_1", "type": "function", "function": {"name": "f", "arguments": "{}"}}]})");
    const OJson usage = OJson::parse(R"({"prompt_tokens": 4, "completion_tokens": 6, "total_tokens": 10})");
    const OJson r = response_object(head, message, "length", usage);
    EXPECT_EQ(r["status"], "incomplete");
    EXPECT_EQ(r["incomplete_details"]["reason"], "max_output_tokens");
    EXPECT_EQ(r["previous_response_id"], "resp_prev");
    ASSERT_EQ(r["output"].size(), 3u);
    EXPECT_EQ(r["output"][0]["type"], "reasoning");
    EXPECT_EQ(r["output"][1]["content"][0]["text"], "hello");
    EXPECT_EQ(r["output"][1]["id"], "msg_ab");
    EXPECT_EQ(r["output"][2]["call_id"], "call_1");
    EXPECT_EQ(r["usage"]["total_tokens"], 10);
    const OJson conv = conversation_messages(message);
    ASSERT_EQ(conv.size(), 1u);
    EXPECT_EQ(conv[0]["tool_calls"][0]["id"], "call_1");
}

// Every event names its type twice (SSE event line, JSON type) and carries the next sequence
// number; the deltas add up to the final text, and the final response is the non-stream one.
TEST(ResponsesTest, StreamEventsInOrder) {
    ResponsesStream s(
        {.id = "resp_x", .created_at = 1, .model = "m", .echo = OJson::object(), .previous_response_id = std::nullopt});
    std::string all = s.start();
    all += s.feed(OJson::parse(R"({"choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]})"));
    all += s.feed(OJson::parse(R"({"choices": [{"index": 0, "delta": {"content": "Hel"}}]})"));
    all += s.feed(OJson::parse(R"({"choices": [{"index": 0, "delta": {"content": "lo"}}]})"));
    all += s.feed(OJson::parse(R"({"choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, "id": "call_9",
        "type": "function", "function": {"name": "f", "arguments": ""}}]}}]})"));
    all += s.feed(OJson::parse(R"({"choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0,
        "function": {"arguments": "{\"a\":"}}]}}]})"));
    all += s.feed(OJson::parse(R"({"choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0,
        "function": {"arguments": "1}"}}]}, "finish_reason": "tool_calls"}]})"));
    all += s.feed(OJson::parse(R"({"choices": [], "usage": {"prompt_tokens": 2, "completion_tokens": 3}})"));
    OJson message, response;
    all += s.finish(message, response);
    std::vector<std::string> types;
    int64_t expected = 0;
    for (size_t pos = 0; pos < all.size();) {
        const size_t end = all.find("\n\n", pos);
        const std::string ev = all.substr(pos, end - pos);
        pos = end + 2;
        const std::string type = ev.substr(7, ev.find('\n') - 7);
        const OJson data = OJson::parse(ev.substr(ev.find("data: ") + 6));
        EXPECT_EQ(data["type"], type);
        EXPECT_EQ(data["sequence_number"], expected++) << type;
        types.push_back(type);
    }
    const std::vector<std::string> want = {"response.created",
                                           "response.in_progress",
                                           "response.output_item.added",
                                           "response.content_part.added",
                                           "response.output_text.delta",
                                           "response.output_text.delta",
                                           "response.output_text.done",
                                           "response.content_part.done",
                                           "response.output_item.done",
                                           "response.output_item.added",
                                           "response.function_call_arguments.delta",
                                           "response.function_call_arguments.delta",
                                           "response.function_call_arguments.done",
                                           "response.output_item.done",
                                           "response.completed"};
    EXPECT_EQ(types, want);
    EXPECT_EQ(message["content"], "Hello");
    EXPECT_EQ(message["tool_calls"][0]["function"]["arguments"], "{\"a\":1}");
    EXPECT_EQ(response["output"][1]["arguments"], "{\"a\":1}");
    EXPECT_EQ(response["usage"]["output_tokens"], 3);
}

TEST(ResponsesTest, StoreEvictsTheOldest) {
    ResponseStore store(2);
    store.put("a", {OJson{{"id", "a"}}, OJson::array()});
    store.put("b", {OJson{{"id", "b"}}, OJson::array()});
    store.put("c", {OJson{{"id", "c"}}, OJson::array()});
    EXPECT_FALSE(store.get("a"));
    EXPECT_EQ(store.get("c")->response["id"], "c");
    ResponseStore none(0);
    none.put("a", {});
    EXPECT_FALSE(none.get("a"));
}

}  // namespace
}  // namespace moeserve::serve::openai
