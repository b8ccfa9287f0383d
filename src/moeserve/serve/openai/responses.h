// The OpenAI Responses API (POST /v1/responses, as vLLM serves it) on top of chat completions: a
// request becomes the chat completions request that runs it (instructions, the stored history of
// previous_response_id, the input items, tools, text.format); the chat answer becomes a Response
// object, and a chat stream becomes the Responses events. Pure JSON; the route
// (serve/responses_route.cpp) runs the chat request and keeps the store.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "moeserve/serve/openai/render.h"

namespace moeserve::serve::openai {

struct ResponsesRequest {
    std::optional<std::string> previous_response_id;
    bool stream = false;
    bool store = true;
    OJson input_messages = OJson::array();  // the input as chat messages (no instructions)
    OJson chat;                             // the chat completions body, without "messages" yet
    OJson echo;                             // fields a Response repeats: instructions, tools, tool_choice, ...
};

// Parses and checks a Responses request (400 naming the field otherwise).
ResponsesRequest parse_responses_request(const OJson& body);

// chat with its messages: system(instructions), then `history` (the stored conversation of
// previous_response_id, chat messages), then the input.
OJson chat_request_body(const ResponsesRequest& request, const OJson& history);

// What a Response repeats besides its output: id, created_at, model and the request's echo.
struct ResponseHead {
    std::string id;  // "resp_..."
    int64_t created_at = 0;
    std::string model;
    OJson echo;
    std::optional<std::string> previous_response_id;
};

// The Response of a finished chat answer: message (content, reasoning_content, tool_calls),
// finish_reason, usage as the chat API reports them.
OJson response_object(const ResponseHead& head, const OJson& message, const std::string& finish_reason,
                      const OJson& usage);
// The chat messages the answer adds to the conversation (for a later previous_response_id).
OJson conversation_messages(const OJson& message);

// Turns a chat completions stream (its chunks, in order) into Responses events
// ("event: TYPE\ndata: {...}\n\n", each with its sequence_number). Not thread-safe.
class ResponsesStream {
public:
    explicit ResponsesStream(ResponseHead head) : head_(std::move(head)) {}
    std::string start();                        // response.created, response.in_progress
    std::string feed(const OJson& chat_chunk);  // the events of one chunk (usage chunks: none)
    // The closing events and response.completed (or response.incomplete); `message` gets what the
    // stream said as a chat message and `response` the final Response object (for the store).
    std::string finish(OJson& message, OJson& response);
    std::string error(const OJson& error_body);  // an "error" event

private:
    enum class Kind { kNone, kReasoning, kText, kCall };
    std::string event(const char* type, OJson fields);
    std::string open(Kind kind, const OJson& call = nullptr);
    std::string close();
    OJson item(bool done) const;

    ResponseHead head_;
    int64_t sequence_ = 0;
    Kind kind_ = Kind::kNone;
    int output_index_ = -1;
    std::string text_;  // the open item's text (reasoning, output text or arguments)
    OJson call_;        // the open call: id, name
    OJson message_ = {{"role", "assistant"}, {"content", ""}};
    std::string finish_reason_ = "stop";
    OJson usage_ = nullptr;
};

}  // namespace moeserve::serve::openai
