// PD disaggregation at the engine level: a producer EngineCore prefills (first token only) and
// keeps the prompt's KV; a consumer EngineCore in the same process fetches it over a real
// loopback ZeroMQ socket (CURVE, the shared rank-plane key) and continues. Outputs equal one
// engine doing everything, on the fake model (whose logits depend on every KV slot it reads, so
// a block written to the wrong place changes the tokens) and on the tiny Qwen3-MoE; with
// chunked prefill on the producer, prefix-cache hits on the consumer, an fp8 KV cache, and the
// failures: unknown transfer, layout mismatch (block size; bf16 vs fp8 cache), a producer gone mid-way, an abort during
// the fetch, expiry.
#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <thread>

#include "engine/engine_test_util.h"
#include "moeserve/core/clock.h"
#include "moeserve/ipc/auth.h"
#include "moeserve/model/registry.h"

namespace moeserve::engine {
namespace {

using namespace testing;

const std::string kKey = "kv-transfer-test-key-0123456789abcdef0123456789";

EngineConfig base_config(int32_t block_size = 4, int32_t num_blocks = 256) {
    EngineConfig c;
    c.block_size = block_size;
    c.num_blocks = num_blocks;
    c.max_num_batched_tokens = 64;
    c.max_model_len = 256;
    return c;
}

EngineConfig with_role(EngineConfig c, KvTransferConfig::Role role, int timeout_ms = 5000, int hold_ms = 60000) {
    c.kv_transfer.role = role;
    c.kv_transfer.rank_plane_key = kKey;
    c.kv_transfer.timeout_ms = timeout_ms;
    c.kv_transfer.hold_ms = hold_ms;
    return c;
}

// Steps engine until it has nothing left, KV fetches included; bounded.
Collected drain(EngineCore& engine, Collected c = {}) {
    const double deadline = steady_seconds() + 30;
    while (engine.has_unfinished_requests() || engine.has_pending_kv_transfers()) {
        MOESERVE_CHECK(steady_seconds() < deadline, "engine does not finish");
        if (!engine.has_unfinished_requests()) {
            engine.poll_kv_transfers();
            if (!engine.has_unfinished_requests()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
            continue;
        }
        for (auto& o : engine.step().outputs) {
            auto& t = c.tokens[o.request_id];
            t.insert(t.end(), o.new_token_ids.begin(), o.new_token_ids.end());
            if (o.finish_reason != FinishReason::kNone) c.last[o.request_id] = o;
        }
        ++c.steps;
    }
    return c;
}

// Runs prompts through producer then consumer; returns the consumer's outputs.
// Producer request ids are "<round>p<i>" (a round = one call), consumer ids "d<i>".
Collected disaggregated(EngineCore& producer, EngineCore& consumer, const std::vector<std::vector<int32_t>>& prompts,
                        int32_t max_tokens) {
    static int round = 0;
    const std::string prefix = std::to_string(round++);
    for (size_t i = 0; i < prompts.size(); ++i) {
        ipc::AddRequest p = greedy_add(prefix + "p" + std::to_string(i), prompts[i], 1);
        p.kv_transfer.produce = true;
        producer.add_request(p);
    }
    const Collected pre = drain(producer);
    for (size_t i = 0; i < prompts.size(); ++i) {
        const std::string pid = prefix + "p" + std::to_string(i);
        EXPECT_EQ(pre.last.at(pid).finish_reason, FinishReason::kLength) << pre.last.at(pid).error;
        EXPECT_EQ(pre.last.at(pid).kv_transfer_endpoint, producer.kv_transfer()->endpoint());
        ipc::AddRequest d = greedy_add("d" + std::to_string(i), prompts[i], max_tokens);
        d.kv_transfer.remote_endpoint = pre.last.at(pid).kv_transfer_endpoint;
        d.kv_transfer.remote_transfer_id = pid;
        consumer.add_request(d);
    }
    return drain(consumer);
}

// The greedy tokens of request "d" (prompt, max_tokens) run on an engine without a KV transfer.
std::vector<int32_t> tokens_alone(EngineCore& alone, const std::vector<int32_t>& prompt, int32_t max_tokens) {
    std::map<int, std::vector<ipc::AddRequest>> arrivals;
    arrivals[0].push_back(greedy_add("d", prompt, max_tokens));
    return run_to_completion(alone, arrivals).tokens.at("d");
}

// Polls consumer for ~100 ms: its queued fetch starts, and the producer's session for it.
void start_fetch(EngineCore& consumer) {
    for (int i = 0; i < 50; ++i) {
        consumer.poll_kv_transfers();
        std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
}

void expect_all_blocks_free(EngineCore& engine) {
    const double deadline = steady_seconds() + 10;
    const auto& pool = engine.kv_cache_manager().pool();
    while (pool.num_free_blocks() != pool.num_blocks() - 1 && steady_seconds() < deadline) {
        engine.poll_kv_transfers();
        std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
    EXPECT_EQ(pool.num_free_blocks(), pool.num_blocks() - 1);
}

// Which producer rank each consumer rank fetches which KV parts from.
TEST(KvPiecesTest, EachPartComesFromARankThatHoldsIt) {
    using R = ipc::KvRankSlice;
    // TP=2 producer (KV heads split), TP=1 consumer: half from each rank.
    EXPECT_EQ(plan_pieces({0, 4, 4}, {R{"a", 0, 2}, R{"b", 2, 2}}, 0),
              (std::vector<KvPiece>{{"a", 0, 2}, {"b", 2, 2}}));
    // TP=1 producer, TP=2 consumer rank 1: its half from the one rank.
    EXPECT_EQ(plan_pieces({2, 2, 4}, {R{"a", 0, 4}}, 1), (std::vector<KvPiece>{{"a", 2, 2}}));
    // MLA: every rank holds the one part; consumer ranks spread over the producer's.
    EXPECT_EQ(plan_pieces({0, 1, 1}, {R{"a", 0, 1}, R{"b", 0, 1}}, 0), (std::vector<KvPiece>{{"a", 0, 1}}));
    EXPECT_EQ(plan_pieces({0, 1, 1}, {R{"a", 0, 1}, R{"b", 0, 1}}, 1), (std::vector<KvPiece>{{"b", 0, 1}}));
    // Replicated KV heads (TP=4 over 2 heads): one copy of each.
    EXPECT_EQ(plan_pieces({0, 2, 2}, {R{"a", 0, 1}, R{"b", 0, 1}, R{"c", 1, 1}, R{"d", 1, 1}}, 1),
              (std::vector<KvPiece>{{"b", 0, 1}, {"d", 1, 1}}));
    // A part nobody holds: no plan.
    EXPECT_TRUE(plan_pieces({0, 2, 2}, {R{"a", 0, 1}}, 0).empty());
}

TEST(KvTransferTest, FakeModelOutputsEqualOneEngine) {
    FakeModel model;
    ThreadPool pool(1);
    EngineConfig producer_config = with_role(base_config(), KvTransferConfig::Role::kProducer);
    producer_config.max_num_batched_tokens = 8;  // chunked prefill of the longer prompts
    EngineCore producer(model, pool, producer_config);
    EngineCore consumer(model, pool, with_role(base_config(), KvTransferConfig::Role::kConsumer));
    EngineCore alone(model, pool, base_config());
    // Prompts 0 and 4 share 16 tokens (4 full blocks): the consumer fetches prompt 0's in the
    // first round, then finds them in its own prefix cache for prompt 4 and fetches only the rest.
    std::vector<std::vector<int32_t>> prompts = {make_prompt(17, 2), make_prompt(5, 9), make_prompt(4, 11),
                                                 make_prompt(1, 3), make_prompt(23, 2)};
    Collected got = disaggregated(producer, consumer, {prompts.begin(), prompts.end() - 1}, 6);
    const Collected last = disaggregated(producer, consumer, {prompts.back()}, 6);
    got.tokens["d4"] = last.tokens.at("d0");
    got.last["d4"] = last.last.at("d0");
    std::map<int, std::vector<ipc::AddRequest>> arrivals;
    for (size_t i = 0; i < prompts.size(); ++i)
        arrivals[0].push_back(greedy_add("d" + std::to_string(i), prompts[i], 6));
    const Collected want = run_to_completion(alone, arrivals);
    for (size_t i = 0; i < prompts.size(); ++i) {
        const std::string id = "d" + std::to_string(i);
        EXPECT_EQ(got.tokens.at(id), want.tokens.at(id)) << id;
        EXPECT_EQ(got.tokens.at(id).size(), 6u) << id;
        EXPECT_EQ(got.last.at(id).finish_reason, FinishReason::kLength) << got.last.at(id).error;
    }
    const ipc::Stats s = consumer.stats();
    EXPECT_EQ(s.kv_received_transfers, 5);
    EXPECT_EQ(s.kv_failed_transfers, 0);
    EXPECT_GT(s.kv_received_bytes, 0);
    EXPECT_GT(s.prefix_cache_hits, 0);  // prompt 1 reused prompt 0's fetched blocks
    EXPECT_EQ(s.num_prompt_tokens, 0);  // nothing was prefilled on the consumer
    expect_all_blocks_free(producer);   // every transfer released
    EXPECT_EQ(producer.stats().kv_sent_transfers, 5);
    expect_all_blocks_free(consumer);
}

// Streaming: the consumer's fetch starts when the producer has computed one chunk of the prompt
// and follows it chunk by chunk (the producer is stepped only while the fetch waits); the
// outputs equal one engine's, and every block is freed on both sides.
TEST(KvTransferTest, AFetchFollowsThePrefillAsItComputes) {
    FakeModel model;
    ThreadPool pool(1);
    EngineConfig producer_config = with_role(base_config(), KvTransferConfig::Role::kProducer);
    producer_config.max_num_batched_tokens = 4;  // one block per step
    EngineCore producer(model, pool, producer_config);
    EngineCore consumer(model, pool, with_role(base_config(), KvTransferConfig::Role::kConsumer));
    EngineCore alone(model, pool, base_config());
    const std::vector<int32_t> prompt = make_prompt(23, 4);
    ipc::AddRequest p = greedy_add("p", prompt, 1);
    p.kv_transfer.produce = true;
    producer.add_request(p);
    const std::vector<ipc::RequestOutput> announced = producer.take_finished();
    ASSERT_EQ(announced.size(), 1u);  // before any step: the transfer's endpoint, no token
    EXPECT_EQ(announced[0].kv_transfer_endpoint, producer.kv_transfer()->endpoint());
    EXPECT_TRUE(announced[0].new_token_ids.empty());
    producer.step();  // the first block
    ipc::AddRequest d = greedy_add("d", prompt, 6);
    d.kv_transfer = {false, announced[0].kv_transfer_endpoint, "p"};
    consumer.add_request(d);
    Collected got;
    int producer_steps_during_fetch = 0;
    const double deadline = steady_seconds() + 30;
    while (consumer.has_unfinished_requests() || consumer.has_pending_kv_transfers()) {
        ASSERT_LT(steady_seconds(), deadline);
        consumer.poll_kv_transfers();
        if (consumer.has_pending_kv_transfers() && producer.has_unfinished_requests()) {
            producer.step();
            ++producer_steps_during_fetch;
            std::this_thread::sleep_for(std::chrono::milliseconds(5));  // its session sends the new block
        }
        if (!consumer.has_unfinished_requests()) continue;
        for (auto& o : consumer.step().outputs) {
            got.tokens[o.request_id].insert(got.tokens[o.request_id].end(), o.new_token_ids.begin(),
                                            o.new_token_ids.end());
        }
    }
    EXPECT_GE(producer_steps_during_fetch, 4);  // blocks 2..6 and the first token came while it fetched
    EXPECT_EQ(got.tokens.at("d"), tokens_alone(alone, prompt, 6));
    EXPECT_EQ(consumer.stats().kv_received_transfers, 1);
    expect_all_blocks_free(producer);
    expect_all_blocks_free(consumer);
}

// A prefill that hits the prefix cache on blocks another request's chunk writes in the same
// step: those blocks are not streamed before that forward wrote them. The forward stalls before
// writing, so a block sent early would reach the consumer unwritten (its fetch runs meanwhile).
TEST(KvTransferTest, APrefixHitOnBlocksWrittenInTheSameStepIsStreamedOnlyOnceWritten) {
    FakeModel model;
    ThreadPool pool(1);
    EngineConfig producer_config = with_role(base_config(), KvTransferConfig::Role::kProducer);
    producer_config.max_num_batched_tokens = 16;
    EngineCore producer(model, pool, producer_config);
    EngineCore consumer(model, pool, with_role(base_config(), KvTransferConfig::Role::kConsumer));
    EngineCore alone(model, pool, base_config());
    const std::vector<int32_t> prompt = make_prompt(23, 4);
    producer.add_request(greedy_add("a", prompt, 1));
    producer.step();  // a: blocks 0..3
    // b is admitted next to a's last chunk (blocks 4, 5) and hits blocks 0..4 of the prefix cache.
    ipc::AddRequest b = greedy_add("b", prompt, 1);
    b.kv_transfer.produce = true;
    producer.add_request(b);
    const std::vector<ipc::RequestOutput> announced = producer.take_finished();
    ASSERT_EQ(announced.size(), 1u);
    const std::string endpoint = announced[0].kv_transfer_endpoint;
    ipc::AddRequest d = greedy_add("d", prompt, 6);
    d.kv_transfer = {false, endpoint, "b"};
    consumer.add_request(d);
    start_fetch(consumer);
    model.before_kv_write = [] { std::this_thread::sleep_for(std::chrono::milliseconds(300)); };
    const Collected pre = drain(producer);
    model.before_kv_write = nullptr;
    EXPECT_EQ(pre.last.at("b").finish_reason, FinishReason::kLength) << pre.last.at("b").error;
    const Collected got = drain(consumer);
    EXPECT_EQ(got.tokens.at("d"), tokens_alone(alone, prompt, 6));
    EXPECT_EQ(consumer.stats().kv_received_transfers, 1);
    EXPECT_EQ(producer.stats().prefix_cache_hits, 20);
    expect_all_blocks_free(producer);
    expect_all_blocks_free(consumer);
}

// A consumer aborted while the prefill it streams from still runs: its release reaches the
// producer mid-prefill, and the producer frees the blocks as soon as the prefill ends (not after
// hold_ms, a minute here).
TEST(KvTransferTest, AReleaseDuringTheStreamedPrefillFreesTheBlocksWhenItEnds) {
    FakeModel model;
    ThreadPool pool(1);
    EngineConfig producer_config = with_role(base_config(), KvTransferConfig::Role::kProducer);
    producer_config.max_num_batched_tokens = 4;
    EngineCore producer(model, pool, producer_config);
    EngineCore consumer(model, pool, with_role(base_config(), KvTransferConfig::Role::kConsumer));
    const std::vector<int32_t> prompt = make_prompt(23, 4);
    ipc::AddRequest p = greedy_add("p", prompt, 1);
    p.kv_transfer.produce = true;
    producer.add_request(p);
    const std::string endpoint = producer.take_finished().at(0).kv_transfer_endpoint;
    producer.step();
    ipc::AddRequest d = greedy_add("d", prompt, 6);
    d.kv_transfer = {false, endpoint, "p"};
    consumer.add_request(d);
    start_fetch(consumer);
    consumer.abort({{"d"}});
    const Collected c = drain(consumer);
    EXPECT_EQ(c.last.at("d").finish_reason, FinishReason::kAbort);
    drain(producer);  // the rest of the prefill
    expect_all_blocks_free(producer);
    expect_all_blocks_free(consumer);
    EXPECT_EQ(producer.stats().kv_expired_transfers, 0);

    // Aborted while still queued for its fetch (before any poll started it): the release goes too.
    ipc::AddRequest p2 = greedy_add("p2", prompt, 1);
    p2.kv_transfer.produce = true;
    producer.add_request(p2);
    drain(producer);
    ipc::AddRequest d2 = greedy_add("d2", prompt, 6);
    d2.kv_transfer = {false, endpoint, "p2"};
    consumer.add_request(d2);
    consumer.abort({{"d2"}});
    drain(consumer);
    expect_all_blocks_free(producer);
    EXPECT_EQ(producer.stats().kv_expired_transfers, 0);
}

TEST(KvTransferTest, Qwen3TinyGreedyEqualsOneEngine) {
    ThreadPool pool(2);
    model::LoadOptions load;
    load.max_model_len = 256;
    auto model = model::load_model(MOESERVE_QWEN3_TINY_DIR, pool, load);
    EngineConfig producer_config = with_role(base_config(16, 64), KvTransferConfig::Role::kProducer);
    producer_config.max_num_batched_tokens = 16;
    EngineCore producer(*model, pool, producer_config);
    EngineCore consumer(*model, pool, with_role(base_config(16, 64), KvTransferConfig::Role::kConsumer));
    Rng rng(5);
    std::vector<std::vector<int32_t>> prompts;
    for (int len : {40, 7, 33}) {
        std::vector<int32_t> p;
        for (int k = 0; k < len; ++k) p.push_back(static_cast<int32_t>(rng.next_u64() % 150000));
        prompts.push_back(p);
    }
    const Collected got = disaggregated(producer, consumer, prompts, 8);
    for (size_t i = 0; i < prompts.size(); ++i) {
        EXPECT_EQ(got.tokens.at("d" + std::to_string(i)), greedy_alone(*model, prompts[i], 8)) << i;
    }
    expect_all_blocks_free(producer);
    expect_all_blocks_free(consumer);
}

// An fp8 KV cache (e4m3 codes and their row scales travel in the blocks): the consumer's greedy
// tokens equal one engine's on the same fp8 cache; a bf16 producer's blocks are refused by an fp8
// consumer, naming both layouts.
TEST(KvTransferTest, Qwen3TinyFp8CacheTransfersAndRefusesBf16Blocks) {
    ThreadPool pool(2);
    auto fp8 = model::load_model(MOESERVE_QWEN3_TINY_DIR, pool, {.max_model_len = 256, .kv_cache_dtype = "fp8"});
    auto bf16 = model::load_model(MOESERVE_QWEN3_TINY_DIR, pool, {.max_model_len = 256, .kv_cache_dtype = "bf16"});
    EngineConfig producer_config = with_role(base_config(16, 64), KvTransferConfig::Role::kProducer);
    producer_config.max_num_batched_tokens = 16;
    EngineCore producer(*fp8, pool, producer_config);
    EngineCore consumer(*fp8, pool, with_role(base_config(16, 64), KvTransferConfig::Role::kConsumer));
    Rng rng(6);
    std::vector<std::vector<int32_t>> prompts;
    for (int len : {40, 9, 33}) {
        std::vector<int32_t> p;
        for (int k = 0; k < len; ++k) p.push_back(static_cast<int32_t>(rng.next_u64() % 150000));
        prompts.push_back(p);
    }
    const Collected got = disaggregated(producer, consumer, prompts, 8);
    for (size_t i = 0; i < prompts.size(); ++i) {
        EXPECT_EQ(got.tokens.at("d" + std::to_string(i)), greedy_alone(*fp8, prompts[i], 8)) << i;
    }
    EXPECT_EQ(consumer.stats().kv_received_transfers, 3);

    EngineCore bf16_producer(*bf16, pool, with_role(base_config(16, 64), KvTransferConfig::Role::kProducer));
    ipc::AddRequest p = greedy_add("bf16", prompts[1], 1);
    p.kv_transfer.produce = true;
    bf16_producer.add_request(p);
    drain(bf16_producer);
    ipc::AddRequest d = greedy_add("mismatch", prompts[1], 4);
    d.kv_transfer = {false, bf16_producer.kv_transfer()->endpoint(), "bf16"};
    consumer.add_request(d);
    const Collected c = drain(consumer);
    const std::string& error = c.last.at("mismatch").error;
    EXPECT_EQ(c.last.at("mismatch").finish_reason, FinishReason::kError);
    EXPECT_NE(error.find("KV layouts differ"), std::string::npos) << error;
    EXPECT_NE(error.find("dtype=BF16"), std::string::npos) << error;
    EXPECT_NE(error.find("dtype=F8_E4M3"), std::string::npos) << error;
    expect_all_blocks_free(producer);
    expect_all_blocks_free(consumer);
}

TEST(KvTransferTest, FailuresFailTheRequestAndFreeItsBlocks) {
    FakeModel model;
    ThreadPool pool(1);
    auto producer =
        std::make_unique<EngineCore>(model, pool, with_role(base_config(), KvTransferConfig::Role::kProducer));
    EngineCore consumer(model, pool, with_role(base_config(), KvTransferConfig::Role::kConsumer, 700));
    EngineCore other_layout(model, pool, with_role(base_config(8), KvTransferConfig::Role::kConsumer));
    const std::string endpoint = producer->kv_transfer()->endpoint();

    // Unknown transfer id.
    ipc::AddRequest d = greedy_add("unknown", make_prompt(9), 4);
    d.kv_transfer = {false, endpoint, "never-prefilled"};
    consumer.add_request(d);
    Collected c = drain(consumer);
    EXPECT_EQ(c.last.at("unknown").finish_reason, FinishReason::kError);
    EXPECT_NE(c.last.at("unknown").error.find("holds no KV for 'never-prefilled'"), std::string::npos)
        << c.last.at("unknown").error;

    // A real transfer fetched by an engine with another block size: refused, naming both layouts.
    ipc::AddRequest p = greedy_add("p", make_prompt(9), 1);
    p.kv_transfer.produce = true;
    producer->add_request(p);
    drain(*producer);
    d = greedy_add("layout", make_prompt(9), 4);
    d.kv_transfer = {false, endpoint, "p"};
    other_layout.add_request(d);
    c = drain(other_layout);
    EXPECT_NE(c.last.at("layout").error.find("KV layouts differ"), std::string::npos) << c.last.at("layout").error;

    // The prompt differs from the one prefilled.
    d = greedy_add("prompt", make_prompt(9, 5), 4);
    d.kv_transfer = {false, endpoint, "p"};
    consumer.add_request(d);
    c = drain(consumer);
    EXPECT_NE(c.last.at("prompt").error.find("is not this request's"), std::string::npos) << c.last.at("prompt").error;

    // The producer is gone: its port refuses, and the fetch fails at once, not after the timeout
    // (a silent producer's timeout: StuckAndDeadProducersDoNotDelayAHealthyOne, and the
    // SIGSTOP case of tests/integration/pd_disagg_test.py).
    producer.reset();
    d = greedy_add("gone", make_prompt(9), 4);
    d.kv_transfer = {false, endpoint, "p"};
    const double start = steady_seconds();
    consumer.add_request(d);
    c = drain(consumer);
    EXPECT_EQ(c.last.at("gone").finish_reason, FinishReason::kError);
    EXPECT_NE(c.last.at("gone").error.find("cannot connect (Connection refused)"), std::string::npos)
        << c.last.at("gone").error;
    EXPECT_LT(steady_seconds() - start, 10.0);
    expect_all_blocks_free(consumer);
    expect_all_blocks_free(other_layout);
    EXPECT_EQ(consumer.stats().kv_failed_transfers, 3);
}

TEST(KvTransferTest, AbortDuringTheFetchAndExpiryFreeTheBlocks) {
    FakeModel model;
    ThreadPool pool(1);
    EngineCore producer(model, pool, with_role(base_config(), KvTransferConfig::Role::kProducer, 5000, 300));
    EngineCore consumer(model, pool, with_role(base_config(), KvTransferConfig::Role::kConsumer, 700));
    ipc::AddRequest p = greedy_add("p", make_prompt(30), 1);
    p.kv_transfer.produce = true;
    producer.add_request(p);
    drain(producer);
    EXPECT_EQ(producer.stats().kv_held_transfers, 1);
    // Nobody fetches it: freed after hold_ms (300 ms).
    expect_all_blocks_free(producer);
    EXPECT_EQ(producer.stats().kv_expired_transfers, 1);

    // Abort right after the fetch started: the abort is reported at once, the blocks come back.
    ipc::AddRequest d = greedy_add("d", make_prompt(30), 4);
    d.kv_transfer = {false, producer.kv_transfer()->endpoint(), "p"};
    consumer.add_request(d);
    consumer.poll_kv_transfers();  // starts the fetch
    consumer.abort(ipc::Abort{{"d"}});
    Collected c = drain(consumer);
    EXPECT_EQ(c.last.at("d").finish_reason, FinishReason::kAbort);
    expect_all_blocks_free(consumer);
}

int count_entries(const char* dir) {
    int n = 0;
    for ([[maybe_unused]] const auto& e : std::filesystem::directory_iterator(dir)) ++n;
    return n;
}

// A port that accepts TCP connections (the kernel's backlog) and never speaks: a producer that is
// stopped (SIGSTOP) or wedged.
struct SilentListener {
    SilentListener() {
        fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        sockaddr_in a{};
        a.sin_family = AF_INET;
        a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        socklen_t len = sizeof(a);
        MOESERVE_CHECK(::bind(fd, reinterpret_cast<sockaddr*>(&a), len) == 0 && ::listen(fd, 16) == 0 &&
                           ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0,
                       "cannot listen on loopback");
        endpoint = "tcp://127.0.0.1:" + std::to_string(ntohs(a.sin_port));
    }
    ~SilentListener() { ::close(fd); }
    int fd = -1;
    std::string endpoint;
};

// A port nothing listens on (bound, then closed: refused from then on).
std::string dead_endpoint() {
    const SilentListener closed;
    return closed.endpoint;
}

// Thousands of distinct producer addresses (the API server refuses unsigned ones; this is the
// engine's own bound): the consumer's descriptors and threads stay flat, each fetch fails at once
// (refused), and a real transfer still works afterwards.
TEST(KvTransferTest, ManyDistinctEndpointsKeepDescriptorsAndThreadsFlat) {
    FakeModel model;
    ThreadPool pool(1);
    EngineCore producer(model, pool, with_role(base_config(), KvTransferConfig::Role::kProducer));
    EngineCore consumer(model, pool, with_role(base_config(), KvTransferConfig::Role::kConsumer, 5000));
    const std::string dead = dead_endpoint();
    const std::string port = dead.substr(dead.rfind(':') + 1);
    const int fds_before = count_entries("/proc/self/fd"), threads_before = count_entries("/proc/self/task");
    constexpr int kRequests = 3000;
    const double start = steady_seconds();
    for (int i = 0; i < kRequests; i += 100) {  // the KV cache holds 100 such requests at once
        for (int j = i; j < i + 100; ++j) {
            ipc::AddRequest d = greedy_add("x" + std::to_string(j), make_prompt(3), 2);
            // Leading zeros: the same port, a different string (the probe that leaked before).
            d.kv_transfer = {
                false, "tcp://127.0.0.1:" + std::string(static_cast<size_t>(j % 7), '0') + port + (j % 2 ? "" : " "),
                "id" + std::to_string(j)};
            if (j % 3 == 0) d.kv_transfer.remote_endpoint = "tcp://localhost:" + port;
            consumer.add_request(d);
        }
        const Collected c = drain(consumer);
        for (const auto& [id, out] : c.last) EXPECT_EQ(out.finish_reason, FinishReason::kError) << id;
    }
    EXPECT_LT(steady_seconds() - start, 60.0);
    EXPECT_LE(count_entries("/proc/self/fd"), fds_before + 8);
    EXPECT_LE(count_entries("/proc/self/task"), threads_before + 2);
    const Collected ok = disaggregated(producer, consumer, {make_prompt(9)}, 4);
    EXPECT_EQ(ok.last.at("d0").finish_reason, FinishReason::kLength) << ok.last.at("d0").error;
    expect_all_blocks_free(consumer);
}

// A stopped producer with three pending fetches and a dead one do not delay a healthy
// producer's request: it finishes within 2 s of being added (each stuck fetch waits 5 s).
TEST(KvTransferTest, StuckAndDeadProducersDoNotDelayAHealthyOne) {
    FakeModel model;
    ThreadPool pool(1);
    EngineCore producer(model, pool, with_role(base_config(), KvTransferConfig::Role::kProducer));
    EngineCore consumer(model, pool, with_role(base_config(), KvTransferConfig::Role::kConsumer, 5000));
    ipc::AddRequest p = greedy_add("p", make_prompt(9), 1);
    p.kv_transfer.produce = true;
    producer.add_request(p);
    drain(producer);
    const SilentListener stuck;
    const double start = steady_seconds();
    for (int i = 0; i < 3; ++i) {
        ipc::AddRequest d = greedy_add("stuck" + std::to_string(i), make_prompt(9), 2);
        d.kv_transfer = {false, stuck.endpoint, "s" + std::to_string(i)};
        consumer.add_request(d);
    }
    ipc::AddRequest dead = greedy_add("dead", make_prompt(9), 2);
    dead.kv_transfer = {false, dead_endpoint(), "x"};
    consumer.add_request(dead);
    ipc::AddRequest healthy = greedy_add("healthy", make_prompt(9), 4);
    healthy.kv_transfer = {false, producer.kv_transfer()->endpoint(), "p"};
    consumer.add_request(healthy);
    std::map<std::string, double> finished_at;
    std::map<std::string, ipc::RequestOutput> last;
    const double deadline = start + 30;
    while ((consumer.has_unfinished_requests() || consumer.has_pending_kv_transfers()) && steady_seconds() < deadline) {
        if (last.count("healthy") == 1 && last.count("stuck0") == 0)
            consumer.abort(ipc::Abort{{"stuck0", "stuck1", "stuck2"}});  // no need to wait out their timeouts
        consumer.poll_kv_transfers();
        for (auto& o : consumer.step().outputs) {
            if (o.finish_reason == FinishReason::kNone) continue;
            finished_at[o.request_id] = steady_seconds() - start;
            last[o.request_id] = o;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    ASSERT_EQ(last.count("healthy"), 1u);
    EXPECT_EQ(last.at("healthy").finish_reason, FinishReason::kLength) << last.at("healthy").error;
    EXPECT_LT(finished_at.at("healthy"), 2.0);
    EXPECT_NE(last.at("dead").error.find("cannot connect"), std::string::npos) << last.at("dead").error;
    EXPECT_LT(finished_at.at("dead"), 2.0);
    for (int i = 0; i < 3; ++i) EXPECT_EQ(last.count("stuck" + std::to_string(i)), 1u);
    expect_all_blocks_free(consumer);
}

TEST(KvTransferTest, RolesAreChecked) {
    FakeModel model;
    ThreadPool pool(1);
    EngineCore plain(model, pool, base_config());
    ipc::AddRequest p = greedy_add("p", make_prompt(5), 1);
    p.kv_transfer.produce = true;
    plain.add_request(p);
    ipc::AddRequest d = greedy_add("d", make_prompt(5), 1);
    d.kv_transfer = {false, "tcp://127.0.0.1:1", "x"};
    plain.add_request(d);
    const Collected c = drain(plain);
    EXPECT_NE(c.last.at("p").error.find("kv_producer or kv_both"), std::string::npos);
    EXPECT_NE(c.last.at("d").error.find("kv_consumer or kv_both"), std::string::npos);
}

}  // namespace
}  // namespace moeserve::engine
