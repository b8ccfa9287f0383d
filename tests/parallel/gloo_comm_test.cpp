// Gloo across real processes on loopback: collectives, a dead peer, a desynchronized MoE
// exchange, a configuration mismatch. Every wait is bounded; no test waits past ~20 s.
#include "moeserve/parallel/gloo_comm.h"

#include "moeserve/core/error.h"

#include <gtest/gtest.h>

#include <chrono>

#include "moeserve/parallel/rendezvous.h"
#include "parallel/process_util.h"

namespace moeserve::parallel {
namespace {

using namespace std::chrono_literals;
using moeserve::testing::ExitStatus;

std::vector<ExitStatus> run_world(int world, const std::string& mode, int timeout_ms,
                                  const std::vector<std::string>& fingerprints = {},
                                  const std::vector<std::string>& extra = {}) {
    auto server = TcpStoreServer::start("127.0.0.1", 0);
    std::vector<pid_t> pids;
    for (int r = 0; r < world; ++r) {
        std::vector<std::string> argv{MOESERVE_PARALLEL_RANK_HELPER,
                                      "--rank",
                                      std::to_string(r),
                                      "--world",
                                      std::to_string(world),
                                      "--store",
                                      "127.0.0.1:" + std::to_string(server->port()),
                                      "--addr",
                                      "127.0.0.1",
                                      "--timeout-ms",
                                      std::to_string(timeout_ms),
                                      "--mode",
                                      mode};
        if (!fingerprints.empty()) {
            argv.push_back("--fingerprint");
            argv.push_back(fingerprints[static_cast<size_t>(r)]);
        }
        argv.insert(argv.end(), extra.begin(), extra.end());
        pids.push_back(moeserve::testing::spawn_process(argv));
        EXPECT_GT(pids.back(), 0);
    }
    return moeserve::testing::wait_all(pids, std::chrono::steady_clock::now() + 20s);
}

TEST(GlooCommTest, CollectivesAcrossFourProcesses) {
    const auto st = run_world(4, "check", 10000);
    for (size_t r = 0; r < st.size(); ++r) {
        EXPECT_FALSE(st[r].timed_out) << "rank " << r;
        EXPECT_EQ(st[r].code, 0) << "rank " << r;
    }
}

TEST(GlooCommTest, DeadPeerGivesUnavailableWithinTheTimeout) {
    const auto start = std::chrono::steady_clock::now();
    const auto st = run_world(3, "die", 3000);
    EXPECT_EQ(st[1].signal, SIGKILL);
    for (size_t r : {0u, 2u}) {
        EXPECT_FALSE(st[r].timed_out) << "rank " << r << " hung";
        EXPECT_EQ(st[r].code, 3) << "rank " << r << " should exit with Error kUnavailable";
    }
    EXPECT_LT(std::chrono::steady_clock::now() - start, 15s);
}

TEST(GlooCommTest, MismatchedMoeExchangeFailsInBoundedTime) {
    const auto st = run_world(2, "mismatch", 2000);
    for (size_t r = 0; r < st.size(); ++r) {
        EXPECT_FALSE(st[r].timed_out) << "rank " << r << " hung";
        EXPECT_NE(st[r].code, 0) << "rank " << r;
    }
}

// The desync guard (guarded_comm.h) across processes: rank 1 leaves out the second all-reduce of
// step 3. Each step's all-reduces have the same size, so Gloo cannot tell; the guard fails both
// ranks at step 4's first collective, naming both ranks (the helper checks its own message, and
// that it failed in under half the 20 s collective timeout: about 10 ms here).
TEST(GlooCommTest, SkippedCollectiveFailsEveryRankNamingBoth) {
    const auto st = run_world(2, "skip", 20000, {}, {"--skip", "ep:1:3:1"});
    for (size_t r = 0; r < st.size(); ++r) {
        EXPECT_FALSE(st[r].timed_out) << "rank " << r << " hung";
        EXPECT_EQ(st[r].code, 0) << "rank " << r << " (its stderr says what it saw)";
    }
}

TEST(GlooCommTest, ConfigurationMismatchIsRefused) {
    const auto st = run_world(2, "check", 5000, {"model=a dp=2", "model=b dp=2"});
    for (size_t r = 0; r < st.size(); ++r) {
        EXPECT_FALSE(st[r].timed_out) << "rank " << r;
        EXPECT_EQ(st[r].code, 2) << "rank " << r << " should refuse with kInvalidArgument";
    }
}

TEST(RendezvousTest, SetGetWait) {
    auto server = TcpStoreServer::start("127.0.0.1", 0);
    TcpStore a("127.0.0.1", server->port(), 2000ms);
    TcpStore b("127.0.0.1", server->port(), 2000ms);
    a.set("k", {'x', 'y'});
    b.wait({"k"});
    EXPECT_EQ(b.get("k"), (std::vector<char>{'x', 'y'}));
    EXPECT_THROW(b.wait({"missing"}, 100ms), Error);
}

// The store holds what anyone who reaches the head's port sends it, so what it keeps is bounded:
// 256 MiB stored, 16 MiB a value, 4 KiB a key.
TEST(RendezvousTest, WhatTheStoreKeepsIsBounded) {
    auto server = TcpStoreServer::start("127.0.0.1", 0);
    TcpStore stranger("127.0.0.1", server->port(), 5000ms);
    const std::vector<char> value(16u << 20, 'v');
    stranger.set("same", value);
    stranger.set("same", value);  // an overwrite takes no more room
    int stored = 1;
    try {
        for (; stored < 32; ++stored) stranger.set("k" + std::to_string(stored), value);
        FAIL() << "the store took 32 values of 16 MiB";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("is full"), std::string::npos) << e.what();
    }
    EXPECT_EQ(stored, 15);  // 15 x (16 MiB + key) fit in 256 MiB, the 16th does not
    // What is left below the bound still takes small values.
    EXPECT_THROW(stranger.set("another", value), Error);
    stranger.set("small", {'x'});
    std::vector<char> got;
    EXPECT_TRUE(stranger.try_get("small", got));
    EXPECT_THROW(stranger.set(std::string(5000, 'k'), {'x'}), Error);  // too long a key: connection closed
    TcpStore rank("127.0.0.1", server->port(), 2000ms);
    EXPECT_TRUE(rank.try_get("small", got));
}

TEST(RendezvousTest, UnreachableStoreIsUnavailable) {
    int port = 0;
    {
        auto server = TcpStoreServer::start("127.0.0.1", 0);
        port = server->port();
    }
    try {
        TcpStore s("127.0.0.1", port, 300ms);
        FAIL();
    } catch (const Error& e) {
        EXPECT_EQ(e.code(), ErrorCode::kUnavailable);
    }
}

}  // namespace
}  // namespace moeserve::parallel
