// PD disaggregation's KV connector: the scheduler's hooks mapped onto the KV transfer agents.
#include "moeserve/engine/kv_transfer/pd_kv_connector.h"

#include <algorithm>
#include <utility>

#include "moeserve/core/error.h"

namespace moeserve::engine {

std::string kv_transfer_refusal(const ipc::KvTransferParams& params, const KvTransferConfig& config) {
    if (params.produce && !config.produces()) {
        return fmt::format(
            "kv_transfer_params asks this instance to prefill for a decode instance, but its --kv-transfer-config "
            "role is {} (kv_producer or kv_both needed)",
            kv_role_name(config.role));
    }
    if (params.consumes() && !config.consumes()) {
        return fmt::format(
            "kv_transfer_params names a prefill instance, but this instance's --kv-transfer-config role is {} "
            "(kv_consumer or kv_both needed)",
            kv_role_name(config.role));
    }
    return "";
}

PdKvConnector::PdKvConnector(const KvTransferConfig& config, model::KvCache& cache, int engine_index, TpKvLink* link,
                             Logger* logger, int32_t block_size)
    : group_(config, cache, engine_index, link, logger), block_size_(block_size) {}

size_t PdKvConnector::prompt_blocks(const Request& r) const {
    const int64_t bs = block_size_;
    return std::min(r.block_ids.size(), static_cast<size_t>((r.num_prompt_tokens() + bs - 1) / bs));
}

void PdKvConnector::give_up(const Request& r, const std::string& why) {
    if (prefilling_.erase(r.request_id) > 0) group_.fail_published(r.request_id, why);
}

std::optional<ipc::RequestOutput> PdKvConnector::request_added(const Request& r) {
    if (!r.kv_transfer.produce) return std::nullopt;
    group_.publish_started(r.request_id, r.prompt_token_ids);
    prefilling_.emplace(r.request_id, &r);
    // Before the prefill's first chunk: the consumer's fetch can start at once and follow it.
    ipc::RequestOutput announcement;
    announcement.request_id = r.request_id;
    announcement.kv_transfer_endpoint = group_.endpoint();
    return announcement;
}

// Blocks are counted only before a schedule, when every block counted is written: a prefix hit
// counts its blocks as computed when it is scheduled, and the forward of that same step (another
// request's chunk) may still write them.
void PdKvConnector::before_schedule() {
    for (const auto& [id, r] : prefilling_) {
        const size_t blocks = prompt_blocks(*r);
        const auto complete =
            static_cast<int32_t>(std::min<int64_t>(r->num_computed_tokens, r->num_prompt_tokens()) / block_size_);
        group_.progress(id, {r->block_ids.begin(), r->block_ids.begin() + static_cast<std::ptrdiff_t>(blocks)},
                        complete);
    }
}

std::vector<KvLoadResult> PdKvConnector::take_finished_loads() {
    std::vector<KvLoadResult> out;
    for (auto& fetched : group_.take_fetched()) {
        out.push_back({std::move(fetched.id), std::move(fetched.error), std::move(fetched.meta)});
    }
    return out;
}

void PdKvConnector::start_load(const Request& r, int32_t cached_blocks) {
    KvTransferAgent::FetchJob job;
    job.id = r.request_id;
    job.endpoint = r.kv_transfer.remote_endpoint;
    job.remote_id = r.kv_transfer.remote_transfer_id;
    job.block_ids = r.block_ids;
    job.skip_blocks = cached_blocks;
    job.prompt_token_ids = r.prompt_token_ids;
    group_.fetch(std::move(job));
}

void PdKvConnector::request_preempted(const Request& r) { give_up(r, "it was preempted (out of KV blocks)"); }

void PdKvConnector::request_aborted(const Request& r) {
    // A fetch running: cancelling it releases the producer's blocks (the agent remembers the id
    // until the fetch ends).
    if (r.fetching) return group_.cancel(r.request_id);
    // Still queued for its fetch: nobody else tells the producer it may free them.
    if (r.kv_transfer.consumes() && r.status == RequestStatus::kWaiting && r.num_computed_tokens == 0) {
        group_.release(r.kv_transfer.remote_endpoint, r.kv_transfer.remote_transfer_id);
    }
}

bool PdKvConnector::request_finished(const Request& r, FinishReason reason) {
    // A prefill for another instance that produced its first token: the prompt's blocks stay
    // until the consumer has them.
    if (r.kv_transfer.produce && (reason == FinishReason::kStop || reason == FinishReason::kLength)) {
        to_publish_.push_back(&r);
        return true;
    }
    give_up(r, "it was aborted or failed");
    return false;
}

void PdKvConnector::outputs_ready(std::vector<ipc::RequestOutput>& outputs) {
    for (const Request* r : std::exchange(to_publish_, {})) {
        KvTransferAgent::Published p;
        p.id = r->request_id;
        const size_t blocks = prompt_blocks(*r);
        p.block_ids.assign(r->block_ids.begin(), r->block_ids.begin() + static_cast<std::ptrdiff_t>(blocks));
        p.meta.prompt_token_ids = r->prompt_token_ids;
        p.meta.first_token = r->output_token_ids.at(0);
        for (auto& out : outputs) {
            if (out.request_id != r->request_id) continue;
            out.kv_transfer_endpoint = group_.endpoint();
            if (!out.new_logprobs.empty()) p.meta.first_logprobs = out.new_logprobs.front();
            if (out.prompt_logprobs) p.meta.prompt_logprobs = out.prompt_logprobs;
        }
        prefilling_.erase(r->request_id);
        group_.publish(std::move(p));
    }
}

}  // namespace moeserve::engine
