// n-gram (prompt lookup) drafting: for a sequence, the tokens that followed the most recent
// earlier occurrence of its last n tokens, n from prompt_lookup_max down to prompt_lookup_min.
// It reads only the sequence's own tokens, so a sequence's drafts never depend on the batch.
#pragma once

#include <span>
#include <vector>

#include "moeserve/engine/request.h"
#include "moeserve/engine/spec_decode/speculative_config.h"

namespace moeserve::engine {

// Up to max_drafts tokens of the sequence prompt + output (one sequence, in two parts): for n
// from max_n down to min_n, find the last start i < L - n with tokens[i, i + n) equal to the
// last n tokens, and return tokens[i + n, min(i + n + max_drafts, L)). Empty when no n matches.
// A backward scan, O(L x n) at worst per call: at max_model_len 4096 and n <= 64 it stays far
// below a forward's cost, and a mismatch usually ends a comparison at its first token.
std::vector<TokenId> propose_ngram(std::span<const TokenId> prompt, std::span<const TokenId> output, int32_t max_n,
                                   int32_t min_n, int32_t max_drafts);

// The drafts of a decode request for the next step under `config`: propose_ngram, or what the
// draft head proposed after its last step (Request::head_drafts), capped at max_drafts. Every
// request may draft: Sampler::sample_drafts processes each verified row with the drafts before
// it as outputs (grammars, penalties, bad words, min_tokens).
std::vector<TokenId> propose_drafts(const Request& request, const SpeculativeConfig& config, int32_t max_drafts);

}  // namespace moeserve::engine
