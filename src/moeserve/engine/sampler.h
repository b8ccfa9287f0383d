// Sampler: turns one step's logits rows into tokens, one row per sampling request (vLLM's
// Sampler): grammar mask, logit processors, penalties, min_tokens masking, temperature/top-k/top-p/min-p with the
// request's own Rng, and logprobs. Rows run in parallel on the rank's ThreadPool; each row touches only its own
// request, so results do not depend on the thread count. Engine thread only.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "moeserve/core/thread_pool.h"
#include "moeserve/engine/request.h"
#include "moeserve/engine/scheduler/scheduled_batch.h"
#include "moeserve/kernels/cpu/sample.h"

namespace moeserve::engine {

// Log-probabilities (log_softmax of the raw logits row f32 [vocab]) of `token` and the top_k
// most likely tokens (descending, lower id first on ties).
ipc::TokenLogprobs compute_logprobs(const float* logits, int64_t vocab, TokenId token, int32_t top_k);

// Applies in place, as vLLM does and in this order: repetition_penalty to tokens seen in the
// prompt or output (logit > 0 ? logit / p : logit * p), then frequency_penalty * count and
// presence_penalty to tokens seen in the output, then -inf for the stop tokens (stop_token_ids,
// which hold the EOS set unless the request ignores EOS) while fewer than min_tokens were
// generated (unless the request's grammar is complete and allows nothing else). logits f32 [vocab].
void apply_penalties(float* logits, int64_t vocab, const Request& request);

// The request's allowed_token_ids (every other token -inf), bad words (a word's last token -inf
// where the output ends with the rest of it) and logit_bias (added), in that order, as vLLM's
// logits processors. logits f32 [vocab].
void apply_logit_processors(float* logits, int64_t vocab, const Request& request);

// Structured outputs: -inf for every token the request's grammar does not allow next (EOS and
// the stop tokens are allowed only where the grammar is complete). No-op without a grammar.
// logits f32 [vocab]. If nothing is allowed, token 0 is left open and fails the request later.
void apply_grammar_mask(float* logits, int64_t vocab, const Request& request);

// One request's logits rows of a speculative step: rows[j] f32 [vocab] follows its last token
// and drafts[0, j) (rows.size() == drafts.size() + 1; no drafts: one row).
struct DraftRows {
    Request* request = nullptr;
    std::span<float* const> rows;
    std::span<const TokenId> drafts;
};

class Sampler {
public:
    // pool: the rank's pool (may be null: one thread); it must outlive the sampler.
    Sampler(int64_t vocab_size, ThreadPool* pool);

    // rows[i]: f32 [vocab] logits of requests[i]'s last token; modified in place. Logprobs (when
    // requested) come from the raw logits, before penalties and temperature (vLLM's default
    // raw_logprobs), but after the grammar mask of a structured output. Advances each non-greedy
    // request's Rng.
    std::vector<SampledToken> sample(std::span<float* const> rows, std::span<Request* const> requests);

    // Speculative decoding, exact for greedy and sampled requests: for each request, draws a token
    // from rows[0] as sample() does, and from rows[j + 1] while the token drawn from rows[j] equals
    // drafts[j]; returns the tokens drawn (1 to drafts.size() + 1; all but the last are accepted
    // drafts). For a draft t proposed with certainty (n-gram: a point mass q), this is rejection
    // sampling: t is accepted with probability p(t) = min(1, p(t) / q(t)), and on rejection the
    // token drawn is distributed as p without t, renormalized (max(p - q, 0)). Each verified row
    // takes the same one draw of the request's Rng as a plain decode step, so a seeded request
    // draws the same stream with or without drafts. Row j + 1 is processed as if drafts[0, j]
    // were the request's outputs (its grammar state, penalties, bad words, min_tokens see them:
    // DraftedOutputs); the request is left as it came.
    std::vector<std::vector<SampledToken>> sample_drafts(std::span<const DraftRows> requests);

    int64_t vocab_size() const { return vocab_; }

private:
    SampledToken sample_row(float* logits, Request& request, kernels::cpu::SampleScratch& scratch) const;

    int64_t vocab_;
    ThreadPool* pool_;
    std::vector<kernels::cpu::SampleScratch> scratch_;  // one per thread
};

}  // namespace moeserve::engine
