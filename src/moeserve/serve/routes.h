// The OpenAI-compatible routes (DESIGN.md serve/): /v1/completions, /v1/chat/completions,
// /v1/models, /health, /version, /metrics, /tokenize, /detokenize. Turns HTTP requests into
// validated requests, engine requests (token ids) and back into JSON/SSE. Depends on
// tokenizer and ipc (via EngineClient), never on engine or model.
#pragma once

#include <atomic>
#include <memory>
#include <optional>
#include <string>

#include "moeserve/core/log.h"
#include "moeserve/serve/engine_client.h"
#include "moeserve/serve/http_server.h"
#include "moeserve/serve/metrics.h"
#include "moeserve/serve/openai/protocol.h"
#include "moeserve/tokenizer/chat_template/chat_template.h"
#include "moeserve/tokenizer/tokenizer.h"

namespace moeserve::serve {

struct RouterConfig {
    openai::ModelLimits limits;
    std::string api_key;     // empty = no auth; else /v1/* needs "Authorization: Bearer <key>"
    std::string model_path;  // shown as "root" in /v1/models
    std::string version;
    std::vector<int32_t> eos_token_ids;  // finish a request unless ignore_eos (the engine's job)
};

class Router {
public:
    // All references must outlive the router. Parses the tokenizer's chat template (Error if it
    // is malformed; a model without one gets 400 on /v1/chat/completions).
    Router(RouterConfig config, const tokenizer::Tokenizer& tokenizer, EngineClient& engines,
           Metrics& metrics, Logger& logger);
    ~Router();

    // The HttpServer handler. Thread-safe.
    void handle(HttpRequest request, std::shared_ptr<Responder> responder);

    // New generation requests get 503 from now on (SIGTERM drain). Thread-safe.
    void set_draining() { draining_ = true; }

private:
    struct Job;
    void route(const HttpRequest& request, const std::shared_ptr<Responder>& responder);
    void generate(const nlohmann::ordered_json& body, bool chat,
                  const std::shared_ptr<Responder>& responder);
    std::vector<int32_t> chat_prompt(const nlohmann::ordered_json& messages,
                                     bool add_generation_prompt, bool continue_final_message,
                                     const nlohmann::ordered_json& tools,
                                     const nlohmann::ordered_json& kwargs) const;
    void on_output(const std::shared_ptr<Job>& job, size_t choice, const ipc::RequestOutput& out);
    void finish_job(const std::shared_ptr<Job>& job);
    void fail_job(const std::shared_ptr<Job>& job, int status, const std::string& message);
    void reply(const std::shared_ptr<Responder>& responder, int status, std::string content_type,
               std::string body);
    std::string new_request_id(const char* prefix);

    RouterConfig config_;
    const tokenizer::Tokenizer& tokenizer_;
    std::optional<tokenizer::ChatTemplate> chat_template_;
    EngineClient& engines_;
    Metrics& metrics_;
    Logger& logger_;
    std::atomic<bool> draining_{false};
    std::atomic<uint64_t> next_id_{0};
    uint64_t id_salt_;
};

}  // namespace moeserve::serve
