// The messages of the KV transfer between a prefill engine (the producer, which ran a prompt
// and keeps its KV blocks) and a decode engine (the consumer, which continues the request):
// docs/parallelism.md, "PD disaggregation". The consumer pulls; the producer answers:
//
//   consumer DEALER                         producer ROUTER (TP rank 0 of the prefill instance)
//   KvFetch {id, layout, skip, parts}  ->
//                                <-------   KvTransferMeta {prompt, blocks, ranks, computed, done, error}
//                                <-------   KvBlockChunk {first, count, last} + raw block bytes  (x N)
//                                <-------   KvTransferMeta again: progress {computed, blocks, done (+ first
//                                           token)}, at least every second
//   KvRelease {id}               ------->   (the producer frees the blocks)
//
// Streaming: a consumer may fetch while the producer still prefills (the proxy starts the decode
// as soon as the prefill instance names the transfer). Chunks then follow the prefill's progress:
// a block is sent once its KV is complete, and the transfer is complete when a metadata message
// says done (with the first token) and every block has arrived.
//
// With TP, a rank's KV cache holds a range of the model's KV heads ("parts", model/kv_cache.h;
// MLA's latent is one part every rank holds). Each consumer rank asks for its own parts. When
// the producer's rank 0 does not hold them all, its metadata comes without chunks, and the
// consumer fetches each part range from a producer rank that holds it (meta.ranks), naming the
// blocks (KvFetch::block_ids): metadata then chunks again. Only the consumer's rank 0 releases.
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
    int32_t first_part = 0;   // the parts to send (the model's indexes); sent only if this rank holds them all
    int32_t num_parts = 0;
    // Non-empty: blocks [skip_blocks, end) of this list of the producer's block ids, from any of
    // its ranks (the list came in rank 0's metadata); empty: transfer_id's blocks, from rank 0.
    std::vector<int32_t> block_ids;
    int64_t generation = 0;  // with block_ids: the metadata's (a rank of another generation refuses)
};

// A producer rank: where to fetch from it and the parts its KV cache holds.
struct KvRankSlice {
    std::string endpoint;
    int32_t first_part = 0;
    int32_t num_parts = 0;
};

struct KvTransferMeta {
    uint64_t fetch = 0;
    std::string transfer_id;
    std::string error;  // non-empty: refused (unknown id, layout mismatch); nothing follows
    std::string layout;
    int64_t block_bytes = 0;  // per block of the chunks that follow; 0: none follow (fetch the parts from `ranks`)
    int32_t num_blocks = 0;   // of the whole prompt; chunks follow for [skip_blocks, num_blocks)
    std::vector<TokenId> prompt_token_ids;
    TokenId first_token = 0;                                    // sampled by the producer
    std::optional<TokenLogprobs> first_logprobs;                // when the request asked for logprobs
    std::optional<std::vector<TokenLogprobs>> prompt_logprobs;  // when it asked for prompt logprobs
    std::vector<KvRankSlice> ranks;                             // the producer's TP ranks
    std::vector<int32_t> block_ids;                             // the producer's blocks of the prompt (so far)
    int32_t hold_ms = 0;          // the producer frees the blocks this long after the transfer is done
    int32_t computed_blocks = 0;  // leading blocks whose KV is complete
    bool done = true;             // the prefill has finished: first_token (and logprobs) are set
    int64_t generation = 0;       // the producer's TP group generation (KvFetch::generation)
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
