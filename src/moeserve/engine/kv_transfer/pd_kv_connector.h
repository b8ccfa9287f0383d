// PdKvConnector: the scheduler's KV connector (scheduler/kv_connector.h) for PD disaggregation
// over this engine's KV transfer agents (kv_transfer_group.h). A producer request (its
// kv_transfer_params ask it to prefill for a decode instance) announces where its KV will be,
// streams its prompt's blocks as its prefill computes them, and is held after its first token
// until the consumer has fetched them. A consumer request (its params name a producer) loads its
// prompt's KV from there instead of prefilling. docs/parallelism.md, "PD disaggregation".
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "moeserve/engine/kv_transfer/kv_transfer_group.h"
#include "moeserve/engine/scheduler/kv_connector.h"

namespace moeserve::engine {

// Why this engine refuses a request's kv_transfer_params (its role does not do what they ask),
// or "" when it takes them.
std::string kv_transfer_refusal(const ipc::KvTransferParams& params, const KvTransferConfig& config);

class PdKvConnector final : public KvConnector {
public:
    // cache must outlive it; link (null for TP = 1) too. block_size: tokens per KV block.
    PdKvConnector(const KvTransferConfig& config, model::KvCache& cache, int engine_index, TpKvLink* link,
                  Logger* logger, int32_t block_size);

    const KvTransferGroup& group() const { return group_; }
    KvTransferGroup& group() { return group_; }

    std::optional<ipc::RequestOutput> request_added(const Request& request) override;
    bool loads_remotely(const Request& request) const override { return request.kv_transfer.consumes(); }
    void before_schedule() override;
    std::vector<std::string> take_released() override { return group_.take_released(); }
    std::vector<KvLoadResult> take_finished_loads() override;
    void start_load(const Request& request, int32_t cached_blocks) override;
    void request_preempted(const Request& request) override;
    void request_aborted(const Request& request) override;
    bool request_finished(const Request& request, FinishReason reason) override;
    void outputs_ready(std::vector<ipc::RequestOutput>& outputs) override;

private:
    // The prompt's blocks of a producer request (the first token's KV is never computed here).
    size_t prompt_blocks(const Request& request) const;
    // Gives up a producer's streamed transfer: its blocks are no longer the request's.
    void give_up(const Request& request, const std::string& why);

    KvTransferGroup group_;
    int32_t block_size_;
    // Producer requests whose transfer has started and is not published yet. The scheduler
    // owns them; every way they leave it passes a hook that removes them here first.
    std::unordered_map<std::string, const Request*> prefilling_;
    std::vector<const Request*> to_publish_;  // finished producers, held: published with their outputs
};

}  // namespace moeserve::engine
