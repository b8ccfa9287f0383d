// The engine process loop (docs/architecture.md, "Processes"): EngineCore + the ipc channel to the API
// server. Receives AddRequest/Abort, steps while there is work, sends every step's outputs with
// the core's stats, and blocks on the socket when idle (waking only to send a heartbeat). Under
// data parallelism the DP variant runs one DpCoordinator round per iteration instead, so all DP
// groups step in lock-step (real or dummy forward of the agreed phase).
#pragma once

#include <functional>

#include "moeserve/core/log.h"
#include "moeserve/engine/dp_coordinator.h"
#include "moeserve/engine/engine_core.h"
#include "moeserve/ipc/channel.h"

namespace moeserve::engine {

struct EngineProcOptions {
    int32_t engine_index = 0;
    int heartbeat_ms = 1000;  // an idle engine says it is alive this often
    // Called once per loop iteration on the engine thread (e.g. the TP leader's keepalive).
    std::function<void()> on_iteration{};
    // Self-healing (docs/parallelism.md): after a step failed (a rank of the group died, or the
    // ranks fell out of step), re-forms the group; true when it did. It calls still_waiting() about
    // every heartbeat_ms while it waits (the engine tells the API server it is still recovering).
    // Unset: a failed step is fatal.
    std::function<bool(const Error& failure, const std::function<void()>& still_waiting)> regroup{};
};

// Sends a ready HealthReply (to every API server of the channel), then serves until a Shutdown
// message from every API server; returns 0. Each request's outputs go to the API server that
// added it (ipc/client_routing.h), the stats to all. Malformed messages
// are logged and skipped. A step that throws Error (a collective whose peer is gone) fails the
// running requests and, when options.regroup re-forms the group, the loop goes on with the waiting
// ones (HealthReply recovering, then ready); else the engine sends an unhealthy HealthReply naming
// the error and returns 1. Not thread-safe: owns the calling thread until it returns.
int run_engine_loop(EngineCore& core, ipc::EngineChannel& channel, Logger& logger, const EngineProcOptions& options);

// The DP lock-step loop (DpCoordinator's call pattern): every iteration drains the inbox (waiting
// only while no DP group anywhere has work, at most the coordinator's idle_wait_ms) and runs one
// coordinator round, a collective over the DP group. Sends outputs after rounds that produced any
// or ran a forward, and a heartbeat at least every heartbeat_ms. Shutdown (from every API server) stops every
// DP group in the same round; returns 0 then, 1 after a failed collective (as above).
int run_engine_loop_dp(EngineCore& core, DpCoordinator& coordinator, ipc::EngineChannel& channel, Logger& logger,
                       const EngineProcOptions& options);

}  // namespace moeserve::engine
