// The API server's client of N engine cores (the DP client of DESIGN.md): sends each request to
// the least-loaded healthy engine, routes its outputs back to a per-request callback, and fails
// the in-flight requests of an engine that disconnects or stops answering. Sees only ipc types.
// Load = outstanding work in tokens: prompt tokens not yet prefilled plus output tokens still owed
// (max_tokens minus those produced), as the client itself counts them (issue: parallelism; request
// counts alone leave DP ranks uneven under mixed lengths). Ties go to fewer requests, then the
// lower index.
#pragma once

#include <atomic>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "moeserve/core/log.h"
#include "moeserve/ipc/channel.h"

namespace moeserve::serve {

struct EngineClientOptions {
    std::string output_address;               // the server's PULL socket (bound)
    std::vector<std::string> input_addresses;  // one per engine (bound)
    int heartbeat_timeout_ms = 30000;  // an engine silent this long is declared dead
    // Watchdog: an engine that has requests in flight but completes no step for this long makes
    // healthy() false (and is logged) until it steps again; 0 = off. It catches a rank that still
    // answers heartbeats but no longer steps (e.g. a peer stuck in a collective).
    int step_watchdog_ms = 120000;
};

class EngineClient {
public:
    // Called on the client's receive thread, in order, for each output of the request; the last
    // call has finish_reason != kNone. Must not block.
    using OutputCallback = std::function<void(const ipc::RequestOutput& output)>;

    // Binds the sockets and starts the receive thread. Raises Error(kIo) if binding fails.
    EngineClient(EngineClientOptions options, Logger& logger);
    ~EngineClient();
    EngineClient(const EngineClient&) = delete;
    EngineClient& operator=(const EngineClient&) = delete;

    // Waits until every engine has said it is ready, at most timeout_ms; false on timeout or if
    // an engine died meanwhile. Thread-safe.
    bool wait_ready(int timeout_ms);

    // Sends request to the least-loaded healthy engine; callback gets its outputs. False (and the
    // callback is never called) when no engine is healthy. Thread-safe.
    bool add(ipc::AddRequest request, OutputCallback callback);
    // Asks the engines to abort these requests; their callbacks get a kAbort output. Thread-safe.
    void abort(const std::vector<std::string>& request_ids);
    // Aborts every request in flight. Thread-safe.
    void abort_all();

    // Marks engine dead (e.g. its process exited): its requests fail with kError. Thread-safe.
    void mark_dead(int engine, const std::string& reason);
    // True when every engine is alive, ready and (with work in flight) stepping. Thread-safe.
    bool healthy() const;
    // Requests added and not yet finished. Thread-safe.
    int num_in_flight() const;
    // Latest stats of each engine (index = engine). Thread-safe.
    std::vector<ipc::Stats> stats() const;
    // Per engine: requests sent to it (cumulative) and its outstanding tokens now. Thread-safe.
    std::vector<int64_t> requests_routed() const;
    std::vector<int64_t> outstanding_tokens() const;

    // Sends Shutdown to every engine and stops the receive thread. Idempotent.
    void shutdown();

private:
    struct EngineState {
        bool ready = false;
        bool dead = false;
        std::string dead_reason;  // set by mark_dead; the receive thread fails the requests
        bool failed = false;      // its requests have been failed
        int in_flight = 0;
        int64_t outstanding_tokens = 0;  // sum of the Pending::owed of its requests
        int64_t routed = 0;              // requests sent (cumulative)
        int64_t last_heard_ms = 0;
        int64_t last_progress_ms = 0;  // last completed step, or when work became pending
        bool stalled = false;          // the step watchdog fired and the engine has not stepped since
        ipc::Stats stats;
    };
    struct Pending {
        int engine = 0;
        int64_t prompt_owed = 0;  // prompt tokens until the first output
        int64_t output_owed = 0;  // max_tokens minus tokens received
        std::shared_ptr<OutputCallback> callback;
    };

    void receive_loop();
    void on_step_outputs(const ipc::StepOutputs& outputs);
    void check_engines();
    void fail_engine(int engine, const std::string& reason);
    int64_t now_ms() const;

    EngineClientOptions options_;
    Logger& logger_;
    ipc::ServerChannel channel_;
    mutable std::mutex mutex_;
    std::condition_variable ready_cv_;
    std::vector<EngineState> engines_;
    std::unordered_map<std::string, Pending> pending_;
    std::atomic<bool> stop_{false};
    std::thread thread_;
};

}  // namespace moeserve::serve
