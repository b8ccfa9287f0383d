// The engine event log of --api-server-count: what the parent appends, each API server replays
// (whole lines only, malformed ones skipped, a restarted server taking only the restart counts).
#include "moeserve/cli/engine_notices.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <fstream>

#include "test_support.h"

namespace moeserve::cli {
namespace {

struct Recorded : EngineNotices {
    std::vector<std::string> seen;
    void restarting(int engine, const std::string& why, int64_t died_ms) override {
        seen.push_back(fmt::format("restarting {} {} {}", engine, died_ms, why));
    }
    void recovering(int engine, const std::string& why, int64_t died_ms) override {
        seen.push_back(fmt::format("recovering {} {} {}", engine, died_ms, why));
    }
    void dead(int engine, const std::string& why) override { seen.push_back(fmt::format("dead {} {}", engine, why)); }
    void group_restarted() override { seen.emplace_back("group_restarted"); }
    std::optional<bool> all_healthy() const override { return std::nullopt; }
};

TEST(EngineNoticesTest, WhatTheParentWritesEveryServerReplaysOnce) {
    const std::string path = (test::scratch_dir("engine_notices") / "engines.events").string();
    EngineEventLogWriter writer(path);
    EngineEventLogReader reader(path), late(path);
    Recorded a, b;
    EXPECT_EQ(reader.replay(a), 0);  // no log yet
    writer.group_restarted();
    writer.restarting(1, "rank 1\twas\nkilled", 1234);
    writer.recovering(0, "rank 1 was killed", 1234);
    EXPECT_EQ(reader.replay(a), 0);
    EXPECT_EQ(a.seen, (std::vector<std::string>{"group_restarted", "restarting 1 1234 rank 1 was killed",
                                                "recovering 0 1234 rank 1 was killed"}));
    EXPECT_FALSE(writer.engine_lost());
    late.skip_past(b);  // a restarted server: only the counts of the past
    EXPECT_EQ(b.seen, (std::vector<std::string>{"group_restarted"}));
    {
        std::ofstream out(path, std::ios::app);
        out << "nonsense\n"
            << "dead\tx\t-1\twhy\n"
            << "dead\t1\t-1\tpart";  // the last line is not whole yet
    }
    EXPECT_EQ(reader.replay(a), 0);
    EXPECT_EQ(a.seen.size(), 3u);
    {
        std::ofstream out(path, std::ios::app);
        out << " of it\n";
    }
    writer.dead(0, "gone");
    EXPECT_TRUE(writer.engine_lost());
    EXPECT_EQ(reader.replay(a), 2);
    EXPECT_EQ(a.seen.back(), "dead 0 gone");
    EXPECT_EQ(a.seen[3], "dead 1 part of it");
    EXPECT_EQ(late.replay(b), 2);
    EXPECT_EQ(reader.replay(a), 0);  // nothing new
}

}  // namespace
}  // namespace moeserve::cli
