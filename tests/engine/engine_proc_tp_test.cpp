// The TP broadcast (issue 18 points 5 and 8): every ForwardBatch the leader runs reaches the
// followers field for field through ipc::TpMessage, with block tables sent as deltas against the
// previous forward; a follower out of step is an Error, not a wrong forward.
#include "moeserve/engine/engine_proc_tp.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>

#include "engine/engine_test_util.h"
#include "moeserve/core/error.h"
#include "moeserve/engine/engine_core.h"
#include "moeserve/ipc/codec.h"
#include "moeserve/parallel/local_comm.h"
#include "parallel/run_ranks.h"

namespace moeserve::engine {
namespace {

using namespace std::chrono_literals;

// Every field of two batches. The binding stops the build when ForwardBatch gains a field.
void expect_same(const model::ForwardBatch& a, const model::ForwardBatch& b, int forward) {
    const auto& [token_ids, positions, slot_mapping, query_start, seq_lens, seq_ids, block_tables, max_blocks_per_seq,
                 logits_rows, moe_exchange, dummy, hidden_rows] = a;
    EXPECT_EQ(token_ids, b.token_ids) << "forward " << forward;
    EXPECT_EQ(positions, b.positions) << "forward " << forward;
    EXPECT_EQ(slot_mapping, b.slot_mapping) << "forward " << forward;
    EXPECT_EQ(query_start, b.query_start) << "forward " << forward;
    EXPECT_EQ(seq_lens, b.seq_lens) << "forward " << forward;
    EXPECT_EQ(seq_ids, b.seq_ids) << "forward " << forward;
    EXPECT_EQ(block_tables, b.block_tables) << "forward " << forward;
    EXPECT_EQ(max_blocks_per_seq, b.max_blocks_per_seq) << "forward " << forward;
    EXPECT_EQ(logits_rows, b.logits_rows) << "forward " << forward;
    EXPECT_EQ(moe_exchange, b.moe_exchange) << "forward " << forward;
    EXPECT_EQ(dummy, b.dummy) << "forward " << forward;
    EXPECT_EQ(hidden_rows, b.hidden_rows) << "forward " << forward;
}

// One token per sequence; tables padded with block 0 to the longest.
model::ForwardBatch make_batch(std::vector<int64_t> ids, const std::vector<std::vector<int32_t>>& tables) {
    model::ForwardBatch b;
    size_t max_blocks = 1;
    for (const auto& t : tables) max_blocks = std::max(max_blocks, t.size());
    b.max_blocks_per_seq = static_cast<int64_t>(max_blocks);
    b.query_start.push_back(0);
    for (size_t i = 0; i < tables.size(); ++i) {
        b.token_ids.push_back(static_cast<int32_t>(10 + i));
        b.positions.push_back(static_cast<int32_t>(3 * i));
        b.slot_mapping.push_back(tables[i].empty() ? 0 : tables[i][0] * 4);
        b.query_start.push_back(static_cast<int32_t>(i + 1));
        b.seq_lens.push_back(static_cast<int32_t>(3 * i + 1));
        for (size_t j = 0; j < max_blocks; ++j) b.block_tables.push_back(j < tables[i].size() ? tables[i][j] : 0);
        b.logits_rows.push_back(static_cast<int32_t>(i));
    }
    b.seq_ids = std::move(ids);
    b.moe_exchange = parallel::MoeExchangeKind::kAllGather;
    return b;
}

// leader.encode -> ipc bytes -> follower.decode; returns what was sent.
ipc::TpForward round_trip(TpTables& leader, TpTables& follower, const model::ForwardBatch& b, int forward) {
    const ipc::TpForward sent = leader.encode(b);
    const ipc::TpMessage message = ipc::decode_tp_message(ipc::encode(ipc::TpMessage{sent}));
    model::ForwardBatch got;
    follower.decode(std::get<ipc::TpForward>(message), got);
    expect_same(b, got, forward);
    EXPECT_EQ(leader.num_held(), follower.num_held()) << "forward " << forward;
    EXPECT_EQ(leader.blocks_held(), follower.blocks_held()) << "forward " << forward;
    return sent;
}

TEST(TpTablesTest, DeltasRebuildEveryTable) {
    TpTables leader, follower;
    // new sequences: whole tables
    ipc::TpForward w = round_trip(leader, follower, make_batch({5, 9}, {{1, 2}, {3}}), 0);
    EXPECT_EQ(w.table_new, (std::vector<int32_t>{1, 2, 3}));
    // sequence 5 grew by a block, 9 did not: only block 4 travels
    w = round_trip(leader, follower, make_batch({5, 9}, {{1, 2, 4}, {3}}), 1);
    EXPECT_EQ(w.table_keep, (std::vector<int32_t>{2, 1}));
    EXPECT_EQ(w.table_new, (std::vector<int32_t>{4}));
    // 5 finished, 11 is new, 9 grew: 5 is forgotten on both sides
    w = round_trip(leader, follower, make_batch({9, 11}, {{3, 6}, {7}}), 2);
    EXPECT_EQ(w.table_new, (std::vector<int32_t>{6, 7}));
    EXPECT_EQ(leader.num_held(), 2u);
    // 9 was preempted and came back with other blocks: its table is replaced
    w = round_trip(leader, follower, make_batch({11, 9}, {{7}, {8}}), 3);
    EXPECT_EQ(w.table_keep, (std::vector<int32_t>{1, 0}));
    EXPECT_EQ(w.table_new, (std::vector<int32_t>{8}));
    // a dummy forward (no ids, the null block): sent whole, nothing held afterwards
    model::ForwardBatch dummy = make_batch({}, {{}});
    dummy.block_tables = {0};
    w = round_trip(leader, follower, dummy, 4);
    EXPECT_TRUE(w.seq_ids.empty());
    EXPECT_EQ(leader.num_held(), 0u);
    // a repeated id cannot key deltas: whole tables
    w = round_trip(leader, follower, make_batch({4, 4}, {{1}, {2, 3}}), 5);
    EXPECT_EQ(w.table_keep, (std::vector<int32_t>{0, 0}));
    EXPECT_EQ(leader.num_held(), 0u);
    EXPECT_EQ(w.table_new, (std::vector<int32_t>{1, 2, 3}));
}

TEST(TpTablesTest, AFollowerOutOfStepIsAnError) {
    TpTables leader, follower, late;
    round_trip(leader, follower, make_batch({1}, {{1, 2}}), 0);
    const ipc::TpForward second = leader.encode(make_batch({1}, {{1, 2, 3}}));
    model::ForwardBatch got;
    EXPECT_THROW(late.decode(second, got), Error);  // holds nothing for sequence 1, told to keep 2
    ipc::TpForward bad = second;
    bad.moe_exchange = 7;
    EXPECT_THROW(follower.decode(bad, got), Error);
}

// Records every forward, then runs the fake model (which reads the context back through the
// block tables, so a wrong table aborts).
class RecordingModel : public model::Model {
public:
    const model::ModelInfo& info() const override { return inner_.info(); }
    std::unique_ptr<model::KvCache> create_kv_cache(int64_t num_blocks, int64_t block_size) const override {
        return inner_.create_kv_cache(num_blocks, block_size);
    }
    TensorView forward(const model::ForwardBatch& b, model::KvCache& kv) override {
        seen.push_back(b);
        return inner_.forward(b, kv);
    }
    std::vector<model::ForwardBatch> seen;

private:
    testing::FakeModel inner_;
};

// An engine with few blocks (preemption, prefix hits, chunked prefill) over a 2-rank TP group;
// with speculation, verify steps and the tables that rejected drafts shrink travel too.
void expect_follower_runs_every_batch(const SpeculativeConfig& speculative) {
    EngineConfig config;
    config.speculative = speculative;
    config.max_num_seqs = 8;
    config.max_num_batched_tokens = 32;
    config.max_model_len = 128;
    config.block_size = 4;
    config.num_blocks = 16;
    RecordingModel leader_model, follower_model;
    parallel::LocalCommGroup group(2, 5000ms, "tp");
    testing::Collected collected;
    int64_t preemptions = 0, drafted = 0;
    int follower_rc = -1;
    auto errors = moeserve::testing::run_ranks(2, [&](int rank) {
        auto comm = group.communicator(rank);
        if (rank == 1) {
            Logger logger("tp1", LogLevel::kWarn);
            follower_rc = run_tp_follower(follower_model, *comm, logger);
            return;
        }
        TpLeaderModel leader(leader_model, *comm);
        ThreadPool pool(1);
        {
            EngineCore engine(leader, pool, config);
            std::map<int, std::vector<ipc::AddRequest>> arrivals;
            for (int i = 0; i < 8; ++i) {
                auto prompt = testing::make_prompt(3 + (i * 11) % 30, i % 3 == 0 ? 2 : 2 + i);
                arrivals[i % 4].push_back(testing::greedy_add("r" + std::to_string(i), prompt, 4 + (i * 5) % 9));
            }
            collected = testing::run_to_completion(engine, arrivals);
            preemptions = engine.stats().num_preemptions;
            drafted = engine.stats().spec_num_draft_tokens;
        }
        leader.shutdown();
    });
    for (const auto& e : errors) ASSERT_FALSE(e);
    EXPECT_EQ(follower_rc, 0);
    EXPECT_GT(preemptions, 0);
    EXPECT_EQ(collected.tokens.size(), 8u);
    ASSERT_EQ(follower_model.seen.size(), leader_model.seen.size());
    ASSERT_GT(leader_model.seen.size(), 10u);
    for (size_t i = 0; i < leader_model.seen.size(); ++i)
        expect_same(leader_model.seen[i], follower_model.seen[i], static_cast<int>(i));
    if (speculative.enabled()) {
        EXPECT_GT(drafted, 0);
    }
}

TEST(TpBroadcastTest, FollowerRunsEveryBatchOfTheLeader) { expect_follower_runs_every_batch({}); }

TEST(TpBroadcastTest, FollowerRunsEveryVerifyStepOfTheLeader) {
    expect_follower_runs_every_batch({SpeculativeConfig::Method::kNgram, 3, 2, 1});
}

}  // namespace
}  // namespace moeserve::engine
