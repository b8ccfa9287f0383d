// Request: the engine's state of one sequence (token ids only, never text), owned by the
// Scheduler from add_request until it finishes. Depends on core, ipc and structured only.
#pragma once

#include <algorithm>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "moeserve/core/rng.h"
#include "moeserve/ipc/messages.h"
#include "moeserve/structured/matcher.h"

namespace moeserve::engine {

using TokenId = int32_t;
using ipc::FinishReason;

enum class RequestStatus { kWaiting, kRunning, kPreempted, kFinished };

// The token sequence is prompt + outputs. KV of tokens [0, num_computed_tokens) is in the cache
// at block_ids; a step computes the next chunk, and when the chunk reaches num_tokens() the
// sampler appends one output token. After a preemption num_computed_tokens is 0 again and the
// request recomputes prompt + outputs (recompute preemption), keeping its outputs.
struct Request {
    Request(std::string id, std::vector<TokenId> prompt, const ipc::SamplingParams& params, uint64_t rng_seed,
            int64_t order)
        : request_id(std::move(id)),
          prompt_token_ids(std::move(prompt)),
          sampling(params),
          rng(rng_seed),
          arrival_order(order) {}

    std::string request_id;
    std::vector<TokenId> prompt_token_ids;
    std::vector<TokenId> output_token_ids;
    ipc::SamplingParams sampling;
    Rng rng;                    // per-request stream: seeded from sampling.seed when set
    int64_t arrival_order = 0;  // FCFS position among all requests this engine has seen
    int32_t priority = 0;       // lower first under SchedulingOrder::kPriority

    RequestStatus status = RequestStatus::kWaiting;
    int32_t num_computed_tokens = 0;  // tokens whose KV is in the cache
    int32_t num_cached_tokens = -1;   // prompt tokens hit in the prefix cache (first admission)
    double added_at = 0;              // steady seconds when the engine got it
    double queue_seconds = 0;         // added_at to its first admission
    int32_t num_preemptions = 0;
    std::vector<int32_t> block_ids;      // block table: block i holds tokens [i*bs, (i+1)*bs)
    std::vector<uint64_t> block_hashes;  // hashes of the full blocks of the token sequence so far

    std::unordered_map<TokenId, int32_t> output_token_counts;  // for presence/frequency penalties
    std::vector<ipc::TokenLogprobs> prompt_logprobs;           // collected until the first output
    bool prompt_logprobs_sent = false;
    // Speculative decoding with a draft head (MTP): what it proposed for the tokens after
    // position head_drafts_at - 1, at the last step that sampled this request (stale once the
    // sequence has another length).
    std::vector<TokenId> head_drafts;
    int32_t head_drafts_at = -1;

    // PD disaggregation: produce = keep the prompt's KV for a decode instance after the first
    // token; consumes() = the prompt's KV and first token come from a prefill instance.
    ipc::KvTransferParams kv_transfer;
    bool fetching = false;       // its remote KV is being written into block_ids
    bool abort_pending = false;  // aborted while fetching: its blocks are freed once the fetch stops

    FinishReason finish_reason = FinishReason::kNone;
    std::optional<TokenId> stop_token_id;
    std::string error;  // set before admission: the request is rejected with it

    // Structured outputs: where the outputs so far stand in sampling.grammar (null when
    // unconstrained). It follows output_token_ids, so a recompute preemption keeps it as is.
    std::unique_ptr<structured::GrammarMatcher> grammar;
    // False until the output ends with sampling.grammar_after_token_ids (then the grammar masks
    // and follows every later token).
    bool grammar_active = true;

    // The grammar decides the next token (there is one and it is active).
    bool constrained() const { return grammar && grammar_active; }

    int32_t num_prompt_tokens() const { return static_cast<int32_t>(prompt_token_ids.size()); }
    int32_t num_output_tokens() const { return static_cast<int32_t>(output_token_ids.size()); }
    int32_t num_tokens() const { return num_prompt_tokens() + num_output_tokens(); }
    TokenId token_at(int32_t i) const {
        return i < num_prompt_tokens() ? prompt_token_ids[static_cast<size_t>(i)]
                                       : output_token_ids[static_cast<size_t>(i - num_prompt_tokens())];
    }
    // Tokens still to compute before the next sample (1 for a decode step).
    int32_t num_tokens_to_compute() const { return num_tokens() - num_computed_tokens; }
    // A decode: the only token left is the last sampled one.
    bool is_decode() const { return num_output_tokens() > 0 && num_tokens_to_compute() == 1; }
    bool wants_prompt_logprobs() const { return sampling.prompt_logprobs.has_value() && !prompt_logprobs_sent; }

    void append_output(TokenId id) {
        output_token_ids.push_back(id);
        ++output_token_counts[id];
        if (!grammar_active) grammar_active = output_ends_with(sampling.grammar_after_token_ids);
    }
    bool output_ends_with(std::span<const TokenId> tail) const {
        return output_token_ids.size() >= tail.size() &&
               std::equal(tail.begin(), tail.end(), output_token_ids.end() - static_cast<std::ptrdiff_t>(tail.size()));
    }
};

}  // namespace moeserve::engine
