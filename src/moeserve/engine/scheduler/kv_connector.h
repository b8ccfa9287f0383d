// KvConnector: what the scheduler asks of whatever moves a request's KV between engines (PD
// disaggregation, docs/parallelism.md), after vLLM's scheduler-side KV connector hooks. The
// scheduler keeps the request's life (queues, blocks, outputs); the connector decides, at each
// hook, what the transport does. A second transport is a second implementation: it edits no
// scheduler code. engine/kv_transfer/pd_kv_connector.h is the one this engine has.
//
//   add_request      request_added(r)          an output to send now (a producer's endpoint)
//                    loads_remotely(r)         r's prompt KV comes from elsewhere: it waits for
//                                              blocks, then for its load, instead of prefilling
//                                              (vLLM: get_num_new_matched_tokens, async load)
//   before schedule  before_schedule()         (streaming: how far each prefill has got)
//                    take_released()           held requests whose blocks may be freed now
//                    take_finished_loads()     loads that ended: the request runs on, or fails
//                    start_load(r, cached)     blocks for r's prompt are allocated: fill them
//                                              (vLLM: update_state_after_alloc)
//   schedule         request_preempted(r)      r's blocks are gone (recompute later)
//   abort            request_aborted(r)        before the scheduler lets r go
//   finish           request_finished(r, why)  true: the scheduler holds r's blocks for the
//                                              connector until take_released() names r
//                                              (vLLM: request_finished's delay_free_blocks)
//   outputs out      outputs_ready(outputs)    outputs the scheduler hands out (update,
//                                              take_finished), complete: those of requests it
//                                              holds can be read and annotated
//
// Engine thread only, like the scheduler.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "moeserve/engine/request.h"
#include "moeserve/ipc/kv_messages.h"
#include "moeserve/ipc/messages.h"

namespace moeserve::engine {

// A remote load that ended: on success the request continues as if it had prefilled here.
struct KvLoadResult {
    std::string request_id;
    std::string error;         // non-empty: the load failed and the request fails with it
    ipc::KvTransferMeta meta;  // the producer's first token and logprobs
};

class KvConnector {
public:
    virtual ~KvConnector() = default;

    // A request was queued. Returns an output to send before its first step, if any.
    virtual std::optional<ipc::RequestOutput> request_added(const Request& request) = 0;
    // True when the request's prompt KV is loaded from elsewhere rather than computed here.
    virtual bool loads_remotely(const Request& request) const = 0;

    virtual void before_schedule() = 0;
    virtual std::vector<std::string> take_released() = 0;
    virtual std::vector<KvLoadResult> take_finished_loads() = 0;
    // request.block_ids now hold its whole prompt; the first cached_blocks of them are filled
    // already (a local prefix-cache hit) and need no load.
    virtual void start_load(const Request& request, int32_t cached_blocks) = 0;

    // The request lost its blocks to a preemption (it recomputes later).
    virtual void request_preempted(const Request& request) = 0;
    // An abort arrived for the request, before it is let go (for one loading: when the load ends).
    virtual void request_aborted(const Request& request) = 0;
    // The request leaves the scheduler (every way out: finished, aborted, failed). True: its
    // blocks stay allocated, and the request alive, until take_released() names it.
    virtual bool request_finished(const Request& request, FinishReason reason) = 0;
    // Outputs the scheduler hands out now (a step's, or those queued outside a step), complete.
    virtual void outputs_ready(std::vector<ipc::RequestOutput>& outputs) = 0;
};

}  // namespace moeserve::engine
