// The messages between the API server and the engine cores (docs/architecture.md, "Processes"): plain
// structs, token ids only (never text). codec.h turns them into msgpack bytes; channel.h moves
// them over ZeroMQ. The engine and the server both see these types, nothing of each other.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <variant>
#include <vector>

namespace moeserve::ipc {

using TokenId = int32_t;

// What the engine needs to sample one sequence. Text-level options (stop strings,
// skip_special_tokens, include_stop_str_in_output) stay in the server; n > 1 is fanned out by
// the server into n requests that share the prompt's KV blocks through prefix caching. The
// engine trusts these values: every AddRequest is made by validate_request()
// (request_validation.h) at the boundary that built it.
struct SamplingParams {
    float temperature = 1.0f;  // 0 = greedy
    float top_p = 1.0f;
    int32_t top_k = 0;  // 0 or -1 = off
    float min_p = 0.0f;
    float presence_penalty = 0.0f;
    float frequency_penalty = 0.0f;
    float repetition_penalty = 1.0f;
    std::optional<uint64_t> seed;  // per-request reproducible stream when set
    int32_t max_tokens = 16;
    int32_t min_tokens = 0;  // no stop token before this many
    // Every token that finishes the request: the client's stop_token_ids plus the model's EOS set
    // unless it asked for ignore_eos (validate_request merges them); the engine knows no other EOS.
    std::vector<TokenId> stop_token_ids;
    std::optional<int32_t> logprobs;         // top-k logprobs per sampled token (0 = sampled only)
    std::optional<int32_t> prompt_logprobs;  // top-k logprobs per prompt token
    // Structured outputs: a GBNF grammar (structured/grammar.h) the output must match; empty =
    // unconstrained. The server converts JSON Schema / regex / choices into it.
    std::string grammar;
    // The grammar applies only once the output ends with these tokens (a reasoning model's end of
    // thinking, e.g. `</think>`); empty = from the first token.
    std::vector<TokenId> grammar_after_token_ids;
    // Logit processors (vLLM's names), applied after logprobs are taken: the bias added to each
    // listed token; when allowed_token_ids is non-empty every other token is excluded; a bad word
    // (token sequence) has its last token excluded wherever the output ends with the rest of it.
    std::vector<std::pair<TokenId, float>> logit_bias;
    std::vector<TokenId> allowed_token_ids;
    std::vector<std::vector<TokenId>> bad_words_token_ids;
    // Prefix-cache namespace: requests share cached blocks only with requests of the same salt.
    std::string cache_salt;
};

// PD disaggregation (docs/parallelism.md): a request's part in a KV transfer between instances.
struct KvTransferParams {
    // Producer (prefill instance): after its first token the request keeps its prompt's KV
    // blocks for a consumer to fetch (RequestOutput::kv_transfer_endpoint says where).
    bool produce = false;
    // Consumer (decode instance): the prompt's KV and first token come from this producer
    // (tcp://host:port) under that id instead of being computed here. Empty = compute locally.
    std::string remote_endpoint{};
    std::string remote_transfer_id{};
    bool consumes() const { return !remote_endpoint.empty(); }
};

struct AddRequest {
    std::string request_id;
    std::vector<TokenId> prompt_token_ids;
    SamplingParams sampling;
    int32_t priority = 0;  // --scheduling-policy priority: lower runs first (vLLM's)
    KvTransferParams kv_transfer{};
    // The API server that added it (--api-server-count): its outputs go back to that server only
    // (client_routing.h). 0 with one API server.
    int32_t client_index = 0;
};

struct Abort {
    std::vector<std::string> request_ids;
};

enum class FinishReason : uint8_t { kNone, kStop, kLength, kAbort, kError };

// OpenAI's and vLLM's names of the reasons (finish_reason, the finished_reason metric label);
// kNone (not finished) has no name: "".
constexpr const char* finish_reason_name(FinishReason r) {
    switch (r) {
        case FinishReason::kStop:
            return "stop";
        case FinishReason::kLength:
            return "length";
        case FinishReason::kAbort:
            return "abort";
        case FinishReason::kError:
            return "error";
        case FinishReason::kNone:
            break;
    }
    return "";
}
constexpr FinishReason kFinishReasons[] = {FinishReason::kStop, FinishReason::kLength, FinishReason::kAbort,
                                           FinishReason::kError};

// Log-probabilities at one position: the chosen token's, then the top-k (descending).
struct TokenLogprobs {
    TokenId token_id = 0;
    float logprob = 0;
    int32_t rank = 0;  // 1 = most likely
    std::vector<std::pair<TokenId, float>> top;
};

// What one request produced in one engine step (only requests that produced something).
struct RequestOutput {
    std::string request_id;
    std::vector<TokenId> new_token_ids;
    std::vector<TokenLogprobs> new_logprobs;                    // when sampling.logprobs is set
    std::optional<std::vector<TokenLogprobs>> prompt_logprobs;  // once, with the first output
    FinishReason finish_reason = FinishReason::kNone;
    std::optional<TokenId> stop_token_id;  // the stop/EOS token that finished it
    int32_t num_prompt_tokens = 0;
    int32_t num_cached_tokens = 0;  // prompt tokens served from the prefix cache
    std::string error;              // when finish_reason == kError
    double queue_seconds = 0;       // in the engine's queue before its first step (every output)
    // Set by the API server's own client, never sent: the error is the server's load (a queue
    // timeout), not a failure of the engine (HTTP 503 rather than 500).
    bool overloaded = false;
    // A producer request's announcement (sent before its prefill starts) and final output: where
    // a consumer fetches its KV (tcp://host:port); the transfer id is request_id.
    std::string kv_transfer_endpoint{};
};

// Load and health of one engine core, sent with every StepOutputs and on request.
struct Stats {
    int32_t engine_index = 0;
    int32_t num_running = 0;
    int32_t num_waiting = 0;
    float kv_cache_usage = 0;           // used blocks / usable blocks
    int64_t prefix_cache_queries = 0;   // tokens looked up (cumulative)
    int64_t prefix_cache_hits = 0;      // tokens found (cumulative)
    int64_t num_preemptions = 0;        // cumulative
    int64_t num_steps = 0;              // cumulative
    int64_t num_prefill_steps = 0;      // cumulative, steps that ran any prompt tokens
    int64_t num_decode_steps = 0;       // cumulative, steps that ran only decode tokens
    int64_t num_dummy_steps = 0;        // cumulative (PD hybrid / DP lock-step)
    int64_t num_prompt_tokens = 0;      // cumulative tokens computed for prompts
    int64_t num_generation_tokens = 0;  // cumulative tokens sampled
    // DP lock-step / PD hybrid (engine/dp_coordinator.h), cumulative; zero without a coordinator.
    int64_t num_dummy_prefill_steps = 0;
    int64_t num_dummy_decode_steps = 0;
    int64_t num_guard_decode_steps = 0;       // decode steps forced by the starvation guard
    int64_t num_decode_requests_stalled = 0;  // sum over prefill steps of decodes kept waiting
    double dp_control_seconds = 0;            // in the per-step DP control collective
    double forward_seconds = 0;               // in forwards, MoE collectives included
    // Tokens computed per step (vLLM's vllm:iteration_tokens_total): steps per bucket of
    // kIterationTokenBuckets (last = more), cumulative, and their sum.
    std::vector<int64_t> iteration_token_steps;
    int64_t iteration_tokens_sum = 0;
    // Per-step time breakdown of this engine (cumulative seconds, every step, DP or not):
    double step_schedule_seconds = 0;  // Scheduler::schedule (admission, block allocation)
    double step_prepare_seconds = 0;   // ForwardBatch: token ids, positions, slot mapping, block tables
    double step_forward_seconds = 0;   // Model::forward (lm_head of the sampled rows included)
    double step_sample_seconds = 0;    // logits -> tokens (penalties, logprobs, grammar masks, sampling)
    double step_update_seconds = 0;    // Scheduler::update (outputs, stop checks, frees)
    double step_output_seconds = 0;    // encoding and sending StepOutputs to the API server (IPC)
    // PD disaggregation (engine/kv_transfer/), cumulative unless said otherwise; zero without
    // --kv-transfer-config. Producer: KV sent to decode instances; consumer: KV fetched.
    int64_t kv_sent_bytes = 0, kv_sent_transfers = 0, kv_expired_transfers = 0;
    double kv_send_seconds = 0;
    int64_t kv_received_bytes = 0, kv_received_transfers = 0, kv_failed_transfers = 0;
    double kv_receive_seconds = 0;    // fetch request to last block written
    double kv_wait_seconds = 0;       // a request's admission to its KV being complete
    int32_t kv_held_transfers = 0;    // now: producer requests holding blocks for a consumer
    int32_t kv_waiting_requests = 0;  // now: consumer requests waiting for their KV
    // Speculative decoding (--speculative-config), cumulative: decodes that carried drafts, their
    // drafted tokens, the drafts accepted, and per draft position [0, k) the drafts accepted there.
    int64_t spec_num_drafts = 0, spec_num_draft_tokens = 0, spec_num_accepted_tokens = 0;
    std::vector<int64_t> spec_num_accepted_tokens_per_pos;
    int32_t spec_draft_budget = 0;  // now: tokens a sequence may draft in a step (DraftBudget)
    // EPLB (--enable-eplb; model/eplb/expert_load_stats.h): at the last placement decision, each
    // EP rank's routed tokens over the window and max/mean (0 before the first); cumulative
    // decisions, completed rebalances and moved expert slots.
    std::vector<int64_t> eplb_rank_load;
    double eplb_imbalance = 0;
    int64_t eplb_decisions = 0, eplb_rebalances = 0, eplb_moved_experts = 0;
};

// Upper bounds of the iteration-token buckets (vLLM's, without the CUDA-graph sizes).
inline constexpr int32_t kIterationTokenBuckets[] = {1, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384};

struct StepOutputs {
    int32_t engine_index = 0;
    std::vector<RequestOutput> outputs;
    Stats stats;
};

// An engine with several API servers stops once every one of them has sent Shutdown.
struct Shutdown {
    int32_t client_index = 0;  // the sender, as AddRequest::client_index
};
struct HealthCheck {};
// A restarted API server (--api-server-count; its parent started it again after it died) says so
// before it takes requests: the engine aborts what the dead process had added (nobody waits for
// those outputs), forgets its Shutdown, and answers with a HealthReply to this server alone.
struct ClientStarted {
    int32_t client_index = 0;
};
struct HealthReply {
    int32_t engine_index = 0;
    bool healthy = true;
    std::string detail;
    // Not healthy but coming back: the engine's rank group is re-forming (self-healing). Its
    // running requests failed (their outputs came before this); its waiting ones stay queued.
    bool recovering = false;
};

// Server -> engine.
using ClientMessage = std::variant<AddRequest, Abort, HealthCheck, Shutdown, ClientStarted>;
// Engine -> server.
using EngineMessage = std::variant<StepOutputs, HealthReply>;

}  // namespace moeserve::ipc
