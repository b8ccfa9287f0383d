// The ZeroMQ channel over ipc:// in one process: messages both ways, several engines, and the
// disconnect event when an engine goes away. Every wait is bounded.
#include "moeserve/ipc/channel.h"

#include <gtest/gtest.h>

#include "moeserve/core/error.h"
#include "test_support.h"

namespace moeserve::ipc {
namespace {

struct Addresses {
    std::string output;
    std::vector<std::string> inputs;
};

Addresses make_addresses(const std::string& name, int engines) {
    const auto dir = test::scratch_dir(name);
    Addresses a{"ipc://" + (dir / "out").string(), {}};
    for (int i = 0; i < engines; ++i) a.inputs.push_back("ipc://" + (dir / ("in" + std::to_string(i))).string());
    return a;
}

// Polls until an event of kind arrives (at most 5 s).
ServerChannel::Event wait_for(ServerChannel& server, ServerChannel::Event::Kind kind) {
    for (int i = 0; i < 50; ++i) {
        auto e = server.poll(100);
        if (e.kind == kind) return e;
    }
    return {};
}

TEST(ChannelTest, MessagesFlowBothWays) {
    const auto a = make_addresses("channel_both_ways", 1);
    ServerChannel server(a.output, a.inputs);
    EngineChannel engine(a.inputs[0], a.output);
    EXPECT_EQ(wait_for(server, ServerChannel::Event::Kind::kConnected).engine, 0);
    AddRequest add;
    add.request_id = "x";
    add.prompt_token_ids = {1, 2};
    ASSERT_TRUE(server.send(0, add));
    const auto got = engine.receive(5000);
    ASSERT_TRUE(got.has_value());
    EXPECT_EQ(std::get<AddRequest>(*got).request_id, "x");
    EXPECT_FALSE(engine.receive(0).has_value());
    ASSERT_TRUE(engine.send(HealthReply{0, true, "ready"}));
    const auto e = wait_for(server, ServerChannel::Event::Kind::kMessage);
    ASSERT_TRUE(e.message.has_value());
    EXPECT_EQ(std::get<HealthReply>(*e.message).detail, "ready");
}

TEST(ChannelTest, EachEngineGetsItsOwnRequests) {
    const auto a = make_addresses("channel_two_engines", 2);
    ServerChannel server(a.output, a.inputs);
    EngineChannel e0(a.inputs[0], a.output), e1(a.inputs[1], a.output);
    ASSERT_TRUE(server.send(1, Abort{{"for-1"}}));
    ASSERT_TRUE(server.send(0, Abort{{"for-0"}}));
    EXPECT_EQ(std::get<Abort>(*e0.receive(5000)).request_ids[0], "for-0");
    EXPECT_EQ(std::get<Abort>(*e1.receive(5000)).request_ids[0], "for-1");
}

TEST(ChannelTest, DisconnectIsReported) {
    const auto a = make_addresses("channel_disconnect", 1);
    ServerChannel server(a.output, a.inputs);
    {
        EngineChannel engine(a.inputs[0], a.output);
        EXPECT_EQ(wait_for(server, ServerChannel::Event::Kind::kConnected).engine, 0);
    }
    EXPECT_EQ(wait_for(server, ServerChannel::Event::Kind::kDisconnected).engine, 0);
}

TEST(ChannelTest, PollTimesOut) {
    const auto a = make_addresses("channel_timeout", 1);
    ServerChannel server(a.output, a.inputs);
    EXPECT_EQ(server.poll(10).kind, ServerChannel::Event::Kind::kTimeout);
}

TEST(ChannelTest, BindingABadAddressRaises) {
    EXPECT_THROW(ServerChannel("ipc:///nonexistent-dir/out", {}), Error);
    EXPECT_THROW(ServerChannel("nonsense://x", {}), Error);
}

}  // namespace
}  // namespace moeserve::ipc
