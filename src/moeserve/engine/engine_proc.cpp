// Engine process loop: drain the socket without waiting while there is work, step, send.
#include "moeserve/engine/engine_proc.h"

#include <fmt/format.h>

#include <chrono>
#include <variant>

#include "moeserve/ipc/client_routing.h"

namespace moeserve::engine {

namespace {

using Clock = std::chrono::steady_clock;

// How often an engine with nothing to run but KV fetches or grammar compiles in flight looks
// whether they are done.
constexpr int kBackgroundPollMs = 2;

// When the API server must hear this engine's stats: every heartbeat_ms (liveness), and at once
// when the number of requests waiting for their KV changed. The API server's step watchdog leaves
// those requests out only once the stats say they wait; a heartbeat up to a second late made
// /health flap to 503 under a short --step-watchdog-timeout.
class StatsClock {
public:
    StatsClock(int heartbeat_ms, bool due_now)
        : period_(heartbeat_ms), last_sent_(Clock::now() - (due_now ? period_ : std::chrono::milliseconds(0))) {}
    bool heartbeat_due() const { return Clock::now() - last_sent_ >= period_; }
    bool kv_waiting_changed(const EngineCore& core) const {
        return core.num_pending_kv_transfers() != sent_kv_waiting_;
    }
    bool due(const EngineCore& core) const { return heartbeat_due() || kv_waiting_changed(core); }
    void sent(const EngineCore& core) {
        last_sent_ = Clock::now();
        sent_kv_waiting_ = core.num_pending_kv_transfers();
    }

private:
    std::chrono::milliseconds period_;
    Clock::time_point last_sent_;
    int32_t sent_kv_waiting_ = 0;
};

// Applies one message; false on Shutdown (from every API server).
// A restarted API server's requests of its dead process are aborted: nobody reads their outputs.
bool apply(EngineCore& core, ipc::EngineChannel& channel, ipc::ClientRouting& routing, Logger& logger,
           const ipc::ClientMessage& message, int32_t engine_index) {
    if (const auto* add = std::get_if<ipc::AddRequest>(&message)) {
        routing.on_add(*add);
        core.add_request(*add);
    } else if (const auto* abort = std::get_if<ipc::Abort>(&message)) {
        core.abort(*abort);
    } else if (std::holds_alternative<ipc::HealthCheck>(message)) {
        channel.send(ipc::HealthReply{engine_index, true, "ok"});
    } else if (const auto* shutdown = std::get_if<ipc::Shutdown>(&message)) {
        return !routing.on_shutdown(*shutdown);
    } else if (const auto* started = std::get_if<ipc::ClientStarted>(&message)) {
        std::vector<std::string> orphans = routing.on_client_started(*started);
        MOESERVE_LOG_I(logger, "engine",
                       "engine %d: API server %d restarted; aborting the %zu requests of its old process", engine_index,
                       started->client_index, orphans.size());
        if (!orphans.empty()) core.abort(ipc::Abort{std::move(orphans)});
        if (started->client_index >= 0 && started->client_index < channel.num_clients())
            channel.send(started->client_index, ipc::HealthReply{engine_index, true, "ready"});
    }
    return true;
}

// Receives everything queued, the first message waiting up to timeout_ms. False on Shutdown.
// `received` tells whether anything came.
bool drain(EngineCore& core, ipc::EngineChannel& channel, ipc::ClientRouting& routing, Logger& logger, int timeout_ms,
           int32_t engine_index, bool& received) {
    received = false;
    while (true) {
        std::optional<ipc::ClientMessage> message;
        try {
            message = channel.receive(timeout_ms);
        } catch (const Error& e) {
            MOESERVE_LOG_E(logger, "engine", "skipping a message: %s", e.what());
            continue;
        }
        if (!message) return true;
        received = true;
        timeout_ms = 0;
        if (!apply(core, channel, routing, logger, *message, engine_index)) return false;
    }
}

// Cumulative seconds in send_outputs (encode + send), reported in the next StepOutputs' stats.
thread_local double output_seconds = 0;  // per engine thread (tests run several in one process)

// With several API servers each gets the outputs of its own requests and the same stats (so
// each sees every engine's load, liveness and progress).
void send_outputs(EngineCore& core, ipc::EngineChannel& channel, ipc::ClientRouting& routing, Logger& logger,
                  int32_t engine_index, std::vector<ipc::RequestOutput> outputs, const DpCounters* dp = nullptr) {
    const auto start = Clock::now();
    ipc::StepOutputs step;  // empty outputs: a heartbeat (liveness plus fresh stats)
    step.engine_index = engine_index;
    step.outputs = std::move(outputs);
    step.stats = core.stats();
    step.stats.engine_index = engine_index;
    if (dp) {
        step.stats.num_dummy_prefill_steps = dp->dummy_prefill_steps;
        step.stats.num_dummy_decode_steps = dp->dummy_decode_steps + dp->dummy_mixed_steps;
        step.stats.num_guard_decode_steps = dp->guard_decode_steps;
        step.stats.num_decode_requests_stalled = dp->decode_requests_stalled;
        step.stats.dp_control_seconds = dp->control_seconds;
        step.stats.forward_seconds = dp->forward_seconds;
    }
    step.stats.step_output_seconds = output_seconds;
    if (routing.num_clients() == 1) {
        if (!channel.send(step)) MOESERVE_LOG_E(logger, "engine", "could not send step outputs to the API server");
    } else {
        auto per_client = routing.split(std::move(step.outputs));
        for (int c = 0; c < routing.num_clients(); ++c) {
            step.outputs = std::move(per_client[static_cast<size_t>(c)]);
            if (!channel.send(c, step))
                MOESERVE_LOG_E(logger, "engine", "could not send step outputs to API server %d", c);
        }
    }
    output_seconds += std::chrono::duration<double>(Clock::now() - start).count();
}

// A failed step, with self-healing: the running requests fail (their outputs go out now), the
// API server hears that this engine is recovering, and options.regroup re-forms the group. True
// when it did (the waiting requests are still queued); false: fail() as without it.
bool recover(EngineCore& core, ipc::EngineChannel& channel, ipc::ClientRouting& routing, Logger& logger,
             const EngineProcOptions& options, const Error& e, const DpCounters* dp = nullptr) {
    if (!options.regroup) return false;
    const std::string reason = fmt::format("the engine's rank group failed and is re-forming: {}", e.what());
    MOESERVE_LOG_W(logger, "engine", "engine %d: %s", options.engine_index, reason.c_str());
    // Recovering first: by the time a client sees its request fail, /health says why.
    const ipc::HealthReply recovering{options.engine_index, false, reason, /*recovering=*/true};
    channel.send(recovering);
    send_outputs(core, channel, routing, logger, options.engine_index, core.fail_running(reason), dp);
    if (!options.regroup(e, [&] { channel.send(recovering); })) return false;
    MOESERVE_LOG_I(logger, "engine", "engine %d: the group re-formed; serving again", options.engine_index);
    channel.send(ipc::HealthReply{options.engine_index, true, "ready"});
    return true;
}

// A failed step: tell the API server why, then leave (the caller exits the process).
int fail(ipc::EngineChannel& channel, Logger& logger, int32_t engine_index, const Error& e) {
    MOESERVE_LOG_E(logger, "engine", "engine %d: step failed, exiting: %s", engine_index, e.what());
    channel.send(ipc::HealthReply{engine_index, false, e.what()});
    return 1;
}

}  // namespace

int run_engine_loop(EngineCore& core, ipc::EngineChannel& channel, Logger& logger, const EngineProcOptions& options) {
    channel.send(ipc::HealthReply{options.engine_index, true, "ready"});
    MOESERVE_LOG_I(logger, "engine", "engine %d ready", options.engine_index);
    ipc::ClientRouting routing(channel.num_clients());
    StatsClock stats_clock(options.heartbeat_ms, /*due_now=*/true);
    while (true) {
        // Idle: block on the socket up to one heartbeat. Busy: take what is queued, no waiting
        // (while only grammars compile, step() waits for them). Waiting only for KV from a
        // prefill instance: look again soon, without spinning.
        const int timeout = core.has_unfinished_requests()    ? 0
                            : core.has_pending_kv_transfers() ? kBackgroundPollMs
                                                              : options.heartbeat_ms;
        bool received = false;
        if (!drain(core, channel, routing, logger, timeout, options.engine_index, received)) {
            MOESERVE_LOG_I(logger, "engine", "shutdown requested");
            return 0;
        }
        try {
            if (options.on_iteration) options.on_iteration();
            core.poll_kv_transfers();
            core.poll_grammar_compiles();
            if (core.has_pending_outputs()) {  // e.g. a producer's announcement: a streamed fetch starts now
                send_outputs(core, channel, routing, logger, options.engine_index, core.take_finished());
            }
            if (core.has_unfinished_requests()) {
                StepOutcome outcome = core.step();
                if (!outcome.outputs.empty() || !outcome.dummy || stats_clock.due(core)) {  // not every compile wait
                    send_outputs(core, channel, routing, logger, options.engine_index, std::move(outcome.outputs));
                    stats_clock.sent(core);
                }
            } else if ((!received && stats_clock.heartbeat_due()) || stats_clock.kv_waiting_changed(core)) {
                send_outputs(core, channel, routing, logger, options.engine_index, {});
                stats_clock.sent(core);
            }
        } catch (const Error& e) {
            if (recover(core, channel, routing, logger, options, e)) continue;
            return fail(channel, logger, options.engine_index, e);
        }
    }
}

int run_engine_loop_dp(EngineCore& core, DpCoordinator& coordinator, ipc::EngineChannel& channel, Logger& logger,
                       const EngineProcOptions& options) {
    channel.send(ipc::HealthReply{options.engine_index, true, "ready"});
    MOESERVE_LOG_I(logger, "engine", "engine %d ready (DP lock-step%s)", options.engine_index,
                   core.scheduler().policy().separates_phases() ? ", PD hybrid" : "");
    ipc::ClientRouting routing(channel.num_clients());
    StatsClock stats_clock(options.heartbeat_ms, /*due_now=*/false);
    while (true) {
        const int wait = coordinator.global_has_work()   ? 0
                         : core.has_compiling_grammars() ? kBackgroundPollMs
                                                         : coordinator.options().idle_wait_ms;
        bool received = false;
        if (!drain(core, channel, routing, logger, wait, options.engine_index, received)) {
            MOESERVE_LOG_I(logger, "engine", "shutdown requested; telling the other DP groups");
            coordinator.request_shutdown();
        }
        DpStepResult r;
        try {
            if (options.on_iteration) options.on_iteration();
            core.poll_kv_transfers();
            core.poll_grammar_compiles();
            r = coordinator.step();
        } catch (const Error& e) {
            if (recover(core, channel, routing, logger, options, e, &coordinator.counters())) {
                stats_clock.sent(core);
                continue;
            }
            return fail(channel, logger, options.engine_index, e);
        }
        const bool stepped = r.phase != StepPhase::kIdle;
        if (stepped || !r.outputs.empty() || stats_clock.due(core)) {
            send_outputs(core, channel, routing, logger, options.engine_index, std::move(r.outputs),
                         &coordinator.counters());
            stats_clock.sent(core);
        }
        if (r.shutdown) {
            MOESERVE_LOG_I(logger, "engine", "engine %d: all DP groups stop", options.engine_index);
            return 0;
        }
    }
}

}  // namespace moeserve::engine
