// KvCacheManager: block tables, prefix-cache hits with exact block ids, the one-token cap, and
// refusal without side effects when the pool is short.
#include "moeserve/engine/kv_cache/kv_cache_manager.h"

#include <gtest/gtest.h>

#include "engine/engine_test_util.h"

namespace moeserve::engine {
namespace {

using testing::make_request;
using Ids = std::vector<int32_t>;

TEST(KvCacheManagerTest, AllocatesBlocksAsTokensGrow) {
    // block_size 4: 10 prompt tokens -> 3 blocks (1 2 3); 2 more tokens fit; the 13th needs 4.
    KvCacheManager kv(8, 4, true);
    auto r = make_request("r0", 10, 8);
    auto b = kv.allocate_slots(*r, 10);
    ASSERT_TRUE(b);
    EXPECT_EQ(b->block_ids, (Ids{1, 2, 3}));
    r->num_computed_tokens = 10;
    EXPECT_EQ(kv.allocate_slots(*r, 2)->block_ids, Ids{});
    r->num_computed_tokens = 12;
    EXPECT_EQ(kv.allocate_slots(*r, 1)->block_ids, (Ids{4}));
    EXPECT_EQ(r->block_ids, (Ids{1, 2, 3, 4}));
    kv.free(*r);
    EXPECT_EQ(kv.pool().num_free_blocks(), 7);
    EXPECT_EQ(kv.pool().free_list(), (Ids{5, 6, 7, 4, 3, 2, 1}));  // tail blocks evicted first
}

TEST(KvCacheManagerTest, SharedPrefixHitsFullBlocksOnly) {
    // r0: 10 tokens = [b1 full][b2 full][b3 half]. r1, same 10 tokens: hits b1 b2 (8 tokens),
    // computes 2 in a new block. r2, same 8 tokens: the cap (one token left) leaves only b1.
    KvCacheManager kv(10, 4, true);
    auto r0 = make_request("r0", 10, 4);
    ASSERT_TRUE(kv.allocate_slots(*r0, 10, kv.find_cached_prefix(*r0)));
    auto r1 = make_request("r1", 10, 4);
    const CachedPrefix p1 = kv.find_cached_prefix(*r1);
    EXPECT_EQ(p1.block_ids, (Ids{1, 2}));
    EXPECT_EQ(p1.num_tokens, 8);
    ASSERT_EQ(kv.allocate_slots(*r1, 2, p1)->block_ids, (Ids{4}));
    EXPECT_EQ(r1->num_computed_tokens, 8);
    EXPECT_EQ(r1->block_ids, (Ids{1, 2, 4}));
    EXPECT_EQ(kv.pool().ref_count(1), 2);
    EXPECT_EQ(kv.pool().ref_count(3), 1);
    auto r2 = make_request("r2", 8, 4);
    EXPECT_EQ(kv.find_cached_prefix(*r2).block_ids, (Ids{1}));
    EXPECT_EQ(kv.prefix_cache_queries(), 20);
    EXPECT_EQ(kv.prefix_cache_hits(), 8);
}

TEST(KvCacheManagerTest, FreedCachedBlocksAreStillHits) {
    KvCacheManager kv(6, 4, true);
    auto r0 = make_request("r0", 9, 4);
    ASSERT_TRUE(kv.allocate_slots(*r0, 9));
    kv.free(*r0);
    EXPECT_EQ(kv.pool().num_free_blocks(), 5);
    auto r1 = make_request("r1", 9, 4);
    const CachedPrefix p = kv.find_cached_prefix(*r1);
    EXPECT_EQ(p.block_ids, (Ids{1, 2}));
    // 1 new block + 2 revived free hits
    EXPECT_EQ(kv.num_blocks_needed(*r1, 1, p), 3);
}

TEST(KvCacheManagerTest, CacheSaltsSeparatePrefixes) {
    KvCacheManager kv(12, 4, true);
    auto r0 = make_request("r0", 9, 4);
    r0->sampling.cache_salt = "tenant-a";
    ASSERT_TRUE(kv.allocate_slots(*r0, 9, kv.find_cached_prefix(*r0)));
    auto unsalted = make_request("r1", 9, 4);  // same tokens
    EXPECT_EQ(kv.find_cached_prefix(*unsalted).block_ids, Ids{});
    auto other = make_request("r1", 9, 4);
    other->sampling.cache_salt = "tenant-b";
    EXPECT_EQ(kv.find_cached_prefix(*other).block_ids, Ids{});
    auto same = make_request("r2", 9, 4);
    same->sampling.cache_salt = "tenant-a";
    EXPECT_EQ(kv.find_cached_prefix(*same).block_ids, (Ids{1, 2}));
}

TEST(KvCacheManagerTest, PrefixCachingOffFindsNothing) {
    KvCacheManager kv(6, 4, false);
    auto r0 = make_request("r0", 9, 4);
    ASSERT_TRUE(kv.allocate_slots(*r0, 9));
    auto r1 = make_request("r1", 9, 4);
    EXPECT_TRUE(kv.find_cached_prefix(*r1).block_ids.empty());
}

TEST(KvCacheManagerTest, ShortPoolRefusesWithoutSideEffects) {
    KvCacheManager kv(4, 4, true);  // 3 usable blocks
    auto r0 = make_request("r0", 8, 4);
    ASSERT_TRUE(kv.allocate_slots(*r0, 8));
    auto r1 = make_request("r1", 8, 4, 9);
    EXPECT_FALSE(kv.allocate_slots(*r1, 8));
    EXPECT_TRUE(r1->block_ids.empty());
    EXPECT_EQ(r1->num_computed_tokens, 0);
    EXPECT_EQ(kv.pool().num_free_blocks(), 1);
}

TEST(KvCacheManagerTest, BlocksForBytes) {
    EXPECT_EQ(num_blocks_for_bytes(1 << 20, 1024, 16), 64);
    EXPECT_EQ(num_blocks_for_bytes(-5, 1024, 16), 0);
}

}  // namespace
}  // namespace moeserve::engine
