// Rank layout: the table in layout.h, EP smaller than the world, validation messages.
#include "moeserve/parallel/layout.h"

#include <gtest/gtest.h>

#include "moeserve/core/error.h"

namespace moeserve::parallel {
namespace {

using V = std::vector<int>;

TEST(LayoutTest, Dp2Tp2Ep4MatchesHeaderTable) {
    const ParallelSizes s = make_sizes(2, 2, true);
    EXPECT_EQ(s.ep, 4);
    const V tp[] = {{0, 1}, {0, 1}, {2, 3}, {2, 3}};
    const V dp[] = {{0, 2}, {1, 3}, {0, 2}, {1, 3}};
    for (int r = 0; r < 4; ++r) {
        const RankGroups g = rank_groups(s, r);
        EXPECT_EQ(g.dp_rank, r / 2);
        EXPECT_EQ(g.tp_rank, r % 2);
        EXPECT_EQ(g.ep_rank, r);
        EXPECT_EQ(g.tp_group, tp[r]);
        EXPECT_EQ(g.dp_group, dp[r]);
        EXPECT_EQ(g.ep_group, (V{0, 1, 2, 3}));
    }
    EXPECT_EQ(rank_tag(rank_groups(s, 3)), "dp1 tp1");
}

TEST(LayoutTest, EpSmallerThanWorldRepeatsShards) {
    const ParallelSizes s{4, 1, 2};
    validate(s);
    EXPECT_EQ(rank_groups(s, 0).ep_group, (V{0, 1}));
    EXPECT_EQ(rank_groups(s, 3).ep_group, (V{2, 3}));
    EXPECT_EQ(rank_groups(s, 3).ep_rank, 1);
    EXPECT_EQ(rank_groups(s, 2).ep_group_index, 1);
    EXPECT_EQ(rank_groups(s, 2).dp_group, (V{0, 1, 2, 3}));
    EXPECT_EQ(rank_groups(s, 2).tp_group, (V{2}));
}

TEST(LayoutTest, EpInsideTpGroup) {
    const ParallelSizes s{1, 4, 2};
    EXPECT_EQ(rank_groups(s, 1).ep_group, (V{0, 1}));
    EXPECT_EQ(rank_groups(s, 2).ep_group, (V{2, 3}));
    EXPECT_EQ(rank_groups(s, 2).tp_group, (V{0, 1, 2, 3}));
}

TEST(LayoutTest, WithoutExpertParallelEpIsOne) {
    const ParallelSizes s = make_sizes(2, 2, false);
    EXPECT_EQ(s.ep, 1);
    EXPECT_EQ(rank_groups(s, 3).ep_group, (V{3}));
}

// The lock-step rule: only an EP group that spans several DP groups ties their steps together.
TEST(LayoutTest, DpGroupsStepTogetherOnlyWithEpAcrossThem) {
    EXPECT_TRUE(dp_groups_step_together(make_sizes(2, 1, true)));
    EXPECT_TRUE(dp_groups_step_together(make_sizes(2, 2, true)));
    EXPECT_TRUE(dp_groups_step_together(ParallelSizes{4, 1, 2}));    // EP groups of two DP groups each
    EXPECT_FALSE(dp_groups_step_together(make_sizes(2, 2, false)));  // DP without EP
    EXPECT_FALSE(dp_groups_step_together(make_sizes(1, 4, true)));   // one DP group
    EXPECT_FALSE(dp_groups_step_together(ParallelSizes{2, 4, 2}));   // EP inside each TP group
}

TEST(LayoutTest, ValidationNamesTheSizes) {
    try {
        validate({2, 3, 4});
        FAIL();
    } catch (const Error& e) {
        EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
        EXPECT_NE(std::string(e.what()).find("must divide"), std::string::npos) << e.what();
        EXPECT_NE(std::string(e.what()).find("ep 4"), std::string::npos) << e.what();
    }
    EXPECT_THROW(validate({0, 1, 1}), Error);
}

}  // namespace
}  // namespace moeserve::parallel
