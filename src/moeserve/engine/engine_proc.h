// The engine process loop (DESIGN.md, Processes): EngineCore + the ipc channel to the API
// server. Receives AddRequest/Abort, steps while there is work, sends every step's outputs with
// the core's stats, and blocks on the socket when idle (waking only to send a heartbeat).
#pragma once

#include "moeserve/core/log.h"
#include "moeserve/engine/engine_core.h"
#include "moeserve/ipc/channel.h"

namespace moeserve::engine {

struct EngineProcOptions {
    int32_t engine_index = 0;
    int heartbeat_ms = 1000;  // an idle engine says it is alive this often
};

// Sends a ready HealthReply, then serves until a Shutdown message; returns 0. Malformed messages
// are logged and skipped. Not thread-safe: owns the calling thread until shutdown.
int run_engine_loop(EngineCore& core, ipc::EngineChannel& channel, Logger& logger,
                    const EngineProcOptions& options);

}  // namespace moeserve::engine
