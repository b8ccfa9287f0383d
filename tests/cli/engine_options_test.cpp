// make_engine_config / kv_cache_num_blocks: KV budget bytes -> blocks (the null block among
// them), the cap at max_num_seqs sequences, and the error when one sequence does not fit.
#include "moeserve/cli/engine_options.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "moeserve/core/error.h"

namespace moeserve::cli {
namespace {

// A tiny GQA model's KV bytes per token: 2 layers x (K + V) x 2 KV heads x 64 dims x the element.
constexpr int64_t kBf16BytesPerToken = 2 * 2 * 2 * 64 * 2;  // 1024
constexpr int64_t kF32BytesPerToken = 2 * 2 * 2 * 64 * 4;   // 2048

EngineOptions options(const std::string& kv_cache_memory) {
    EngineOptions o;
    o.max_model_len = 256;  // 16 blocks of 16 tokens per sequence
    o.block_size = 16;
    o.kv_cache_memory = kv_cache_memory;
    return o;
}

std::string error_of(const EngineOptions& o, int64_t bytes_per_token) {
    try {
        kv_cache_num_blocks(o, bytes_per_token, 0, 0);
    } catch (const Error& e) {
        EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
        return e.what();
    }
    return "";
}

TEST(KvCacheNumBlocks, BytesToBlocksForBf16AndF32) {
    // 1 MiB / (1024 B x 16 tokens) = 64 blocks in bf16, half as many in f32; the null block is one of them.
    EXPECT_EQ(kv_cache_num_blocks(options("1M"), kBf16BytesPerToken, 0, 0), 64);
    EXPECT_EQ(kv_cache_num_blocks(options("1M"), kF32BytesPerToken, 0, 0), 32);
    EXPECT_EQ(kv_cache_num_blocks(options("1048576"), kBf16BytesPerToken, 0, 0), 64);
    // A partial block does not count.
    EXPECT_EQ(kv_cache_num_blocks(options(std::to_string((64 << 14) + (1 << 14) - 1)), kBf16BytesPerToken, 0, 0), 64);
}

TEST(KvCacheNumBlocks, FromTheRamShareLessTheWeights) {
    EngineOptions o = options("");
    o.gpu_memory_utilization = 0.5;
    // 0.5 x 8 MiB - 3 MiB = 1 MiB of KV cache.
    EXPECT_EQ(kv_cache_num_blocks(o, kBf16BytesPerToken, 3 << 20, 8 << 20), 64);
    // --kv-cache-memory wins over the utilization (and the weights do not count against it).
    o.kv_cache_memory = "512K";
    EXPECT_EQ(kv_cache_num_blocks(o, kBf16BytesPerToken, 3 << 20, 8 << 20), 32);
}

TEST(KvCacheNumBlocks, CappedAtMaxNumSeqsSequencesPlusTheNullBlock) {
    EngineOptions o = options("1M");
    o.max_num_seqs = 2;
    EXPECT_EQ(kv_cache_num_blocks(o, kBf16BytesPerToken, 0, 0), 2 * 16 + 1);
    o.max_num_seqs = 1;
    EXPECT_EQ(kv_cache_num_blocks(o, kBf16BytesPerToken, 0, 0), 16 + 1);
}

TEST(KvCacheNumBlocks, OneSequenceBesidesTheNullBlockOrAnError) {
    // 17 blocks: the null block and one 256-token sequence.
    EXPECT_EQ(kv_cache_num_blocks(options(std::to_string(17 << 14)), kBf16BytesPerToken, 0, 0), 17);
    // 16 blocks would hold the sequence only if the null block took no room: it does.
    EXPECT_THAT(error_of(options(std::to_string(16 << 14)), kBf16BytesPerToken),
                ::testing::HasSubstr("the KV cache has room for 16 blocks of 16 tokens, less than one 256-token "
                                     "sequence needs; raise --kv-cache-memory / --gpu-memory-utilization or lower "
                                     "--max-model-len"));
    // The same bytes hold half the blocks in f32.
    EXPECT_THAT(error_of(options(std::to_string(17 << 14)), kF32BytesPerToken),
                ::testing::HasSubstr("room for 8 blocks"));
    // Nothing of the RAM share left (here: no RAM): no KV cache at all.
    EngineOptions o = options("");
    EXPECT_THAT(error_of(o, kBf16BytesPerToken), ::testing::HasSubstr("room for 0 blocks"));
}

TEST(KvCacheNumBlocks, BadFlags) {
    EXPECT_THAT(error_of(options("2T"), kBf16BytesPerToken), ::testing::HasSubstr("unknown unit 'T'"));
    EXPECT_THAT(error_of(options("lots"), kBf16BytesPerToken), ::testing::HasSubstr("is not a size like 4G"));
    EXPECT_THAT(error_of(options("0"), kBf16BytesPerToken), ::testing::HasSubstr("--kv-cache-memory must be > 0"));
    EngineOptions o = options("1M");
    o.block_size = 0;
    EXPECT_THAT(error_of(o, kBf16BytesPerToken), ::testing::HasSubstr("--block-size must be >= 1; got 0"));
    o = options("1M");
    o.max_num_seqs = 0;
    EXPECT_THAT(error_of(o, kBf16BytesPerToken), ::testing::HasSubstr("--max-num-seqs must be >= 1; got 0"));
}

TEST(MakeEngineConfig, CopiesTheOptions) {
    EngineOptions o = options("1M");
    o.max_num_seqs = 3;
    o.max_num_batched_tokens = 512;
    o.enable_prefix_caching = false;
    o.seed = 7;
    o.scheduling_policy = "priority";
    model::ModelInfo info;
    info.kv_bytes_per_token = kBf16BytesPerToken;
    const engine::EngineConfig c = make_engine_config(o, {}, info, 0);
    EXPECT_EQ(c.max_num_seqs, 3);
    EXPECT_EQ(c.max_num_batched_tokens, 512);
    EXPECT_EQ(c.max_model_len, 256);
    EXPECT_EQ(c.block_size, 16);
    EXPECT_EQ(c.num_blocks, 3 * 16 + 1);
    EXPECT_FALSE(c.enable_prefix_caching);
    EXPECT_EQ(c.seed, 7u);
    EXPECT_EQ(c.scheduling_order, engine::SchedulingOrder::kPriority);
    o.scheduling_policy = "fcfs";
    EXPECT_EQ(make_engine_config(o, {}, info, 0).scheduling_order, engine::SchedulingOrder::kFcfs);
}

}  // namespace
}  // namespace moeserve::cli

namespace moeserve::cli {
namespace {

// Issue 34: each flag out of range is one sentence naming the flag, before any model file is read.
TEST(CheckEngineOptionsTest, FlagRangesNameTheFlag) {
    const auto message = [](auto change) {
        EngineOptions o;
        o.model = "/nonexistent/model";
        change(o);
        try {
            check_engine_options(o);
        } catch (const Error& e) {
            return std::string(e.what());
        }
        return std::string("no error");
    };
    EXPECT_NE(message([](EngineOptions& o) { o.max_num_seqs = 0; }).find("--max-num-seqs must be >= 1; got 0"),
              std::string::npos);
    EXPECT_NE(message([](EngineOptions& o) { o.threads = 0; }).find("--threads must be >= 1; got 0"),
              std::string::npos);
    EXPECT_NE(message([](EngineOptions& o) {
                  o.gpu_memory_utilization = 1.5;
              }).find("--gpu-memory-utilization must be in (0, 1]; got 1.5"),
              std::string::npos);
    EXPECT_NE(message([](EngineOptions& o) { o.gpu_memory_utilization = 0; }).find("--gpu-memory-utilization"),
              std::string::npos);
    EXPECT_NE(message([](EngineOptions& o) { o.max_num_batched_tokens = -3; }).find("--max-num-batched-tokens"),
              std::string::npos);
    // In range: the model is looked at next.
    EXPECT_NE(message([](EngineOptions&) {}).find("/nonexistent/model"), std::string::npos);
}

}  // namespace
}  // namespace moeserve::cli
