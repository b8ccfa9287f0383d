// POST /v1/responses and GET /v1/responses/{id} (the OpenAI Responses API, as vLLM serves it): a
// request runs as the chat completions request openai/responses.h makes of it, through the same
// generation path; a Responder in between turns the chat answer or stream into the Response
// object or the Responses events, and stores the result for previous_response_id.
#include <fmt/format.h>

#include <mutex>

#include "moeserve/serve/openai/parse.h"
#include "moeserve/serve/openai/responses.h"
#include "moeserve/serve/route_util.h"
#include "moeserve/serve/routes.h"

namespace moeserve::serve {

using openai::ApiError;
using OJson = nlohmann::ordered_json;

namespace {

// Between the chat generation and the client: passes errors on as they are (OpenAI's error
// shape is the same for both APIs) and rewrites a 200 answer or stream.
class ResponsesResponder : public Responder {
public:
    ResponsesResponder(std::shared_ptr<Responder> inner, openai::ResponseHead head, OJson conversation,
                       std::shared_ptr<ResponseStore> store)
        : inner_(std::move(inner)),
          head_(head),
          stream_(std::move(head)),
          conversation_(std::move(conversation)),
          store_(std::move(store)) {}

    void respond(int status, std::string content_type, std::string body) override {
        if (status != 200) return inner_->respond(status, std::move(content_type), std::move(body));
        const OJson chat = OJson::parse(body, nullptr, /*allow_exceptions=*/false);
        const OJson choice =
            chat.is_object() && !chat.value("choices", OJson::array()).empty() ? chat["choices"][0] : OJson::object();
        const OJson message = choice.value("message", OJson::object());
        const OJson response = openai::response_object(head_, message, choice.value("finish_reason", "stop"),
                                                       chat.is_object() ? chat.value("usage", OJson()) : OJson());
        save(response, message);
        inner_->respond(200, std::move(content_type), dump(response));
    }

    void start_stream() override {
        std::lock_guard lock(mutex_);
        inner_->start_stream();
        inner_->send_chunk(stream_.start());
    }

    // The chat stream's events ("data: {...}\n\n", possibly several in one chunk) in order.
    void send_chunk(std::string data) override {
        std::lock_guard lock(mutex_);
        std::string out;
        size_t pos = 0;
        while (pos < data.size()) {
            const size_t end = data.find("\n\n", pos);
            const std::string event = data.substr(pos, end == std::string::npos ? std::string::npos : end - pos);
            pos = end == std::string::npos ? data.size() : end + 2;
            if (event.rfind("data: ", 0) != 0) continue;
            const std::string payload = event.substr(6);
            if (payload == "[DONE]") {
                if (failed_) continue;
                OJson message, response;
                out += stream_.finish(message, response);
                save(response, message);
                continue;
            }
            const OJson chunk = OJson::parse(payload, nullptr, /*allow_exceptions=*/false);
            if (chunk.is_object() && chunk.contains("error")) {
                failed_ = true;
                out += stream_.error(chunk);
            } else if (chunk.is_object()) {
                out += stream_.feed(chunk);
            }
        }
        if (!out.empty()) inner_->send_chunk(std::move(out));
    }

    void end_stream() override { inner_->end_stream(); }
    void on_disconnect(std::function<void()> fn) override { inner_->on_disconnect(std::move(fn)); }
    void note_usage(int64_t prompt_tokens, int64_t completion_tokens) override {
        inner_->note_usage(prompt_tokens, completion_tokens);
    }

private:
    // Keeps the response and its conversation (when the request asked to store it).
    void save(const OJson& response, const OJson& message) {
        if (!head_.echo.value("store", true)) return;
        OJson conversation = conversation_;
        for (const OJson& m : openai::conversation_messages(message)) conversation.push_back(m);
        store_->put(head_.id, {response, std::move(conversation)});
    }

    std::shared_ptr<Responder> inner_;
    openai::ResponseHead head_;
    std::mutex mutex_;
    openai::ResponsesStream stream_;
    OJson conversation_;  // the history and this request's input, as chat messages
    std::shared_ptr<ResponseStore> store_;
    bool failed_ = false;
};

}  // namespace

void Router::responses(const OJson& body, const std::shared_ptr<Responder>& responder) {
    const openai::ResponsesRequest request = openai::parse_responses_request(body);
    OJson history = OJson::array();
    if (request.previous_response_id) history = stored_response(*request.previous_response_id).conversation;
    OJson conversation = history;
    for (const OJson& m : request.input_messages) conversation.push_back(m);
    const openai::ResponseHead head{.id = "resp_" + new_request_id("r").substr(2),
                                    .created_at = unix_seconds(),
                                    .model = config_.limits.served_model_name,
                                    .echo = request.echo,
                                    .previous_response_id = request.previous_response_id};
    generate(openai::chat_request_body(request, history), /*chat=*/true,
             std::make_shared<ResponsesResponder>(responder, head, std::move(conversation), responses_));
}

ResponseStore::Entry Router::stored_response(const std::string& id) const {
    auto entry = responses_->get(id);
    if (!entry) {
        throw ApiError(404,
                       fmt::format("Response with id '{}' not found: it was not stored, or it was evicted (this "
                                   "server keeps the last {} responses, --responses-store-size).",
                                   id, config_.responses_store_size),
                       "invalid_request_error", "previous_response_id", "response_not_found");
    }
    return std::move(*entry);
}

}  // namespace moeserve::serve
