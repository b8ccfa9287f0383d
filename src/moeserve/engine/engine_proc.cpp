// Engine process loop: drain the socket without waiting while there is work, step, send.
#include "moeserve/engine/engine_proc.h"

#include <variant>

namespace moeserve::engine {

namespace {

// Applies one message; false on Shutdown.
bool apply(EngineCore& core, ipc::EngineChannel& channel, const ipc::ClientMessage& message,
           int32_t engine_index) {
    if (const auto* add = std::get_if<ipc::AddRequest>(&message)) {
        core.add_request(*add);
    } else if (const auto* abort = std::get_if<ipc::Abort>(&message)) {
        core.abort(*abort);
    } else if (std::holds_alternative<ipc::HealthCheck>(message)) {
        channel.send(ipc::HealthReply{engine_index, true, "ok"});
    } else if (std::holds_alternative<ipc::Shutdown>(message)) {
        return false;
    }
    return true;
}

}  // namespace

int run_engine_loop(EngineCore& core, ipc::EngineChannel& channel, Logger& logger,
                    const EngineProcOptions& options) {
    channel.send(ipc::HealthReply{options.engine_index, true, "ready"});
    MOESERVE_LOG_I(logger, "engine", "engine %d ready", options.engine_index);
    while (true) {
        // Idle: block on the socket up to one heartbeat. Busy: take what is queued, no waiting.
        int timeout = core.has_unfinished_requests() ? 0 : options.heartbeat_ms;
        bool received = false;
        while (true) {
            std::optional<ipc::ClientMessage> message;
            try {
                message = channel.receive(timeout);
            } catch (const Error& e) {
                MOESERVE_LOG_E(logger, "engine", "skipping a message: %s", e.what());
                continue;
            }
            if (!message) break;
            received = true;
            timeout = 0;
            if (!apply(core, channel, *message, options.engine_index)) {
                MOESERVE_LOG_I(logger, "engine", "shutdown requested");
                return 0;
            }
        }
        if (core.has_unfinished_requests()) {
            StepOutcome outcome = core.step();
            ipc::StepOutputs step;
            step.engine_index = options.engine_index;
            step.outputs = std::move(outcome.outputs);
            step.stats = core.stats();
            step.stats.engine_index = options.engine_index;
            if (!channel.send(step)) {
                MOESERVE_LOG_E(logger, "engine", "could not send step outputs to the API server");
            }
        } else if (!received) {
            ipc::StepOutputs heartbeat;  // empty outputs: liveness plus fresh stats
            heartbeat.engine_index = options.engine_index;
            heartbeat.stats = core.stats();
            heartbeat.stats.engine_index = options.engine_index;
            channel.send(heartbeat);
        }
    }
}

}  // namespace moeserve::engine
