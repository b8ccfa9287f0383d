// `moeserve perplexity --url`: the chunks run on a deployed `moeserve serve` (or any server of
// vLLM's API with prompt_logprobs), so the perplexity is that of the deployment as it serves:
// its TP/DP/EP layout, precision and KV cache, through the HTTP path. Each chunk is one
// /v1/completions request with the chunk's token ids as the prompt, max_tokens 1 and
// prompt_logprobs.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "moeserve/ipc/messages.h"

namespace moeserve::cli {

struct RemotePerplexityTarget {
    std::string url;      // http://host[:port][/prefix]
    std::string api_key;  // sent as a Bearer token when set
    std::string model;    // the "model" of each request; empty: the server's first
};

// Runs every chunk, `parallel` requests at once. on_done(chunk index, its prompt logprobs from
// the second token on, as the in-process engine gives them) runs on the calling thread, in the
// order chunks finish. top: the top log-probabilities asked per position. Raises Error naming
// the chunk and the server's answer when a request fails.
void run_remote_chunks(const RemotePerplexityTarget& target, const std::vector<std::vector<int32_t>>& chunks,
                       int parallel, int top,
                       const std::function<void(size_t, std::vector<ipc::TokenLogprobs>)>& on_done);

// The prompt_logprobs of a /v1/completions answer (vLLM's shape) as the engine's entries, given
// the prompt and the top k asked: entry j is prompt token j + 1's. Raises Error kInvalidArgument
// naming what is missing.
std::vector<ipc::TokenLogprobs> parse_prompt_logprobs(const std::string& answer, const std::vector<int32_t>& prompt,
                                                      int top);

}  // namespace moeserve::cli
