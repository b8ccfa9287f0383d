// Test helpers for the engine without weights: a fake Model whose logits are a deterministic
// function of the whole context it reads back through the block table (so a wrong block table,
// slot or prefix-cache hit changes the tokens), and request builders.
#pragma once

#include <cmath>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "moeserve/core/error.h"
#include "moeserve/engine/request.h"
#include "moeserve/model/model.h"

namespace moeserve::engine::testing {

// KV storage of the fake model: the token id and position written at each slot (-1 = never).
class FakeKvCache : public model::KvCache {
public:
    FakeKvCache(int64_t num_blocks, int64_t block_size)
        : KvCache(num_blocks, block_size),
          tokens(static_cast<size_t>(num_blocks * block_size), -1),
          positions(static_cast<size_t>(num_blocks * block_size), -1) {}
    std::vector<int32_t> tokens, positions;

    // A block: its slots' tokens, then their positions.
    int64_t part_bytes() const override { return 2 * block_size() * static_cast<int64_t>(sizeof(int32_t)); }
    void read_parts(int64_t block, int64_t /*first: 0*/, int64_t /*count: 1*/, std::byte* out) const override {
        const size_t n = static_cast<size_t>(block_size()), first = static_cast<size_t>(block) * n;
        std::memcpy(out, tokens.data() + first, n * sizeof(int32_t));
        std::memcpy(out + n * sizeof(int32_t), positions.data() + first, n * sizeof(int32_t));
    }
    void write_parts(int64_t block, int64_t /*first: 0*/, int64_t /*count: 1*/, const std::byte* in) override {
        const size_t n = static_cast<size_t>(block_size()), first = static_cast<size_t>(block) * n;
        std::memcpy(tokens.data() + first, in, n * sizeof(int32_t));
        std::memcpy(positions.data() + first, in + n * sizeof(int32_t), n * sizeof(int32_t));
    }
    std::string layout() const override { return "fake block_size=" + std::to_string(block_size()); }
};

// vocab 32, eos 1 (in ModelInfo only: the engine stops at a request's stop_token_ids). The logits of a row peak at
// hash(context tokens 0..p) % vocab, where the context is read from the KV cache; reading a slot not written for that
// position aborts. window > 0: only the last `window` tokens of the context enter the hash (every slot is still
// read and checked), so greedy outputs fall into cycles that n-gram drafts predict.
class FakeModel : public model::Model {
public:
    explicit FakeModel(int64_t vocab = 32, int32_t window = 0) : window_(window) {
        info_.model_type = "fake";
        info_.vocab_size = vocab;
        info_.eos_token_ids = {1};
        info_.kv_bytes_per_token = 64;
    }
    const model::ModelInfo& info() const override { return info_; }
    std::unique_ptr<model::KvCache> create_kv_cache(int64_t num_blocks, int64_t block_size) const override {
        auto kv = std::make_unique<FakeKvCache>(num_blocks, block_size);
        last_kv_cache = kv.get();
        return kv;
    }
    TensorView forward(const model::ForwardBatch& b, model::KvCache& kv_base) override {
        auto& kv = static_cast<FakeKvCache&>(kv_base);
        const int64_t bs = kv.block_size();
        num_forward_tokens.push_back(b.num_tokens());
        if (before_kv_write) before_kv_write();
        for (int64_t t = 0; t < b.num_tokens(); ++t) {
            const auto slot = static_cast<size_t>(b.slot_mapping[static_cast<size_t>(t)]);
            kv.tokens[slot] = b.token_ids[static_cast<size_t>(t)];
            kv.positions[slot] = b.positions[static_cast<size_t>(t)];
        }
        const int64_t vocab = info_.vocab_size;
        logits_.assign(b.logits_rows.size() * static_cast<size_t>(vocab), 0.0f);
        for (size_t r = 0; r < b.logits_rows.size(); ++r) {
            const int32_t row = b.logits_rows[r];
            int64_t seq = 0;
            while (b.query_start[static_cast<size_t>(seq + 1)] <= row) ++seq;
            const int32_t pos = b.positions[static_cast<size_t>(row)];
            uint64_t h = 1469598103934665603ull;
            for (int32_t p = 0; p <= pos; ++p) {
                const int32_t block = b.block_tables[static_cast<size_t>(seq * b.max_blocks_per_seq + p / bs)];
                const auto slot = static_cast<size_t>(block * bs + p % bs);
                MOESERVE_CHECK(block > 0 && kv.positions[slot] == p,
                               "seq {} pos {} reads block {} slot {} holding pos {}", seq, p, block, slot,
                               kv.positions[slot]);
                if (window_ == 0 || p > pos - window_)
                    h = (h ^ static_cast<uint64_t>(kv.tokens[slot] + 7)) * 1099511628211ull;
            }
            float* out = logits_.data() + r * static_cast<size_t>(vocab);
            for (int64_t v = 0; v < vocab; ++v) {
                out[v] = static_cast<float>((h >> 7) % 1000 + static_cast<uint64_t>(v) * 37 % 101) * 0.01f;
            }
            out[(h >> 20) % static_cast<uint64_t>(vocab)] += 3.0f;
        }
        return TensorView{logits_.data(), DType::kF32, Shape({static_cast<int64_t>(b.logits_rows.size()), vocab})};
    }

    std::vector<int64_t> num_forward_tokens;       // tokens per forward call
    std::function<void()> before_kv_write;         // runs in each forward before it writes the KV (a slow forward)
    mutable FakeKvCache* last_kv_cache = nullptr;  // the storage of the last engine made on this model

private:
    int32_t window_ = 0;
    model::ModelInfo info_;
    std::vector<float> logits_;
};

// Prompt of prompt_len tokens 2, 3, ... (mod vocab, skipping 0 and the eos 1) starting at `first`.
inline std::vector<int32_t> make_prompt(int32_t prompt_len, int32_t first = 2, int32_t vocab = 32) {
    std::vector<int32_t> out;
    for (int32_t i = 0; i < prompt_len; ++i) out.push_back(2 + (first - 2 + i) % (vocab - 2));
    return out;
}

inline std::unique_ptr<Request> make_request(const std::string& id, int32_t prompt_len, int32_t max_tokens,
                                             int32_t first_token = 2) {
    ipc::SamplingParams p;
    p.temperature = 0;
    p.max_tokens = max_tokens;  // no stop tokens: runs to max_tokens
    return std::make_unique<Request>(id, make_prompt(prompt_len, first_token), p, 0, 0);
}

}  // namespace moeserve::engine::testing

#include <map>

#include "moeserve/engine/engine_core.h"
#include "moeserve/kernels/cpu/sample.h"
#include "moeserve/testing/sequence_runner.h"

namespace moeserve::engine::testing {

// Greedy tokens of prompt run alone through SequenceRunner (no engine): the reference.
// Stops after max_tokens or at an eos when stop_at_eos.
inline std::vector<int32_t> greedy_alone(model::Model& model, const std::vector<int32_t>& prompt, int32_t max_tokens,
                                         bool stop_at_eos = false) {
    moeserve::testing::SequenceRunner runner(model, static_cast<int64_t>(prompt.size()) + max_tokens, 16);
    const int64_t vocab = model.info().vocab_size;
    std::vector<float> logits = runner.append(prompt);
    std::vector<int32_t> out;
    for (int32_t i = 0; i < max_tokens; ++i) {
        const int32_t next = kernels::cpu::argmax(logits.data(), vocab);
        out.push_back(next);
        const auto& eos = model.info().eos_token_ids;
        if (stop_at_eos && std::find(eos.begin(), eos.end(), next) != eos.end()) break;
        if (i + 1 < max_tokens) logits = runner.append(std::span<const int32_t>(&next, 1));
    }
    return out;
}

inline ipc::AddRequest greedy_add(const std::string& id, std::vector<int32_t> prompt, int32_t max_tokens) {
    ipc::AddRequest add;
    add.request_id = id;
    add.prompt_token_ids = std::move(prompt);
    add.sampling.temperature = 0;
    add.sampling.max_tokens = max_tokens;  // no stop tokens: runs to max_tokens
    return add;
}

// Everything the engine emitted, per request id.
struct Collected {
    std::map<std::string, std::vector<int32_t>> tokens;
    std::map<std::string, ipc::RequestOutput> last;  // the finishing output
    int steps = 0;
};

// Steps the engine until nothing is left; arrivals[s] are added before step s.
inline Collected run_to_completion(EngineCore& engine, std::map<int, std::vector<ipc::AddRequest>> arrivals = {}) {
    Collected c;
    for (int s = 0; engine.has_unfinished_requests() || !arrivals.empty(); ++s) {
        if (auto it = arrivals.find(s); it != arrivals.end()) {
            for (const auto& a : it->second) engine.add_request(a);
            arrivals.erase(it);
        }
        for (auto& o : engine.step().outputs) {
            auto& t = c.tokens[o.request_id];
            t.insert(t.end(), o.new_token_ids.begin(), o.new_token_ids.end());
            if (o.finish_reason != FinishReason::kNone) c.last[o.request_id] = o;
        }
        ++c.steps;
        MOESERVE_CHECK(c.steps < 100000, "engine does not finish");
    }
    return c;
}

}  // namespace moeserve::engine::testing
