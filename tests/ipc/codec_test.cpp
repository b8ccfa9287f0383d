// Round trips of every ipc message through the msgpack codec, and rejection of malformed bytes.
#include "moeserve/ipc/codec.h"

#include <gtest/gtest.h>

#include "moeserve/core/error.h"

namespace moeserve::ipc {
namespace {

AddRequest make_add() {
    AddRequest a;
    a.request_id = "cmpl-1-0";
    a.prompt_token_ids = {1, 2, 151644};
    a.sampling.temperature = 0.5f;
    a.sampling.top_k = 7;
    a.sampling.seed = 42;
    a.sampling.max_tokens = 9;
    a.sampling.stop_token_ids = {151645};
    a.sampling.logprobs = 3;
    a.client_index = 3;
    return a;
}

TEST(CodecTest, AddRequestRoundTrips) {
    const AddRequest a = make_add();
    const ClientMessage back = decode_client_message(encode(ClientMessage{a}));
    ASSERT_TRUE(std::holds_alternative<AddRequest>(back));
    const auto& b = std::get<AddRequest>(back);
    EXPECT_EQ(b.request_id, a.request_id);
    EXPECT_EQ(b.prompt_token_ids, a.prompt_token_ids);
    EXPECT_EQ(b.sampling.temperature, 0.5f);
    EXPECT_EQ(b.sampling.top_k, 7);
    EXPECT_EQ(b.sampling.seed, std::optional<uint64_t>(42));
    EXPECT_EQ(b.sampling.max_tokens, 9);
    EXPECT_EQ(b.sampling.stop_token_ids, std::vector<TokenId>{151645});
    EXPECT_EQ(b.sampling.logprobs, std::optional<int32_t>(3));
    EXPECT_FALSE(b.sampling.prompt_logprobs.has_value());
    EXPECT_EQ(b.client_index, 3);
}

TEST(CodecTest, AbortHealthShutdownRoundTrip) {
    const auto abort = decode_client_message(encode(ClientMessage{Abort{{"a", "b"}}}));
    EXPECT_EQ(std::get<Abort>(abort).request_ids, (std::vector<std::string>{"a", "b"}));
    EXPECT_TRUE(std::holds_alternative<HealthCheck>(decode_client_message(encode(ClientMessage{HealthCheck{}}))));
    EXPECT_TRUE(std::holds_alternative<Shutdown>(decode_client_message(encode(ClientMessage{Shutdown{}}))));
    EXPECT_EQ(std::get<Shutdown>(decode_client_message(encode(ClientMessage{Shutdown{2}}))).client_index, 2);
    EXPECT_EQ(std::get<ClientStarted>(decode_client_message(encode(ClientMessage{ClientStarted{3}}))).client_index, 3);
}

TEST(CodecTest, StepOutputsRoundTrip) {
    StepOutputs s;
    s.engine_index = 1;
    RequestOutput o;
    o.request_id = "r";
    o.new_token_ids = {5, 6};
    o.new_logprobs = {TokenLogprobs{5, -0.5f, 1, {{5, -0.5f}, {9, -1.5f}}}};
    o.prompt_logprobs = std::vector<TokenLogprobs>{TokenLogprobs{1, -2.0f, 3, {}}};
    o.finish_reason = FinishReason::kStop;
    o.stop_token_id = 151645;
    o.num_prompt_tokens = 3;
    o.num_cached_tokens = 2;
    s.outputs.push_back(o);
    s.stats.num_running = 4;
    s.stats.kv_cache_usage = 0.25f;
    s.stats.prefix_cache_hits = 1LL << 40;
    const auto back = std::get<StepOutputs>(decode_engine_message(encode(EngineMessage{s})));
    EXPECT_EQ(back.engine_index, 1);
    ASSERT_EQ(back.outputs.size(), 1u);
    const auto& b = back.outputs[0];
    EXPECT_EQ(b.request_id, "r");
    EXPECT_EQ(b.new_token_ids, (std::vector<TokenId>{5, 6}));
    ASSERT_EQ(b.new_logprobs.size(), 1u);
    EXPECT_EQ(b.new_logprobs[0].top[1], (std::pair<TokenId, float>{9, -1.5f}));
    ASSERT_TRUE(b.prompt_logprobs.has_value());
    EXPECT_EQ((*b.prompt_logprobs)[0].rank, 3);
    EXPECT_EQ(b.finish_reason, FinishReason::kStop);
    EXPECT_EQ(b.stop_token_id, std::optional<TokenId>(151645));
    EXPECT_EQ(b.num_cached_tokens, 2);
    EXPECT_EQ(back.stats.num_running, 4);
    EXPECT_EQ(back.stats.kv_cache_usage, 0.25f);
    EXPECT_EQ(back.stats.prefix_cache_hits, 1LL << 40);
}

TEST(CodecTest, HealthReplyRoundTrips) {
    const auto back = decode_engine_message(encode(EngineMessage{HealthReply{3, false, "oom"}}));
    const auto& h = std::get<HealthReply>(back);
    EXPECT_EQ(h.engine_index, 3);
    EXPECT_FALSE(h.healthy);
    EXPECT_EQ(h.detail, "oom");
    EXPECT_FALSE(h.recovering);
    const auto again = decode_engine_message(encode(EngineMessage{HealthReply{1, false, "regrouping", true}}));
    EXPECT_TRUE(std::get<HealthReply>(again).recovering);
}

TEST(CodecTest, TpMessagesRoundTrip) {
    TpForward f;
    f.token_ids = {5, 6};
    f.positions = {0, 7};
    f.slot_mapping = {64, int64_t{1} << 40};
    f.query_start = {0, 1, 2};
    f.seq_lens = {1, 8};
    f.seq_ids = {3, int64_t{1} << 35};
    f.table_keep = {0, 1};
    f.table_new_count = {1, 1};
    f.table_new = {4, 9};
    f.max_blocks_per_seq = 2;
    f.logits_rows = {0, 1};
    f.moe_exchange = 1;
    f.hidden_rows = {1, 0};
    f.draft_head = true;
    const TpMessage back = decode_tp_message(encode(TpMessage{f}));
    ASSERT_TRUE(std::holds_alternative<TpForward>(back));
    const auto& g = std::get<TpForward>(back);
    EXPECT_EQ(g.token_ids, f.token_ids);
    EXPECT_EQ(g.positions, f.positions);
    EXPECT_EQ(g.slot_mapping, f.slot_mapping);
    EXPECT_EQ(g.query_start, f.query_start);
    EXPECT_EQ(g.seq_lens, f.seq_lens);
    EXPECT_EQ(g.seq_ids, f.seq_ids);
    EXPECT_EQ(g.table_keep, f.table_keep);
    EXPECT_EQ(g.table_new_count, f.table_new_count);
    EXPECT_EQ(g.table_new, f.table_new);
    EXPECT_EQ(g.hidden_rows, f.hidden_rows);
    EXPECT_TRUE(g.draft_head);
    EXPECT_EQ(g.max_blocks_per_seq, 2);
    EXPECT_EQ(g.logits_rows, f.logits_rows);
    EXPECT_EQ(g.moe_exchange, 1);
    const TpMessage kv = decode_tp_message(encode(TpMessage{TpCreateKv{12, 16}}));
    ASSERT_TRUE(std::holds_alternative<TpCreateKv>(kv));
    EXPECT_EQ(std::get<TpCreateKv>(kv).num_blocks, 12);
    EXPECT_EQ(std::get<TpCreateKv>(kv).block_size, 16);
    EXPECT_TRUE(std::holds_alternative<TpShutdown>(decode_tp_message(encode(TpMessage{TpShutdown{}}))));
    const std::string bytes = encode(TpMessage{f});
    EXPECT_THROW(decode_tp_message(bytes.substr(0, bytes.size() / 2)), Error);
}

TEST(CodecTest, MalformedBytesRaise) {
    const std::string good = encode(ClientMessage{make_add()});
    EXPECT_THROW(decode_client_message(""), Error);
    EXPECT_THROW(decode_client_message(good.substr(0, good.size() / 2)), Error);
    EXPECT_THROW(decode_client_message("\x92\x09\x90"), Error);   // [9, []]: unknown kind
    EXPECT_THROW(decode_client_message("\x92\x00\xa1x"), Error);  // [0, "x"]: wrong payload type
    EXPECT_THROW(decode_engine_message("\xc1"), Error);           // reserved byte
    for (size_t cut = 0; cut < good.size(); ++cut) {              // every truncation is an Error, never a crash
        EXPECT_THROW(decode_client_message(good.substr(0, cut)), Error) << cut;
    }
}

}  // namespace
}  // namespace moeserve::ipc
