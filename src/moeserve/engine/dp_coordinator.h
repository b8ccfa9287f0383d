// DpCoordinator: the DP + EP step protocol around one rank's EngineCore (docs/architecture.md "DP step
// protocol"). Every step: propose -> ONE DP control collective (parallel/dp_control.h) -> every
// rank runs a forward of the agreed phase, real or dummy, with the phase's MoE exchange. The
// phase is the engine's scheduling policy's decision (SchedulingPolicy::decide_phase) from the
// group's demand: under the mixed policy "mixed" (each rank its normal batch); under PD hybrid
// PREFILL if any rank can prefill now (bounded by the starvation guard while decodes wait), else
// DECODE, else IDLE.
//
// CALL PATTERN (the engine process loop; every rank of the DP group runs the same loop):
//
//   DpCoordinator coord(core, *ctx.dp, options);        // ctx.dp: this rank's DP Communicator
//   while (true) {
//       // Block for input only while nobody anywhere has work, and then at most idle_wait_ms:
//       int wait = coord.global_has_work() ? 0 : options.idle_wait_ms;
//       drain the inbox (first receive with timeout `wait`, the rest without waiting):
//           AddRequest -> core.add_request, Abort -> core.abort, Shutdown -> coord.request_shutdown()
//       DpStepResult r = coord.step();                  // collective: EVERY iteration, every rank
//       send r.outputs (+ core.stats(), coord.counters()) to the API server
//       if (r.shutdown) break;                          // all ranks leave in the same round
//   }
//
// IDLE (nobody spins, nobody hangs): when every rank is idle, step() costs one tiny all-gather and
// no forward; each rank then waits up to idle_wait_ms for input before the next round. A rank that
// gets a request joins the next round at once; the others join within idle_wait_ms, learn from the
// votes that work exists, and from then on all step together. The communicator timeout must be
// well above idle_wait_ms (Gloo default 30 s vs 50 ms). A request therefore waits at most
// idle_wait_ms more for its first step; an API server that also nudges every rank (any message)
// on arrival removes even that.
//
// Not thread-safe: the engine thread calls everything. The core and communicator must outlive it.
#pragma once

#include <chrono>
#include <cstdint>
#include <vector>

#include "moeserve/engine/engine_core.h"
#include "moeserve/parallel/comm.h"
#include "moeserve/parallel/dp_control.h"
#include "moeserve/parallel/moe_exchange.h"

namespace moeserve::engine {

struct DpCoordinatorOptions {
    // MoE exchange per agreed phase (every rank must configure the same).
    parallel::MoeExchangeKind prefill_exchange = parallel::MoeExchangeKind::kAllGather;
    parallel::MoeExchangeKind decode_exchange = parallel::MoeExchangeKind::kAllToAll;
    parallel::MoeExchangeKind mixed_exchange = parallel::MoeExchangeKind::kAllToAll;
    // Run a dummy forward when this rank has nothing of the agreed phase. Required whenever a
    // forward has collectives across DP ranks (EP); a one-rank DP group never needs it.
    bool dummy_forward = true;
    int idle_wait_ms = 50;  // guidance for the caller's idle input wait (see the call pattern)
    // Debug only: >= 0 makes this rank believe the phase is StepPhase(debug_force_phase) whatever
    // the votes say (a test shows that disagreement fails in bounded time, not a hang).
    int64_t debug_force_phase = -1;
    bool record_timeline = false;  // keep one TimelineEntry per step (tests, debugging)
};

// What one round did on this rank.
struct DpStepResult {
    std::vector<ipc::RequestOutput> outputs;
    StepPhase phase = StepPhase::kIdle;  // agreed (kIdle: no forward ran)
    bool dummy = false;                  // this rank ran a dummy forward (nothing of the phase)
    int32_t num_tokens = 0;              // real tokens this rank computed
    bool guard_decode = false;           // the starvation guard turned a prefill step into a decode step
    bool shutdown = false;               // some rank asked to shut down: every rank stops now, together
    parallel::DpAgreement agreement;
};

// Counters for /metrics (cumulative, this rank).
struct DpCounters {
    int64_t rounds = 0;                                            // control collectives
    int64_t idle_rounds = 0;                                       // rounds that agreed on IDLE (no forward)
    int64_t prefill_steps = 0, decode_steps = 0, mixed_steps = 0;  // by agreed phase
    int64_t dummy_prefill_steps = 0, dummy_decode_steps = 0, dummy_mixed_steps = 0;  // this rank
    int64_t guard_decode_steps = 0;       // decode steps the starvation guard forced
    int64_t decode_requests_stalled = 0;  // sum over PREFILL steps of this rank's waiting decodes
    double control_seconds = 0;           // in the DP control collective (incl. waiting for peers)
    double forward_seconds = 0;           // in forwards (real and dummy; includes MoE collectives)
};

struct TimelineEntry {
    int64_t round = 0;
    StepPhase phase = StepPhase::kIdle;
    bool dummy = false;
    int32_t num_tokens = 0;
    bool voted_prefill = false, voted_decode = false;  // this rank's vote (can prefill / has decode)
};

class DpCoordinator {
public:
    // dp: this rank's DP group communicator (size 1 is fine: the protocol then only adds the
    // phase choice). Every rank's core must have the same scheduling policy.
    DpCoordinator(EngineCore& core, parallel::Communicator& dp, const DpCoordinatorOptions& options);

    // One round, collective over the DP group: vote, agree, run the agreed phase (real or dummy
    // forward) or nothing when IDLE. Returns this rank's outputs. Throws Error kUnavailable when a
    // peer does not take part in time (dead, stuck, or desynchronized).
    DpStepResult step();

    // After the last round: some rank had unfinished requests or work (the caller must not block
    // for input). False before the first round.
    bool global_has_work() const { return global_has_work_; }
    // This rank votes to stop; the next step() returns shutdown = true on every rank.
    void request_shutdown() { shutdown_requested_ = true; }
    // The group re-formed (self-healing): the state every rank derives from the agreed rounds
    // starts over, as it does on the replaced rank's new coordinator, so all of them agree again.
    void regrouped() {
        core_.restart_phase_decisions();
        global_has_work_ = false;
    }

    const DpCounters& counters() const { return counters_; }
    const std::vector<TimelineEntry>& timeline() const { return timeline_; }
    const DpCoordinatorOptions& options() const { return options_; }

private:
    parallel::DpVote vote();
    PhaseDecision decide_phase(const parallel::DpAgreement& agreement);

    EngineCore& core_;
    parallel::Communicator& dp_;
    DpCoordinatorOptions options_;
    DpCounters counters_;
    std::vector<TimelineEntry> timeline_;
    bool global_has_work_ = false;
    bool shutdown_requested_ = false;
};

}  // namespace moeserve::engine
