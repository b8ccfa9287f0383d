// The API server's client of N engine cores (the DP client, docs/architecture.md): sends each request to
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
    std::string output_address;                // the server's PULL socket (bound)
    std::vector<std::string> input_addresses;  // one per engine (bound)
    // An engine silent this long (no step outputs, no heartbeat, or its connection lost for
    // that long) is declared dead: its requests fail. Dead is not forever: an engine that is
    // heard from again (it was paused, or the network came back) is healthy again, and the
    // requests failed meanwhile are aborted on it. Only mark_dead() (its process exited) is final.
    int heartbeat_timeout_ms = 30000;
    // Watchdog: an engine that has requests in flight but completes no step for this long makes
    // healthy() false (and is logged) until it steps again; 0 = off. It catches a rank that still
    // answers heartbeats but no longer steps (e.g. a peer stuck in a collective).
    int step_watchdog_ms = 120000;
    // A request that has produced nothing (still queued, or prefilling) this long after it was
    // added fails with a 503-style error and is aborted on its engine; 0 = no limit.
    int queue_timeout_ms = 0;
    std::string rank_plane_key = {};  // ipc/auth.h; empty = unauthenticated (tests only)
    // The DP rank of input_addresses[0]: engine messages carry their DP rank, and an API server of
    // one DP rank (--data-parallel-rank, external load balancing) has engine i = DP rank first + i.
    int first_engine_index = 0;
    // This server's index among the deployment's API servers (--api-server-count): sent in every
    // AddRequest and Shutdown, so the engines send this server its requests' outputs and stop
    // once every server has said Shutdown.
    int client_index = 0;
    // Self-healing over DP groups in lock-step: one engine that reports its group re-forming means
    // all of them are (a dead engine on another node says nothing; it must not take requests).
    bool engines_recover_together = false;
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

    // This API server was started again in place of a dead one (--api-server-count): tells every
    // engine, which aborts the dead process's requests and answers that it is ready (it said so
    // to the dead process only). Before wait_ready(). Thread-safe.
    void announce_restart();

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

    // Marks engine dead for good (its process exited): its requests fail with kError. Thread-safe.
    void mark_dead(int engine, const std::string& reason);
    // Its process exited and is being started again (self-healing): its requests that had produced
    // nothing yet go to another engine once one takes requests (the new process, or another DP
    // group's engine; within queue_timeout_ms), the others fail with kError; it is recovering
    // until the new process says it is ready. Thread-safe.
    // died_ms: when the death was seen (steady clock, ms since its epoch, as now_ms(); the
    // launcher may be another process on this host). A notice that arrives after the engine said
    // ready again (its group re-formed, or its new process started) changes no state: only the
    // requests sent before that are failed or sent again. < 0: now.
    void mark_restarting(int engine, const std::string& reason, int64_t died_ms = -1);
    // A rank of its group died and is being restarted: it is recovering (not taking requests; it
    // fails its own running ones as its group re-forms) until it says it is ready. Ignored when it
    // said ready after died_ms (as above). Thread-safe.
    void mark_recovering(int engine, const std::string& reason, int64_t died_ms = -1);
    // The clock of died_ms.
    static int64_t steady_now_ms();
    // Why healthy() is false (the first engine that is not: recovering, dead, starting or
    // stalled); empty when it is true. Thread-safe.
    std::string unhealthy_reason() const;
    // Engines whose rank group is re-forming or whose process is being restarted. Thread-safe.
    int num_recovering() const;
    // True when every engine is alive, ready and (with work in flight) stepping. Thread-safe.
    bool healthy() const;
    // True when add() has an engine to send to (one alive and ready): with DP groups that step on
    // their own, the survivors of a dead engine keep taking requests. Thread-safe.
    bool accepting() const;
    // Requests added and not yet finished (those waiting to go to an engine again included).
    // Thread-safe.
    int num_in_flight() const;
    // Latest stats of each engine (index = engine). Thread-safe.
    std::vector<ipc::Stats> stats() const;
    // Per engine: requests sent to it (cumulative) and its outstanding tokens now. Thread-safe.
    std::vector<int64_t> requests_routed() const;
    std::vector<int64_t> outstanding_tokens() const;

    // The bound addresses (a tcp://host:* address with its port); see ipc::ServerChannel.
    std::string output_endpoint() const { return channel_.output_endpoint(); }
    std::string input_endpoint(int engine) const { return channel_.input_endpoint(engine); }

    // Sends Shutdown (with this server's client_index) to every engine and stops the receive
    // thread. Idempotent.
    void shutdown();

private:
    struct EngineState {
        bool ready = false;
        bool dead = false;
        bool gone = false;                // dead for good (mark_dead: its process exited)
        bool recovering = false;          // its group re-forms / its process restarts (self-healing)
        bool process_restarting = false;  // mark_restarting: its process died; a new one comes
        std::string recovering_reason;
        std::string dead_reason;            // the receive thread fails the requests
        bool failed = false;                // its requests have been failed
        std::vector<std::string> orphaned;  // failed while dead: aborted on it if it comes back
        int in_flight = 0;
        int64_t outstanding_tokens = 0;  // sum of Pending::prompt_owed + output_owed of its requests
        int64_t routed = 0;              // requests sent (cumulative)
        int64_t last_heard_ms = 0;
        int64_t ready_ms = 0;          // its last healthy HealthReply
        int64_t last_progress_ms = 0;  // last completed step, or when work became pending
        bool stalled = false;          // the step watchdog fired and the engine has not stepped since
        ipc::Stats stats;
    };
    struct Pending {
        int engine = 0;
        int64_t prompt_owed = 0;  // prompt tokens until the first output
        int64_t output_owed = 0;  // max_tokens minus tokens received
        int64_t added_ms = 0;
        std::shared_ptr<OutputCallback> callback;
        // The request until its first output: sent again if its engine's process dies first.
        std::shared_ptr<const ipc::AddRequest> request;
        int64_t placed_ms = 0;  // sent to `engine` (place(): again, after its first engine's process died)
    };
    // With mutex_ held: the least-loaded engine that takes requests (-1: none), and the
    // bookkeeping of sending p there.
    int pick_engine() const;
    void place(int engine, const std::string& id, Pending p);
    // Sends the requests of a dead engine process that produced nothing to an engine that takes
    // requests; fails them when every engine is gone or queue_timeout_ms passed.
    void place_unplaced();
    void take_unplaced(const std::vector<std::string>& ids,
                       std::vector<std::pair<std::string, std::shared_ptr<OutputCallback>>>& taken);

    void receive_loop();
    void on_step_outputs(const ipc::StepOutputs& step);
    // Called with mutex_ held on any message of engine index: it is alive (again). Returns the
    // ids to abort on it (failed while it was silent); send them with abort_orphans, unlocked.
    std::vector<std::string> heard_from(size_t index);
    void abort_orphans(size_t index, std::vector<std::string> ids);
    void check_engines();
    // Fails the requests sent to engine before before_ms (all: INT64_MAX); those that never ran
    // go to an engine again if its process is restarting.
    void fail_engine(int engine, const std::string& reason, int64_t before_ms = INT64_MAX);
    void fail_requests(const std::vector<std::pair<std::string, std::shared_ptr<OutputCallback>>>& failed,
                       const std::string& reason, bool overloaded);
    int64_t now_ms() const;

    EngineClientOptions options_;
    Logger& logger_;
    ipc::ServerChannel channel_;
    mutable std::mutex mutex_;
    std::condition_variable ready_cv_;
    std::vector<EngineState> engines_;
    std::unordered_map<std::string, Pending> pending_;
    std::vector<std::pair<std::string, Pending>> unplaced_;  // their engine's process died (in order)
    std::atomic<bool> stop_{false};
    int64_t last_rejected_log_ms_ = 0;  // receive thread: rejected peers are logged at most every 10 s
    std::thread thread_;
};

}  // namespace moeserve::serve
