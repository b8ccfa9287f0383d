// The messages of the KV transfer between a prefill engine (the producer, which ran a prompt
// and keeps its KV blocks) and a decode engine (the consumer, which continues the request):
// docs/parallelism.md, "PD disaggregation". The consumer pulls; the producer answers:
//
//   consumer DEALER                         producer ROUTER
//   KvFetch {id, layout, skip}   ------->
//                                <-------   KvTransferMeta {prompt, first token, blocks, error}
//                                <-------   KvBlockChunk {first, count, last} + raw block bytes  (x N)
//   KvRelease {id}               ------->   (the producer frees the blocks)
//
// Plain structs; codec.h encodes them (msgpack), kv_channel.h moves them.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "moeserve/ipc/messages.h"

namespace moeserve::ipc {

// Every reply repeats its fetch's `fetch` number, so a consumer that gave up on a fetch can tell
// that fetch's late messages from the next one's.
struct KvFetch {
    uint64_t fetch = 0;       // unique per fetch of one consumer socket
    std::string transfer_id;  // the producer's engine request id
    std::string layout;       // the consumer's model::KvCache::layout(); must equal the producer's
    int32_t skip_blocks = 0;  // leading blocks the consumer already has (its prefix cache)
};

struct KvTransferMeta {
    uint64_t fetch = 0;
    std::string transfer_id;
    std::string error;  // non-empty: refused (unknown id, layout mismatch); nothing follows
    std::string layout;
    int64_t block_bytes = 0;
    int32_t num_blocks = 0;  // of the whole prompt; chunks follow for [skip_blocks, num_blocks)
    std::vector<TokenId> prompt_token_ids;
    TokenId first_token = 0;                                    // sampled by the producer
    std::optional<TokenLogprobs> first_logprobs;                // when the request asked for logprobs
    std::optional<std::vector<TokenLogprobs>> prompt_logprobs;  // when it asked for prompt logprobs
};

// Followed by one frame of num_blocks * block_bytes bytes: blocks [first_block, first_block + num_blocks).
struct KvBlockChunk {
    uint64_t fetch = 0;
    std::string transfer_id;
    int32_t first_block = 0;
    int32_t num_blocks = 0;
    bool last = false;
};

struct KvRelease {
    std::string transfer_id;
};

using KvMessage = std::variant<KvFetch, KvTransferMeta, KvBlockChunk, KvRelease>;

}  // namespace moeserve::ipc
