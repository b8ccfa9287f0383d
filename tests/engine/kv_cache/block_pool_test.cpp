// BlockPool: allocation order, ref counts, eviction order of freed (cached) blocks.
#include "moeserve/engine/kv_cache/block_pool.h"

#include <gtest/gtest.h>

namespace moeserve::engine {
namespace {

using Ids = std::vector<int32_t>;

TEST(BlockPoolTest, NullBlockIsNeverHandedOut) {
    BlockPool pool(5);
    EXPECT_EQ(pool.num_free_blocks(), 4);
    EXPECT_EQ(pool.allocate(4), (Ids{1, 2, 3, 4}));
    EXPECT_EQ(pool.num_free_blocks(), 0);
    EXPECT_EQ(pool.ref_count(0), 1);
    EXPECT_FLOAT_EQ(pool.usage(), 1.0f);
}

TEST(BlockPoolTest, FreedBlocksReturnInEvictionOrder) {
    // allocate 1 2 3 4; free 3 then 1 -> free list: 5 6 3 1 (oldest first)
    BlockPool pool(7);
    EXPECT_EQ(pool.allocate(4), (Ids{1, 2, 3, 4}));
    pool.free(Ids{3, 1});
    EXPECT_EQ(pool.free_list(), (Ids{5, 6, 3, 1}));
    EXPECT_EQ(pool.allocate(3), (Ids{5, 6, 3}));
    EXPECT_EQ(pool.free_list(), (Ids{1}));
}

TEST(BlockPoolTest, RefCountsShareAndRelease) {
    BlockPool pool(4);
    const Ids a = pool.allocate(2);  // 1 2
    pool.touch(a);                   // a second owner
    EXPECT_EQ(pool.ref_count(1), 2);
    pool.free(a);
    EXPECT_EQ(pool.ref_count(1), 1);
    EXPECT_EQ(pool.num_free_blocks(), 1);
    pool.free(a);
    EXPECT_EQ(pool.num_free_blocks(), 3);
    EXPECT_EQ(pool.free_list(), (Ids{3, 1, 2}));
}

TEST(BlockPoolTest, CachedBlockIsReusedUntilEvicted) {
    // block 1 caches hash 42; freed, it stays findable; a touch revives it; reallocation evicts.
    BlockPool pool(3);
    const Ids a = pool.allocate(1);
    pool.cache_block(a[0], 42);
    pool.free(a);
    ASSERT_EQ(pool.lookup(42), 1);
    pool.touch(Ids{1});
    EXPECT_EQ(pool.free_list(), (Ids{2}));
    pool.free(Ids{1});
    EXPECT_EQ(pool.free_list(), (Ids{2, 1}));
    EXPECT_EQ(pool.allocate(2), (Ids{2, 1}));  // 1 evicted: its hash is gone
    EXPECT_FALSE(pool.lookup(42).has_value());
    EXPECT_FALSE(pool.block_hash(1).has_value());
}

TEST(BlockPoolTest, FirstBlockOfAHashKeepsIt) {
    BlockPool pool(3);
    const Ids a = pool.allocate(2);
    pool.cache_block(a[0], 7);
    pool.cache_block(a[1], 7);
    EXPECT_EQ(pool.lookup(7), 1);
    EXPECT_FALSE(pool.block_hash(2).has_value());
    EXPECT_TRUE(pool.reset_prefix_cache());
    EXPECT_FALSE(pool.lookup(7).has_value());
}

}  // namespace
}  // namespace moeserve::engine
