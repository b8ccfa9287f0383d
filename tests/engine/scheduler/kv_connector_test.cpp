// The scheduler's KV connector seam (scheduler/kv_connector.h) with a scripted transport of the
// test's own: a second transport plugs in without scheduler code. Requests named "remote*" load
// their prompt's KV from elsewhere; "hold*" ones are held after they finish until released.
#include "moeserve/engine/scheduler/kv_connector.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <utility>

#include "engine/engine_test_util.h"
#include "engine/scheduler/scheduler_harness.h"

namespace moeserve::engine {
namespace {

using testing::config;
using testing::Harness;
using testing::make_request;
using testing::Progress;

class ScriptedConnector final : public KvConnector {
public:
    std::vector<std::string> calls;                           // hooks with the request's id, in order
    std::vector<std::string> released;                        // the next take_released()
    std::vector<KvLoadResult> loads;                          // the next take_finished_loads()
    std::map<std::string, std::vector<int32_t>> load_blocks;  // what start_load was given

    std::optional<ipc::RequestOutput> request_added(const Request& r) override {
        calls.push_back("added:" + r.request_id);
        if (!r.request_id.starts_with("hold")) return std::nullopt;
        ipc::RequestOutput announcement;
        announcement.request_id = r.request_id;
        announcement.kv_transfer_endpoint = "test://" + r.request_id;
        return announcement;
    }
    bool loads_remotely(const Request& r) const override { return r.request_id.starts_with("remote"); }
    void before_schedule() override {}
    std::vector<std::string> take_released() override { return std::exchange(released, {}); }
    std::vector<KvLoadResult> take_finished_loads() override { return std::exchange(loads, {}); }
    void start_load(const Request& r, int32_t cached_blocks) override {
        calls.push_back("load:" + r.request_id);
        EXPECT_EQ(cached_blocks, 0);
        load_blocks[r.request_id] = r.block_ids;
    }
    void request_preempted(const Request& r) override { calls.push_back("preempted:" + r.request_id); }
    void request_aborted(const Request& r) override { calls.push_back("aborted:" + r.request_id); }
    bool request_finished(const Request& r, FinishReason reason) override {
        calls.push_back("finished:" + r.request_id);
        return r.request_id.starts_with("hold") && reason == FinishReason::kLength;
    }
    void outputs_ready(std::vector<ipc::RequestOutput>& outputs) override {
        for (auto& o : outputs) {
            if (o.finish_reason != FinishReason::kNone && o.request_id.starts_with("hold")) {
                o.kv_transfer_endpoint = "test://held";
            }
        }
    }
    bool called(const std::string& call) const { return std::find(calls.begin(), calls.end(), call) != calls.end(); }
};

// A scheduler of 32 blocks of 4 tokens with the scripted connector.
class KvConnectorTest : public ::testing::Test {
protected:
    KvConnectorTest() { h.scheduler.set_kv_connector(&c); }
    // Queues a remote request of 10 prompt tokens and lets the connector start its load.
    void load_remote0() {
        h.scheduler.add_request(make_request("remote0", 10, 3));
        h.scheduler.poll_kv_connector();
    }
    Harness h{32, 4, config(8, 64)};
    ScriptedConnector c;
};

KvLoadResult loaded(const std::string& id, int32_t first_token, std::string error = "") {
    KvLoadResult r;
    r.request_id = id;
    r.error = std::move(error);
    r.meta.first_token = first_token;
    return r;
}

TEST_F(KvConnectorTest, ARemoteLoadRunsOnAsIfPrefilledHere) {
    load_remote0();
    ASSERT_TRUE(c.called("load:remote0"));
    EXPECT_EQ(c.load_blocks["remote0"].size(), 3u);  // the whole prompt: 10 tokens in blocks of 4
    EXPECT_EQ(h.scheduler.num_remote_waiting(), 1);
    EXPECT_EQ(h.step(), Progress{});  // loading: nothing of it runs
    c.loads.push_back(loaded("remote0", 9));
    h.scheduler.poll_kv_connector();
    const std::vector<ipc::RequestOutput> first = h.scheduler.take_finished();
    ASSERT_EQ(first.size(), 1u);
    EXPECT_EQ(first[0].new_token_ids, std::vector<int32_t>{9});  // the producer's token, as if sampled here
    EXPECT_EQ(h.scheduler.num_remote_waiting(), 0);
    EXPECT_EQ(h.step(), (Progress{{"remote0", 1}}));  // a decode: the prompt is not computed again
    EXPECT_EQ(h.step(), (Progress{{"remote0", 1}}));
    EXPECT_EQ(h.finish_of("remote0"), FinishReason::kLength);
    EXPECT_TRUE(c.called("finished:remote0"));
    EXPECT_EQ(h.kv.pool().num_free_blocks(), 31);
}

TEST_F(KvConnectorTest, AHeldRequestKeepsItsBlocksUntilReleased) {
    h.scheduler.add_request(make_request("hold0", 6, 1));
    const std::vector<ipc::RequestOutput> announced = h.scheduler.take_finished();  // before any step
    ASSERT_EQ(announced.size(), 1u);
    EXPECT_EQ(announced[0].kv_transfer_endpoint, "test://hold0");
    EXPECT_EQ(h.step(), (Progress{{"hold0", 6}}));
    EXPECT_EQ(h.finish_of("hold0"), FinishReason::kLength);
    EXPECT_EQ(h.outputs.back().kv_transfer_endpoint, "test://held");  // the connector saw its final output
    EXPECT_EQ(h.scheduler.num_held(), 1);
    EXPECT_EQ(h.kv.pool().num_free_blocks(), 29);  // its 2 blocks stay
    h.scheduler.poll_kv_connector();
    EXPECT_EQ(h.scheduler.num_held(), 1);
    c.released.push_back("hold0");
    h.scheduler.poll_kv_connector();
    EXPECT_EQ(h.scheduler.num_held(), 0);
    EXPECT_EQ(h.kv.pool().num_free_blocks(), 31);
}

TEST_F(KvConnectorTest, AFailedLoadFailsTheRequestAndFreesItsBlocks) {
    load_remote0();
    c.loads.push_back(loaded("remote0", 0, "the producer went away"));
    h.scheduler.poll_kv_connector();
    const std::vector<ipc::RequestOutput> out = h.scheduler.take_finished();
    ASSERT_EQ(out.size(), 1u);
    EXPECT_EQ(out[0].finish_reason, FinishReason::kError);
    EXPECT_EQ(out[0].error, "the producer went away");
    EXPECT_FALSE(h.scheduler.has_unfinished_requests());
    EXPECT_EQ(h.kv.pool().num_free_blocks(), 31);
}

TEST_F(KvConnectorTest, AnAbortWhileLoadingAnswersAtOnceAndFreesTheBlocksWhenTheLoadEnds) {
    load_remote0();
    const std::string id = "remote0";
    h.scheduler.abort_requests(std::span<const std::string>(&id, 1));
    EXPECT_TRUE(c.called("aborted:remote0"));
    const std::vector<ipc::RequestOutput> out = h.scheduler.take_finished();
    ASSERT_EQ(out.size(), 1u);
    EXPECT_EQ(out[0].finish_reason, FinishReason::kAbort);
    EXPECT_EQ(h.kv.pool().num_free_blocks(), 28);  // the load may still write them
    EXPECT_FALSE(c.called("finished:remote0"));
    c.loads.push_back(loaded("remote0", 9));
    h.scheduler.poll_kv_connector();
    EXPECT_TRUE(c.called("finished:remote0"));
    EXPECT_EQ(h.kv.pool().num_free_blocks(), 31);
    EXPECT_TRUE(h.scheduler.take_finished().empty());  // its abort was its last output
}

TEST(KvConnectorPreemption, IsReportedBeforeTheBlocksAreReused) {
    // 3 usable blocks of 4 tokens: two 4-token prompts decode until the second block of one of
    // them does not fit, and the youngest is preempted.
    Harness h(4, 4, config(8, 64));
    ScriptedConnector c;
    h.scheduler.set_kv_connector(&c);
    h.scheduler.add_request(make_request("r0", 4, 8));
    h.scheduler.add_request(make_request("r1", 4, 8, 20));
    for (int i = 0; i < 8 && h.batch.preempted.empty(); ++i) h.step();
    ASSERT_EQ(h.batch.preempted, std::vector<std::string>{"r1"});
    EXPECT_TRUE(c.called("preempted:r1"));
    EXPECT_FALSE(c.called("preempted:r0"));
}

}  // namespace
}  // namespace moeserve::engine
