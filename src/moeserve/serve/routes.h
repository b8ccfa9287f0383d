// The OpenAI-compatible routes (docs/architecture.md, "The request path through the API server"): /v1/completions,
// /v1/chat/completions, /v1/responses, /v1/models, /health, /version, /metrics, /tokenize, /detokenize. Turns HTTP
// requests into validated requests, engine requests (token ids) and back into JSON/SSE. routes.cpp dispatches and
// checks access; generate_route.cpp runs the generation requests. Depends on tokenizer and ipc (via EngineClient),
// never on engine or model.
#pragma once

#include <atomic>
#include <memory>
#include <mutex>
#include <set>
#include <optional>
#include <string>

#include "moeserve/core/log.h"
#include "moeserve/ipc/request_validation.h"
#include "moeserve/serve/engine_client.h"
#include "moeserve/serve/access_policy.h"
#include "moeserve/serve/http_server.h"
#include "moeserve/serve/metrics.h"
#include "moeserve/serve/openai/protocol.h"
#include "moeserve/serve/openai/reasoning_parser.h"
#include "moeserve/serve/response_store.h"
#include "moeserve/serve/stream.h"
#include "moeserve/serve/work_queue.h"
#include "moeserve/tokenizer/chat_template/chat_template.h"
#include "moeserve/tokenizer/tokenizer.h"

namespace moeserve::serve {

// Sampling defaults of the model's generation_config.json (--generation-config), used where a
// request leaves the field out, as vLLM does. max_tokens (max_new_tokens) is capped by the room
// the prompt leaves.
struct GenerationDefaults {
    std::optional<float> temperature, top_p, min_p, repetition_penalty;
    std::optional<int32_t> top_k, max_tokens;
};

struct RouterConfig {
    openai::ModelLimits limits;
    AccessPolicyConfig access;          // Host, Origin, API key, JSON bodies (access_policy.h)
    int max_choices_per_request = 256;  // prompts x n of one request; more is a 400
    std::string chat_template;          // overrides the tokenizer's (--chat-template); empty = its own
    std::string root_path;              // a path prefix a proxy may leave on requests (--root-path)
    // --enable-log-requests (vLLM's, off by default): a line per prompt as it arrives (id, prompt
    // cut to max_log_len code points / ids, sampling params; serve/request_log.h) and one per
    // finished request (reason, tokens, TTFT, e2e). max_log_len < 0: no cut (--max-log-len unset).
    bool log_requests = false;
    int max_log_len = -1;
    // The access log (access_log.h): one line per answered request; off with
    // --disable-uvicorn-access-log.
    bool access_log = true;
    // POST /v1/responses: the responses kept for previous_response_id and GET /v1/responses/{id}
    // (--responses-store-size; the oldest evicted first; 0 = none kept).
    size_t responses_store_size = 1024;
    GenerationDefaults generation_defaults;
    int num_workers = 4;     // threads that parse, render and tokenize (WorkQueue)
    std::string model_path;  // shown as "root" in /v1/models
    std::string version;
    // The model's EOS set (cli::model_eos_token_ids): ipc::validate_request adds it to each
    // engine request's stop_token_ids unless the request asks for ignore_eos.
    std::vector<int32_t> eos_token_ids;
    // Tool calls for tool_choice auto (--enable-auto-tool-choice --tool-call-parser NAME); empty:
    // auto is refused as vLLM does. Reasoning split (--reasoning-parser); none: content only.
    std::string tool_call_parser;
    bool priority_scheduling = false;  // --scheduling-policy priority: requests' `priority` is honoured
    std::optional<openai::ReasoningParser::Format> reasoning_format;
    // PD disaggregation (--kv-transfer-config): whether requests may ask this instance for the
    // prefill half (kv_producer, kv_both) or the decode half (kv_consumer, kv_both).
    bool kv_producer = false, kv_consumer = false;
    // The deployment's rank-plane key when either is set: signs (producer) and checks (consumer)
    // the transfers' tokens (ipc::kv_transfer_token).
    std::string kv_transfer_key;
};

class Router {
public:
    // All references must outlive the router. Parses the chat template (config.chat_template, else
    // the tokenizer's; Error if it is malformed; a model without one gets 400 on /v1/chat/completions).
    Router(RouterConfig config, const tokenizer::Tokenizer& tokenizer, EngineClient& engines, Metrics& metrics,
           Logger& logger);
    ~Router();

    // The HttpServer handler. Thread-safe.
    void handle(HttpRequest request, std::shared_ptr<Responder> responder);
    // The HttpServer's header check (before a body is read): the access policy. Thread-safe.
    std::optional<HttpError> check_head(const HttpRequest& head) const {
        return access_.check_head(head, route_path(head.target));
    }

    // New generation requests get 503 from now on (SIGTERM drain). Thread-safe.
    void set_draining() { draining_ = true; }

private:
    struct Job;
    void route(HttpRequest& request, const std::shared_ptr<Responder>& responder);
    // /health and /ping: 200, or 503 saying why (an engine recovering, dead, starting or stalled).
    void reply_health(const std::shared_ptr<Responder>& responder);
    void reply_models(const std::string& path, const std::shared_ptr<Responder>& responder);
    void tokenize(const nlohmann::ordered_json& body, const std::shared_ptr<Responder>& responder);
    // Runs fn, answering its ApiError / Error / other exception as an OpenAI-shaped error.
    template <typename F>
    void guarded(const HttpRequest& request, const std::shared_ptr<Responder>& responder, F&& fn);
    // Runs fn on a worker thread (guarded), off the I/O thread.
    template <typename F>
    void defer(HttpRequest request, std::shared_ptr<Responder> responder, F fn);
    std::string route_path(const std::string& target) const;  // without query and --root-path
    // encode(), after refusing a text too long to fit max_model_len in any tokenization.
    std::vector<int32_t> encode_prompt(const std::string& text, bool add_special_tokens, const char* param) const;
    // POST /v1/completions and /v1/chat/completions: parse (parse_*_request, check_request_rules),
    // prepare (prepare_engine_requests), submit.
    void generate(const nlohmann::ordered_json& body, bool chat, const std::shared_ptr<Responder>& responder);
    struct Prompts;
    // ApiError 400 when prompts x n exceeds --max-choices-per-request.
    void check_fan_out(size_t num_prompts, int32_t n) const;
    // The request's fields into job (params, tools, echo) and its prompts as token ids.
    Prompts parse_chat_request(const nlohmann::ordered_json& body, Job& job);
    Prompts parse_completion_request(const nlohmann::ordered_json& body, Job& job);
    // What this server refuses (priority without priority scheduling, KV transfers it does not
    // serve or did not issue); the client's request_id; truncate_prompt_tokens.
    void check_request_rules(Job& job, Prompts& prompts) const;
    // The engine requests of every (prompt, n), with the model's generation defaults where the
    // request is silent; job.choices gets one entry per engine request, in the same order.
    std::vector<ipc::AddRequest> prepare_engine_requests(const nlohmann::ordered_json& body, Job& job, Prompts prompts,
                                                         const std::string& engine_base);
    // Hands the engine requests over (a stream starts first); 503 when no engine takes them.
    void submit(const std::shared_ptr<Job>& job, std::vector<ipc::AddRequest> adds);
    // POST /v1/responses (responses_route.cpp): runs as a chat request, answered as the Responses API.
    void responses(const nlohmann::ordered_json& body, const std::shared_ptr<Responder>& responder);
    // The stored response `id`; ApiError 404 naming the store's size when it is not there.
    ResponseStore::Entry stored_response(const std::string& id) const;
    struct ChatPromptInput {
        const nlohmann::ordered_json* messages;  // as the client sent them (validated)
        bool add_generation_prompt = true, continue_final_message = false, add_special_tokens = false;
        nlohmann::ordered_json tools;   // rendered when a non-empty list
        nlohmann::ordered_json kwargs;  // chat_template_kwargs
        std::string chat_template;      // the request's own template; empty = the server's
    };
    struct ChatPrompt {
        std::vector<int32_t> ids;
        std::string text;  // as rendered (where it leaves the model: reasoning parsers)
    };
    // The history prepared as vLLM does, rendered and tokenized.
    ChatPrompt chat_prompt(const ChatPromptInput& input) const;
    // One engine output of choice c: an error fails the job; otherwise its new text, logprobs and
    // chat parts go out (a stream chunk) or are gathered (the answer), and the last one finishes it.
    void on_output(const std::shared_ptr<Job>& job, size_t choice, const ipc::RequestOutput& out);
    struct OutputPiece;
    void on_engine_error(const std::shared_ptr<Job>& job, size_t choice, const ipc::RequestOutput& out);
    // A streamed producer request: once every choice knows where its KV waits, an event names
    // the transfers, so the decode half may start fetching while this prompt runs.
    void send_kv_transfer_params(Job& job);
    // What an output of choice c adds to the answer: prompt entries, the delta, its chat parts.
    OutputPiece output_piece(const Job& job, size_t choice, ChoiceStream::Delta delta) const;
    void send_chunk(Job& job, size_t choice, OutputPiece piece, bool first);  // streamed
    static void gather(Job& job, size_t choice, OutputPiece piece);           // the whole answer
    void finish_choice(const std::shared_ptr<Job>& job, size_t choice);
    // vLLM's field: what the decode half of a producer request passes back as its kv_transfer_params.
    nlohmann::ordered_json kv_transfer_params(const Job& job) const;
    nlohmann::ordered_json prompt_logprobs_json(const std::vector<ipc::TokenLogprobs>& entries) const;
    // Logs each request field nobody knows once per server (vLLM accepts them with a warning).
    void warn_unknown_fields(const std::vector<std::string>& fields, const char* route);
    void finish_job(const std::shared_ptr<Job>& job);
    void fail_job(const std::shared_ptr<Job>& job, int status, const std::string& message, const char* code);
    void reply(const std::shared_ptr<Responder>& responder, int status, std::string content_type, std::string body);
    std::string new_request_id(const char* prefix);

    RouterConfig config_;
    AccessPolicy access_;
    ipc::RequestLimits request_limits_;  // from config_: what validate_request checks each engine request against
    const tokenizer::Tokenizer& tokenizer_;
    std::optional<tokenizer::ChatTemplate> chat_template_;
    bool template_wants_argument_objects_ = false;  // chat_template_'s tool-call arguments (chat_messages.h)
    EngineClient& engines_;
    Metrics& metrics_;
    Logger& logger_;
    std::atomic<bool> draining_{false};
    std::atomic<uint64_t> next_id_{0};
    uint64_t id_salt_;
    size_t max_prompt_bytes_ = 0;  // no text longer than this fits in max_model_len tokens
    std::mutex warned_mutex_;
    std::set<std::string> warned_fields_;
    std::shared_ptr<ResponseStore> responses_;  // shared with the Responses answers in flight
    WorkQueue workers_;                         // last: its threads stop before the rest is destroyed
};

}  // namespace moeserve::serve
