// EngineClient's DP routing: requests go to the engine with the fewest outstanding tokens (prompt
// not yet prefilled + output still owed), not the fewest requests; outputs pay the debt back.
// Two fake engines over real ipc:// sockets.
#include "moeserve/serve/engine_client.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <functional>
#include <mutex>
#include <map>
#include <thread>

#include "test_support.h"

namespace moeserve::serve {
namespace {

ipc::AddRequest make_request(const std::string& id, int prompt_tokens, int max_tokens) {
    ipc::AddRequest r;
    r.request_id = id;
    r.prompt_token_ids.assign(static_cast<size_t>(prompt_tokens), 7);
    r.sampling.max_tokens = max_tokens;
    return r;
}

// The id of the next AddRequest the fake engine receives (empty if none within 5 s).
std::string next_add(ipc::EngineChannel& engine) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    while (std::chrono::steady_clock::now() < deadline) {
        const auto m = engine.receive(100);
        if (!m) continue;
        if (const auto* add = std::get_if<ipc::AddRequest>(&*m)) return add->request_id;
    }
    return "";
}

// An EngineClient over two fake engines (channels on scratch ipc sockets) that both said ready.
struct TwoEngines {
    explicit TwoEngines(const std::string& name)
        : dir(moeserve::test::scratch_dir(name + "_" + std::to_string(getpid()))),
          out("ipc://" + (dir / "out").string()),
          in{"ipc://" + (dir / "in0").string(), "ipc://" + (dir / "in1").string()},
          client({.output_address = out, .input_addresses = in, .heartbeat_timeout_ms = 30000}, logger),
          e0(in[0], out),
          e1(in[1], out) {
        e0.send(ipc::HealthReply{0, true, "ready"});
        e1.send(ipc::HealthReply{1, true, "ready"});
    }
    ~TwoEngines() { std::filesystem::remove_all(dir); }
    std::filesystem::path dir;
    std::string out;
    std::vector<std::string> in;
    Logger logger{"test", LogLevel::kError};
    EngineClient client;
    ipc::EngineChannel e0, e1;
};

// The final reason of each request whose callbacks it made (kNone: none yet). Thread-safe.
class Finishes {
public:
    EngineClient::OutputCallback of(const std::string& id) {
        return [this, id](const ipc::RequestOutput& o) {
            std::lock_guard lock(mutex_);
            if (o.finish_reason != ipc::FinishReason::kNone) finished_[id] = o.finish_reason;
        };
    }
    ipc::FinishReason operator()(const std::string& id) const {
        std::lock_guard lock(mutex_);
        const auto it = finished_.find(id);
        return it == finished_.end() ? ipc::FinishReason::kNone : it->second;
    }

private:
    mutable std::mutex mutex_;
    std::map<std::string, ipc::FinishReason> finished_;
};

// Polls done() for up to 2 s.
bool wait_until(const std::function<bool()>& done) {
    for (int i = 0; i < 200 && !done(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
    return done();
}

// Engine `engine`'s step that produced one token of request `id`.
ipc::StepOutputs one_token(int engine, const std::string& id) {
    ipc::StepOutputs step;
    step.engine_index = engine;
    step.outputs.emplace_back();
    step.outputs.back().request_id = id;
    step.outputs.back().new_token_ids = {5};
    return step;
}

TEST(EngineClientTest, RoutesByOutstandingTokens) {
    TwoEngines t("engine_client");
    EngineClient& client = t.client;
    ipc::EngineChannel &e0 = t.e0, &e1 = t.e1;
    ASSERT_TRUE(client.wait_ready(5000));

    const auto ignore = [](const ipc::RequestOutput&) {};
    ASSERT_TRUE(client.add(make_request("long", 100, 100), ignore));  // tie -> engine 0
    EXPECT_EQ(next_add(e0), "long");
    for (int i = 0; i < 3; ++i) {  // 3 short requests: engine 1 still owes fewer tokens than engine 0
        ASSERT_TRUE(client.add(make_request("short" + std::to_string(i), 4, 4), ignore));
        EXPECT_EQ(next_add(e1), "short" + std::to_string(i));
    }
    EXPECT_EQ(client.outstanding_tokens(), (std::vector<int64_t>{200, 24}));
    EXPECT_EQ(client.requests_routed(), (std::vector<int64_t>{1, 3}));

    // Engine 0 prefills and samples 10 tokens: it now owes 90; then it finishes early (stop).
    ipc::StepOutputs step;
    step.engine_index = 0;
    ipc::RequestOutput first;
    first.request_id = "long";
    first.new_token_ids.assign(10, 1);
    step.outputs.push_back(first);
    e0.send(step);
    const auto wait_for = [&](std::vector<int64_t> want) {
        for (int i = 0; i < 100 && client.outstanding_tokens() != want; ++i)
            std::this_thread::sleep_for(std::chrono::milliseconds(20));
        return client.outstanding_tokens();
    };
    EXPECT_EQ(wait_for({90, 24}), (std::vector<int64_t>{90, 24}));
    step.outputs[0].new_token_ids = {1};
    step.outputs[0].finish_reason = ipc::FinishReason::kStop;
    e0.send(step);
    EXPECT_EQ(wait_for({0, 24}), (std::vector<int64_t>{0, 24}));
    EXPECT_EQ(client.num_in_flight(), 3);
    ASSERT_TRUE(client.add(make_request("next", 4, 4), ignore));  // engine 0 is the least loaded again
    EXPECT_EQ(next_add(e0), "next");
    client.shutdown();
}

// The step watchdog: an engine that answers heartbeats but completes no step while requests
// are in flight turns healthy() false (not dead: its requests stay), and true again once it steps.
TEST(EngineClientTest, StepWatchdogFlagsAnEngineThatStopsStepping) {
    const auto dir = moeserve::test::scratch_dir("engine_client_watchdog_" + std::to_string(getpid()));
    const std::string out = "ipc://" + (dir / "out").string();
    const std::vector<std::string> in = {"ipc://" + (dir / "in0").string()};
    Logger logger("test", LogLevel::kError);
    EngineClient client(
        {.output_address = out, .input_addresses = in, .heartbeat_timeout_ms = 30000, .step_watchdog_ms = 200}, logger);
    ipc::EngineChannel e0(in[0], out);
    e0.send(ipc::HealthReply{0, true, "ready"});
    ASSERT_TRUE(client.wait_ready(5000));
    ipc::StepOutputs heartbeat;  // no outputs, same step count: alive but not stepping
    heartbeat.engine_index = 0;
    heartbeat.stats.num_steps = 5;
    // Bounded wait for healthy() == want while the fake engine reports; when want is true it
    // steps with every report (as a live engine does), else it repeats the same step count.
    const auto until = [&](bool want) {
        for (int i = 0; i < 100 && client.healthy() != want; ++i) {
            if (want) heartbeat.stats.num_steps++;
            e0.send(heartbeat);
            std::this_thread::sleep_for(std::chrono::milliseconds(50));
        }
        return client.healthy();
    };
    // Idle: no work in flight, so silence about steps is fine.
    e0.send(heartbeat);
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
    EXPECT_TRUE(client.healthy());

    ASSERT_TRUE(client.add(make_request("r", 4, 4), [](const ipc::RequestOutput&) {}));
    EXPECT_EQ(next_add(e0), "r");
    EXPECT_FALSE(until(false)) << "the watchdog did not fire";
    EXPECT_EQ(client.num_in_flight(), 1);  // stalled, not failed

    EXPECT_TRUE(until(true));  // it steps again
    client.shutdown();
    std::filesystem::remove_all(dir);
}

TEST(EngineClientTest, ARecoveringEngineKeepsItsQueueAndARestartedOneReplaysWhatNeverRan) {
    // Self-healing groups: an engine whose group re-forms says "recovering" (its running requests
    // failed on its side: their outputs came), keeps the rest and takes no new ones until ready.
    // An engine whose process is restarted has its started requests failed here; those that
    // produced nothing go to an engine again once one is ready.
    TwoEngines t("engine_client_heal");
    EngineClient& client = t.client;
    ipc::EngineChannel &e0 = t.e0, &e1 = t.e1;
    ASSERT_TRUE(client.wait_ready(5000));
    Finishes finish_of;
    ASSERT_TRUE(client.add(make_request("queued0", 4, 4), finish_of.of("queued0")));  // tie -> engine 0
    EXPECT_EQ(next_add(e0), "queued0");
    ASSERT_TRUE(client.add(make_request("started1", 4, 4), finish_of.of("started1")));
    EXPECT_EQ(next_add(e1), "started1");
    e1.send(one_token(1, "started1"));
    EXPECT_TRUE(wait_until([&] { return client.outstanding_tokens()[1] == 3; }));
    ASSERT_TRUE(client.add(make_request("queued1", 64, 4), finish_of.of("queued1")));  // engine 1 owes less
    EXPECT_EQ(next_add(e1), "queued1");

    e0.send(ipc::HealthReply{0, false, "regrouping", /*recovering=*/true});
    client.mark_restarting(1, "rank 1 died");
    EXPECT_TRUE(wait_until([&] { return client.num_recovering() == 2; }));
    EXPECT_TRUE(wait_until([&] { return finish_of("started1") == ipc::FinishReason::kError; }));
    EXPECT_EQ(finish_of("queued0"), ipc::FinishReason::kNone);  // still waiting on engine 0
    EXPECT_EQ(finish_of("queued1"), ipc::FinishReason::kNone);  // waits for an engine
    EXPECT_EQ(client.num_in_flight(), 2);
    EXPECT_FALSE(client.healthy());
    EXPECT_NE(client.unhealthy_reason().find("recovering"), std::string::npos) << client.unhealthy_reason();
    EXPECT_FALSE(client.accepting());
    EXPECT_FALSE(client.add(make_request("refused", 4, 4), finish_of.of("refused")));

    e1.send(ipc::HealthReply{1, true, "ready"});  // the restarted process: queued1 goes to it
    EXPECT_EQ(next_add(e1), "queued1");
    e0.send(ipc::HealthReply{0, true, "ready"});
    EXPECT_TRUE(wait_until([&] { return client.healthy(); })) << client.unhealthy_reason();
    EXPECT_EQ(client.num_recovering(), 0);
    EXPECT_EQ(client.num_in_flight(), 2);
}

TEST(EngineClientTest, ANoticeThatComesAfterTheEngineRecoveredChangesNoState) {
    // With --api-server-count the launcher's notices come through a file, and can arrive after the
    // group re-formed: a late "recovering" is ignored; a late "restarting" fails or sends again only
    // the requests the dead process had, not those of the new one.
    TwoEngines t("engine_client_late_notice");
    EngineClient& client = t.client;
    ASSERT_TRUE(client.wait_ready(5000));
    Finishes finish_of;
    ASSERT_TRUE(client.add(make_request("old0", 4, 4), finish_of.of("old0")));  // tie -> engine 0
    ASSERT_TRUE(client.add(make_request("old1", 4, 4), finish_of.of("old1")));
    EXPECT_EQ(next_add(t.e1), "old1");
    t.e1.send(one_token(1, "old1"));  // old1 started on engine 1's old process
    EXPECT_TRUE(wait_until([&] { return client.outstanding_tokens()[1] == 3; }));
    const int64_t died = EngineClient::steady_now_ms();
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
    t.e0.send(ipc::HealthReply{0, true, "ready"});  // both said ready after the death
    t.e1.send(ipc::HealthReply{1, true, "ready"});
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    ASSERT_TRUE(client.add(make_request("new1", 64, 4), finish_of.of("new1")));  // engine 1 owes less
    EXPECT_EQ(next_add(t.e1), "new1");

    client.mark_recovering(0, "rank 1 died", died);
    client.mark_restarting(1, "rank 1 died", died);
    EXPECT_TRUE(wait_until([&] { return finish_of("old1") == ipc::FinishReason::kError; }));
    EXPECT_TRUE(client.healthy()) << client.unhealthy_reason();
    EXPECT_EQ(finish_of("new1"), ipc::FinishReason::kNone);
    EXPECT_EQ(finish_of("old0"), ipc::FinishReason::kNone);
    EXPECT_EQ(client.num_in_flight(), 2);
    client.mark_recovering(0, "rank 1 died");  // a notice of now: it counts
    EXPECT_FALSE(client.healthy());
}

}  // namespace
}  // namespace moeserve::serve
