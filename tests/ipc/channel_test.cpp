// The ZeroMQ channel over ipc:// in one process: messages both ways, several engines, and the
// disconnect event when an engine goes away. Every wait is bounded.
#include "moeserve/ipc/channel.h"

#include <gtest/gtest.h>

#include <chrono>

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

// Polls until an event of kind arrives, for at most 5 s however many other events arrive first
// (a rejected stranger reconnects every 100 ms, each attempt bringing several events).
ServerChannel::Event wait_for(ServerChannel& server, ServerChannel::Event::Kind kind) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    while (std::chrono::steady_clock::now() < deadline) {
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

constexpr const char* kKey = "a-test-rank-plane-key-of-enough-length-0123";

TEST(ChannelAuthTest, EnginesWithTheKeyTalk) {
    const auto a = make_addresses("channel_auth_ok", 1);
    ServerChannel server(a.output, a.inputs, {.rank_plane_key = kKey});
    EngineChannel engine(a.inputs[0], a.output, {.rank_plane_key = kKey});
    EXPECT_EQ(wait_for(server, ServerChannel::Event::Kind::kConnected).engine, 0);
    ASSERT_TRUE(server.send(0, Abort{{"r"}}));
    const auto got = engine.receive(5000);
    ASSERT_TRUE(got.has_value());
    EXPECT_EQ(std::get<Abort>(*got).request_ids[0], "r");
    ASSERT_TRUE(engine.send(HealthReply{0, true, "hi"}));
    EXPECT_TRUE(wait_for(server, ServerChannel::Event::Kind::kMessage).message.has_value());
}

TEST(ChannelAuthTest, APeerWithoutTheKeyGetsNothingAndSendsNothing) {
    const auto a = make_addresses("channel_auth_stranger", 1);
    ServerChannel server(a.output, a.inputs, {.rank_plane_key = kKey});
    // Without a key, and with another key: the handshake fails; the request is not delivered.
    EngineChannel plain(a.inputs[0], a.output);
    EngineChannel wrong(a.inputs[0], a.output, {.rank_plane_key = "another-key-that-is-long-enough-0123456789"});
    EXPECT_EQ(wait_for(server, ServerChannel::Event::Kind::kRejected).kind, ServerChannel::Event::Kind::kRejected);
    plain.send(HealthReply{0, true, "forged"});
    wrong.send(HealthReply{0, true, "forged"});
    for (int i = 0; i < 10; ++i) EXPECT_NE(server.poll(50).kind, ServerChannel::Event::Kind::kMessage);
    EngineChannel real(a.inputs[0], a.output, {.rank_plane_key = kKey});
    EXPECT_EQ(wait_for(server, ServerChannel::Event::Kind::kConnected).engine, 0);
    ASSERT_TRUE(server.send(0, Abort{{"only-for-the-real-one"}}));
    const auto got = real.receive(5000);
    ASSERT_TRUE(got.has_value());
    EXPECT_EQ(std::get<Abort>(*got).request_ids[0], "only-for-the-real-one");
    EXPECT_FALSE(plain.receive(200).has_value());
    EXPECT_FALSE(wrong.receive(200).has_value());
}

TEST(ChannelAuthTest, ShortKeysAreRefused) {
    const auto a = make_addresses("channel_auth_short", 1);
    EXPECT_THROW(ServerChannel(a.output, a.inputs, {.rank_plane_key = "short"}), Error);
}

TEST(ChannelTest, BindingABadAddressRaises) {
    EXPECT_THROW(ServerChannel("ipc:///nonexistent-dir/out", {}), Error);
    EXPECT_THROW(ServerChannel("nonsense://x", {}), Error);
}

}  // namespace
}  // namespace moeserve::ipc
