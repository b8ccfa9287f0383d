// RankRestarts: the crash-loop bound of self-healing groups (--max-rank-restarts).
#include "moeserve/cli/rank_restarts.h"

#include <gtest/gtest.h>

namespace moeserve::cli {
namespace {

TEST(RankRestartsTest, CountsInARowUntilTheGroupServesAgain) {
    RankRestarts r(2);
    EXPECT_TRUE(r.allow(1));
    EXPECT_TRUE(r.allow(1));
    r.serving_again();  // the group re-formed and served: the count starts over
    EXPECT_EQ(r.in_a_row(1), 0);
    EXPECT_TRUE(r.allow(1));
    EXPECT_TRUE(r.allow(0));  // counted per rank
    EXPECT_TRUE(r.allow(1));
    EXPECT_FALSE(r.given_up());
}

TEST(RankRestartsTest, ACrashLoopGivesTheGroupUpForGood) {
    RankRestarts r(2);
    EXPECT_TRUE(r.allow(3));
    EXPECT_TRUE(r.allow(3));
    EXPECT_FALSE(r.allow(3));  // a third death before the group served again
    EXPECT_TRUE(r.given_up());
    r.serving_again();
    EXPECT_FALSE(r.allow(0));  // no rank is restarted once the group is given up
}

TEST(RankRestartsTest, IndependentGroupsAreGivenUpApart) {
    RankRestarts r(1);
    EXPECT_TRUE(r.allow(2, 1));
    EXPECT_FALSE(r.allow(2, 1));  // DP group 1's crash loop
    EXPECT_TRUE(r.given_up(1));
    EXPECT_FALSE(r.given_up(0));
    EXPECT_TRUE(r.allow(0, 0));  // DP group 0 is still restarted
    EXPECT_FALSE(r.allow(3, 1));
}

}  // namespace
}  // namespace moeserve::cli
