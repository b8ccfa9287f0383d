// Several API servers over one engine (--api-server-count): ClientRouting sends each request's
// outputs to the server that added it and stops the engine only after every server's Shutdown;
// over real sockets, an EngineChannel with two servers reaches each one alone or both.
#include "moeserve/ipc/client_routing.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>

#include "moeserve/ipc/channel.h"
#include "test_support.h"

namespace moeserve::ipc {
namespace {

AddRequest add_from(const std::string& id, int32_t client) {
    AddRequest a;
    a.request_id = id;
    a.client_index = client;
    return a;
}

RequestOutput output_of(const std::string& id, FinishReason finish = FinishReason::kNone) {
    RequestOutput o;
    o.request_id = id;
    o.new_token_ids = {7};
    o.finish_reason = finish;
    return o;
}

std::vector<std::string> ids(const std::vector<RequestOutput>& outputs) {
    std::vector<std::string> out;
    for (const auto& o : outputs) out.push_back(o.request_id);
    return out;
}

TEST(ClientRoutingTest, OneClientKeepsNothingAndStopsAtTheFirstShutdown) {
    ClientRouting routing(1);
    routing.on_add(add_from("a", 0));
    EXPECT_EQ(routing.num_tracked(), 0u);
    const auto split = routing.split({output_of("a"), output_of("b")});
    ASSERT_EQ(split.size(), 1u);
    EXPECT_EQ(ids(split[0]), (std::vector<std::string>{"a", "b"}));
    EXPECT_TRUE(routing.on_shutdown(Shutdown{0}));
}

TEST(ClientRoutingTest, OutputsGoToTheClientThatAddedTheRequest) {
    ClientRouting routing(3);
    routing.on_add(add_from("a", 0));
    routing.on_add(add_from("b", 2));
    routing.on_add(add_from("c", 1));
    routing.on_add(add_from("d", 2));
    const auto split = routing.split({output_of("b"), output_of("a"), output_of("d"), output_of("c"), output_of("b")});
    ASSERT_EQ(split.size(), 3u);
    EXPECT_EQ(ids(split[0]), (std::vector<std::string>{"a"}));
    EXPECT_EQ(ids(split[1]), (std::vector<std::string>{"c"}));
    EXPECT_EQ(ids(split[2]), (std::vector<std::string>{"b", "d", "b"}));  // in step order
    EXPECT_EQ(routing.num_tracked(), 4u);
}

TEST(ClientRoutingTest, AFinalOutputForgetsTheRequest) {
    ClientRouting routing(2);
    routing.on_add(add_from("a", 1));
    routing.on_add(add_from("b", 1));
    auto split = routing.split({output_of("a", FinishReason::kStop), output_of("b", FinishReason::kAbort)});
    EXPECT_EQ(ids(split[1]), (std::vector<std::string>{"a", "b"}));
    EXPECT_EQ(routing.num_tracked(), 0u);
    split = routing.split({output_of("a")});  // no longer known: client 0
    EXPECT_EQ(ids(split[0]), (std::vector<std::string>{"a"}));
    EXPECT_TRUE(split[1].empty());
}

TEST(ClientRoutingTest, UnknownRequestsAndBadIndexesGoToClientZero) {
    ClientRouting routing(2);
    routing.on_add(add_from("bad", 5));
    routing.on_add(add_from("neg", -1));
    const auto split = routing.split({output_of("bad"), output_of("neg"), output_of("never-added")});
    EXPECT_EQ(ids(split[0]), (std::vector<std::string>{"bad", "neg", "never-added"}));
    EXPECT_TRUE(split[1].empty());
}

TEST(ClientRoutingTest, StopsOnlyAfterEveryClientsShutdown) {
    ClientRouting routing(3);
    EXPECT_FALSE(routing.on_shutdown(Shutdown{1}));
    EXPECT_FALSE(routing.on_shutdown(Shutdown{1}));  // the same server twice is still one
    EXPECT_FALSE(routing.on_shutdown(Shutdown{7}));  // out of range: ignored
    EXPECT_FALSE(routing.on_shutdown(Shutdown{0}));
    EXPECT_TRUE(routing.on_shutdown(Shutdown{2}));
}

TEST(ClientRoutingTest, ARestartedClientsOldRequestsAreReturnedAndItsShutdownForgotten) {
    ClientRouting routing(2);
    routing.on_add(add_from("a", 1));
    routing.on_add(add_from("b", 0));
    routing.on_add(add_from("c", 1));
    EXPECT_FALSE(routing.on_shutdown(Shutdown{1}));
    auto old = routing.on_client_started(ClientStarted{1});
    std::sort(old.begin(), old.end());
    EXPECT_EQ(old, (std::vector<std::string>{"a", "c"}));
    EXPECT_TRUE(routing.on_client_started(ClientStarted{5}).empty());  // out of range: nothing
    EXPECT_FALSE(routing.on_shutdown(Shutdown{0}));                    // server 1's Shutdown was its dead process's
    // The aborted requests' final outputs still go to client 1 (the new process ignores them).
    const auto split = routing.split({output_of("a", FinishReason::kAbort), output_of("b")});
    EXPECT_EQ(ids(split[1]), (std::vector<std::string>{"a"}));
    EXPECT_EQ(ids(split[0]), (std::vector<std::string>{"b"}));
    EXPECT_TRUE(routing.on_shutdown(Shutdown{1}));
}

// Two API servers' socket sets and one engine connected to both.
TEST(ClientRoutingTest, AnEngineChannelReachesEachServerAloneOrAll) {
    const auto dir = test::scratch_dir("client_routing_two_servers");
    const auto address = [&dir](const std::string& name) { return "ipc://" + (dir / name).string(); };
    ServerChannel s0(address("out"), {address("in0")});
    ServerChannel s1(address("out.s1"), {address("in0.s1")});
    EngineChannel engine({address("in0"), address("in0.s1")}, {address("out"), address("out.s1")});
    ASSERT_EQ(engine.num_clients(), 2);
    const auto next_message = [](ServerChannel& server) -> std::optional<EngineMessage> {
        const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
        while (std::chrono::steady_clock::now() < deadline) {
            auto e = server.poll(100);
            if (e.kind == ServerChannel::Event::Kind::kMessage) return e.message;
        }
        return std::nullopt;
    };
    // Requests from both servers arrive on the engine's one input.
    ASSERT_TRUE(s1.send(0, add_from("from-1", 1)));
    ASSERT_TRUE(s0.send(0, add_from("from-0", 0)));
    std::vector<std::pair<std::string, int32_t>> got;
    for (int i = 0; i < 2; ++i) {
        const auto m = engine.receive(5000);
        ASSERT_TRUE(m.has_value());
        const auto& a = std::get<AddRequest>(*m);
        got.emplace_back(a.request_id, a.client_index);
    }
    std::sort(got.begin(), got.end());
    EXPECT_EQ(got, (std::vector<std::pair<std::string, int32_t>>{{"from-0", 0}, {"from-1", 1}}));
    // Routed outputs reach only their server; send(message) reaches both.
    ClientRouting routing(2);
    routing.on_add(add_from("from-0", 0));
    routing.on_add(add_from("from-1", 1));
    auto split = routing.split({output_of("from-1"), output_of("from-0")});
    for (int c = 0; c < 2; ++c) {
        StepOutputs step;
        step.outputs = std::move(split[static_cast<size_t>(c)]);
        ASSERT_TRUE(engine.send(c, step));
    }
    ASSERT_TRUE(engine.send(HealthReply{0, true, "to-all"}));
    const std::pair<ServerChannel*, std::string> expected[] = {{&s0, "from-0"}, {&s1, "from-1"}};
    for (const auto& [server, id] : expected) {
        const auto step = next_message(*server);
        ASSERT_TRUE(step.has_value());
        const auto& outputs = std::get<StepOutputs>(*step).outputs;
        ASSERT_EQ(outputs.size(), 1u);
        EXPECT_EQ(outputs[0].request_id, id);
        const auto reply = next_message(*server);
        ASSERT_TRUE(reply.has_value());
        EXPECT_EQ(std::get<HealthReply>(*reply).detail, "to-all");
    }
}

}  // namespace
}  // namespace moeserve::ipc
