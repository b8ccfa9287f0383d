// EngineClient: request routing to engine cores and output fan-in. Only the receive thread
// calls callbacks and removes finished requests, so a request's outputs arrive in order and
// exactly one of them is final.
#include "moeserve/serve/engine_client.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <utility>

namespace moeserve::serve {

namespace {
constexpr int kPollMs = 50;
}

EngineClient::EngineClient(EngineClientOptions options, Logger& logger)
    : options_(std::move(options)),
      logger_(logger),
      channel_(options_.output_address, options_.input_addresses,
               {.heartbeat_timeout_ms = options_.heartbeat_timeout_ms, .rank_plane_key = options_.rank_plane_key}),
      engines_(options_.input_addresses.size()) {
    for (auto& e : engines_) e.last_heard_ms = now_ms();
    thread_ = std::thread([this] { receive_loop(); });
}

EngineClient::~EngineClient() { shutdown(); }

int64_t EngineClient::steady_now_ms() {
    return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now().time_since_epoch())
        .count();
}

int64_t EngineClient::now_ms() const { return steady_now_ms(); }

bool EngineClient::wait_ready(int timeout_ms) {
    std::unique_lock lock(mutex_);
    const auto all_ready = [&] {
        for (const auto& e : engines_) {
            if (!e.ready || e.dead) return false;
        }
        return true;
    };
    const auto any_dead = [&] {
        for (const auto& e : engines_) {
            if (e.dead) return true;
        }
        return false;
    };
    ready_cv_.wait_for(lock, std::chrono::milliseconds(timeout_ms), [&] { return all_ready() || any_dead(); });
    return all_ready();
}

int EngineClient::pick_engine() const {
    int best = -1;
    const auto less_loaded = [](const EngineState& a, const EngineState& b) {
        if (a.outstanding_tokens != b.outstanding_tokens) return a.outstanding_tokens < b.outstanding_tokens;
        return a.in_flight < b.in_flight;
    };
    for (size_t i = 0; i < engines_.size(); ++i) {
        const auto& e = engines_[i];
        if (!e.ready || e.dead || e.recovering) continue;
        if (best < 0 || less_loaded(e, engines_[static_cast<size_t>(best)])) best = static_cast<int>(i);
    }
    return best;
}

void EngineClient::place(int engine, const std::string& id, Pending p) {
    auto& e = engines_[static_cast<size_t>(engine)];
    if (e.in_flight == 0) e.last_progress_ms = now_ms();  // the watchdog counts from here
    e.in_flight++;
    e.routed++;
    e.outstanding_tokens += p.prompt_owed + p.output_owed;
    p.engine = engine;
    p.placed_ms = now_ms();
    pending_[id] = std::move(p);
}

bool EngineClient::add(ipc::AddRequest request, OutputCallback callback) {
    int best = -1;
    const int64_t prompt = static_cast<int64_t>(request.prompt_token_ids.size());
    const int64_t output = std::max<int64_t>(0, request.sampling.max_tokens);
    const std::string id = request.request_id;
    request.client_index = options_.client_index;
    auto kept = std::make_shared<const ipc::AddRequest>(std::move(request));
    {
        std::lock_guard lock(mutex_);
        best = pick_engine();
        if (best < 0) return false;
        place(best, id,
              Pending{best, prompt, output, now_ms(), std::make_shared<OutputCallback>(std::move(callback)), kept});
    }
    if (!channel_.send(best, *kept)) {
        std::lock_guard lock(mutex_);
        if (pending_.erase(id)) {
            auto& e = engines_[static_cast<size_t>(best)];
            e.in_flight--;
            e.routed--;
            e.outstanding_tokens -= prompt + output;
        }
        return false;
    }
    return true;
}

void EngineClient::abort(const std::vector<std::string>& request_ids) {
    std::vector<std::vector<std::string>> per_engine(engines_.size());
    std::vector<std::pair<std::string, std::shared_ptr<OutputCallback>>> unplaced;
    {
        std::lock_guard lock(mutex_);
        for (const auto& id : request_ids) {
            const auto it = pending_.find(id);
            if (it != pending_.end()) per_engine[static_cast<size_t>(it->second.engine)].push_back(id);
        }
        take_unplaced(request_ids, unplaced);
    }
    for (size_t i = 0; i < per_engine.size(); ++i) {
        if (!per_engine[i].empty()) channel_.send(static_cast<int>(i), ipc::Abort{per_engine[i]});
    }
    for (const auto& [id, cb] : unplaced) {  // on no engine: their abort outputs come from here
        ipc::RequestOutput out;
        out.request_id = id;
        out.finish_reason = ipc::FinishReason::kAbort;
        (*cb)(out);
    }
}

void EngineClient::take_unplaced(const std::vector<std::string>& ids,
                                 std::vector<std::pair<std::string, std::shared_ptr<OutputCallback>>>& taken) {
    for (auto it = unplaced_.begin(); it != unplaced_.end();) {
        if (std::find(ids.begin(), ids.end(), it->first) != ids.end()) {
            taken.emplace_back(it->first, it->second.callback);
            it = unplaced_.erase(it);
        } else {
            ++it;
        }
    }
}

void EngineClient::abort_all() {
    std::vector<std::string> ids;
    {
        std::lock_guard lock(mutex_);
        for (const auto& [id, p] : pending_) ids.push_back(id);
        for (const auto& [id, p] : unplaced_) ids.push_back(id);
    }
    abort(ids);
}

void EngineClient::mark_dead(int engine, const std::string& reason) {
    std::lock_guard lock(mutex_);
    auto& e = engines_.at(static_cast<size_t>(engine));
    if (!e.dead || e.recovering) e.dead_reason = reason;  // a restart's reason gives way to the final one
    e.dead = true;
    e.gone = true;
    e.recovering = false;
    ready_cv_.notify_all();
}

void EngineClient::mark_restarting(int engine, const std::string& reason, int64_t died_ms) {
    std::unique_lock lock(mutex_);
    auto& e = engines_.at(static_cast<size_t>(engine));
    if (e.gone) return;
    if (died_ms >= 0 && e.ready_ms > died_ms) {  // its new process is up already: only the old one's requests
        const int64_t new_process_ready = e.ready_ms;
        e.process_restarting = true;  // the old process's requests that never ran are sent again
        lock.unlock();
        fail_engine(engine, reason, new_process_ready);
        lock.lock();
        e.process_restarting = false;
        return;
    }
    if (!e.dead) e.dead_reason = reason;
    e.dead = true;  // check_engines fails (or re-places) its requests; its new process's "ready" revives it
    e.recovering = true;
    e.process_restarting = true;
    e.recovering_reason = reason;
    ready_cv_.notify_all();
}

void EngineClient::mark_recovering(int engine, const std::string& reason, int64_t died_ms) {
    std::lock_guard lock(mutex_);
    auto& e = engines_.at(static_cast<size_t>(engine));
    if (e.gone || (died_ms >= 0 && e.ready_ms > died_ms)) return;  // it recovered before the notice came
    e.recovering = true;
    e.recovering_reason = reason;
}

bool EngineClient::healthy() const { return unhealthy_reason().empty(); }

std::string EngineClient::unhealthy_reason() const {
    std::lock_guard lock(mutex_);
    for (size_t i = 0; i < engines_.size(); ++i) {
        const auto& e = engines_[i];
        const int index = options_.first_engine_index + static_cast<int>(i);
        if (e.recovering) return fmt::format("engine {} is recovering: {}", index, e.recovering_reason);
        if (e.dead) return e.dead_reason;
        if (!e.ready) return fmt::format("engine {} is starting", index);
        if (e.stalled) return fmt::format("engine {} has requests but completes no step", index);
    }
    return "";
}

int EngineClient::num_recovering() const {
    std::lock_guard lock(mutex_);
    return static_cast<int>(
        std::count_if(engines_.begin(), engines_.end(), [](const auto& e) { return e.recovering; }));
}

bool EngineClient::accepting() const {
    std::lock_guard lock(mutex_);
    for (const auto& e : engines_) {
        if (e.ready && !e.dead && !e.recovering) return true;
    }
    return false;
}

int EngineClient::num_in_flight() const {
    std::lock_guard lock(mutex_);
    return static_cast<int>(pending_.size() + unplaced_.size());
}

std::vector<int64_t> EngineClient::requests_routed() const {
    std::lock_guard lock(mutex_);
    std::vector<int64_t> out;
    for (const auto& e : engines_) out.push_back(e.routed);
    return out;
}

std::vector<int64_t> EngineClient::outstanding_tokens() const {
    std::lock_guard lock(mutex_);
    std::vector<int64_t> out;
    for (const auto& e : engines_) out.push_back(e.outstanding_tokens);
    return out;
}

std::vector<ipc::Stats> EngineClient::stats() const {
    std::lock_guard lock(mutex_);
    std::vector<ipc::Stats> out;
    for (const auto& e : engines_) out.push_back(e.stats);
    return out;
}

void EngineClient::announce_restart() {
    for (int i = 0; i < channel_.num_engines(); ++i) {
        // Waits up to the send timeout for the engine to connect again (zmq retries every 100 ms).
        if (!channel_.send(i, ipc::ClientStarted{options_.client_index}))
            MOESERVE_LOG_W(logger_, "api", "engine %d did not take this restarted server's hello",
                           options_.first_engine_index + i);
    }
}

void EngineClient::shutdown() {
    if (stop_.exchange(true)) return;
    for (int i = 0; i < channel_.num_engines(); ++i) {
        bool alive;
        {
            std::lock_guard lock(mutex_);
            alive = engines_[static_cast<size_t>(i)].ready && !engines_[static_cast<size_t>(i)].dead;
        }
        if (alive) channel_.send(i, ipc::Shutdown{options_.client_index});
    }
    if (thread_.joinable()) thread_.join();
}

void EngineClient::receive_loop() {
    while (!stop_.load()) {
        auto event = channel_.poll(kPollMs);
        using Kind = ipc::ServerChannel::Event::Kind;
        if (event.kind == Kind::kMessage) {
            if (auto* step = std::get_if<ipc::StepOutputs>(&*event.message)) {
                on_step_outputs(*step);
            } else if (auto* reply = std::get_if<ipc::HealthReply>(&*event.message)) {
                std::vector<std::string> orphans;
                std::unique_lock lock(mutex_);
                const int local = reply->engine_index - options_.first_engine_index;
                const auto index = static_cast<size_t>(local);
                if (local < 0 || index >= engines_.size()) {
                    MOESERVE_LOG_E(logger_, "api", "health reply of unknown engine %d ignored", reply->engine_index);
                    continue;
                }
                auto& e = engines_[index];
                if (reply->recovering && e.gone) {
                    // given up meanwhile (its process is being stopped): stays dead
                } else if (reply->recovering) {  // its group re-forms: its running requests failed, its queue stays
                    e.last_heard_ms = now_ms();
                    if (!e.recovering) {  // its first report (later ones are its heartbeat while it waits)
                        MOESERVE_LOG_W(logger_, "api", "engine %d is recovering: %s", reply->engine_index,
                                       reply->detail.c_str());
                        // In lock-step the whole group re-forms; an engine on a node that lost its
                        // process says nothing until its new one is ready.
                        for (auto& other : engines_) {
                            if (!options_.engines_recover_together || other.gone || other.recovering) continue;
                            other.recovering = true;
                            other.recovering_reason =
                                fmt::format("engine {} reports: {}", reply->engine_index, reply->detail);
                        }
                    }
                    e.recovering = true;
                    e.recovering_reason = reply->detail;
                } else if (!reply->healthy) {
                    if (!e.dead)
                        e.dead_reason =
                            "engine " + std::to_string(reply->engine_index) + " reported unhealthy: " + reply->detail;
                    e.dead = true;
                    e.gone = true;  // it exits after saying so
                    e.recovering = false;
                } else {
                    orphans = heard_from(index);
                    e.ready_ms = now_ms();
                    if (e.recovering) {
                        MOESERVE_LOG_I(logger_, "api", "engine %d recovered: serving again", reply->engine_index);
                        e.recovering = false;
                        e.last_progress_ms = now_ms();
                    }
                }
                if (!e.ready) {
                    e.ready = true;
                    MOESERVE_LOG_I(logger_, "api", "engine %d ready", reply->engine_index);
                }
                ready_cv_.notify_all();
                lock.unlock();
                abort_orphans(index, std::move(orphans));
            }
        } else if (event.kind == Kind::kDisconnected && !stop_.load()) {  // after Shutdown: expected
            // Not proof of death (a stranger's connection closing looks the same): an engine is
            // dead when silent for heartbeat_timeout_ms, or when its process exits (mark_dead).
            MOESERVE_LOG_D(logger_, "api", "a connection of engine %d's socket closed", event.engine);
        } else if (event.kind == Kind::kRejected) {
            if (now_ms() - last_rejected_log_ms_ > 10000) {
                last_rejected_log_ms_ = now_ms();
                MOESERVE_LOG_W(logger_, "api",
                               "refused a connection from %s: it failed the rank-plane handshake (no or wrong key)",
                               event.detail.c_str());
            }
        } else if (event.kind == Kind::kMalformed) {
            MOESERVE_LOG_E(logger_, "api", "malformed engine message: %s", event.detail.c_str());
        }
        check_engines();
        place_unplaced();
    }
}

void EngineClient::on_step_outputs(const ipc::StepOutputs& step) {
    const int local = step.engine_index - options_.first_engine_index;
    const size_t index = static_cast<size_t>(local);
    std::vector<std::pair<const ipc::RequestOutput*, std::shared_ptr<OutputCallback>>> calls;
    std::vector<std::string> orphans;
    {
        std::lock_guard lock(mutex_);
        if (local < 0 || index >= engines_.size()) {
            MOESERVE_LOG_E(logger_, "api", "outputs of unknown engine %d ignored", step.engine_index);
            return;
        }
        auto& e = engines_[index];
        orphans = heard_from(index);
        if (step.stats.num_steps != e.stats.num_steps) {
            e.last_progress_ms = now_ms();
            if (e.stalled) MOESERVE_LOG_I(logger_, "api", "engine %zu steps again; healthy", index);
            e.stalled = false;
        }
        e.stats = step.stats;
        for (const auto& out : step.outputs) {
            const auto it = pending_.find(out.request_id);
            if (it == pending_.end() || it->second.engine != static_cast<int>(index)) continue;
            Pending& p = it->second;
            calls.emplace_back(&out, p.callback);
            // The prompt is done by the first output; each new token pays one owed token.
            const int64_t got = std::min<int64_t>(p.output_owed, static_cast<int64_t>(out.new_token_ids.size()));
            e.outstanding_tokens -= p.prompt_owed + got;
            p.prompt_owed = 0;
            p.request.reset();  // it ran: never sent again
            p.output_owed -= got;
            if (out.finish_reason != ipc::FinishReason::kNone) {
                e.outstanding_tokens -= p.output_owed;
                pending_.erase(it);
                e.in_flight--;
            }
        }
    }
    abort_orphans(index, std::move(orphans));
    for (auto& [out, cb] : calls) (*cb)(*out);
}

std::vector<std::string> EngineClient::heard_from(size_t index) {
    auto& e = engines_[index];
    e.last_heard_ms = now_ms();
    if (!e.dead || e.gone || !e.ready) return {};
    MOESERVE_LOG_I(logger_, "api", "engine %zu is answering again; healthy", index);
    e.dead = false;
    e.process_restarting = false;
    e.failed = false;
    e.last_progress_ms = e.last_heard_ms;
    return std::exchange(e.orphaned, {});  // failed while it was silent: not wanted any more
}

void EngineClient::abort_orphans(size_t index, std::vector<std::string> ids) {
    if (!ids.empty()) channel_.send(static_cast<int>(index), ipc::Abort{std::move(ids)});
}

// Declares engines dead that went silent, fails the requests of dead engines (once), and fails
// requests that waited longer than queue_timeout_ms for their first output.
void EngineClient::check_engines() {
    std::vector<std::pair<int, std::string>> to_fail;
    std::vector<std::pair<std::string, std::shared_ptr<OutputCallback>>> timed_out;
    std::vector<std::vector<std::string>> aborts(engines_.size());
    {
        std::lock_guard lock(mutex_);
        const int64_t now = now_ms();
        for (size_t i = 0; i < engines_.size(); ++i) {
            auto& e = engines_[i];
            if (e.ready && !e.dead && now - e.last_heard_ms > options_.heartbeat_timeout_ms) {
                e.dead = true;
                e.dead_reason = "engine " + std::to_string(i) + " sent nothing for " +
                                std::to_string(options_.heartbeat_timeout_ms) + " ms";
                ready_cv_.notify_all();
            }
            // Requests waiting for their KV from a prefill instance (PD disaggregation) need no
            // step: an engine with only those is not stuck (their fetch has its own timeout).
            if (e.in_flight <= e.stats.kv_waiting_requests) e.last_progress_ms = now;
            if (options_.step_watchdog_ms > 0 && e.ready && !e.dead && !e.recovering && !e.stalled && e.in_flight > 0 &&
                now - e.last_progress_ms > options_.step_watchdog_ms) {
                e.stalled = true;
                MOESERVE_LOG_E(logger_, "api",
                               "engine %zu (DP rank %zu): %d requests in flight but no step completed for %d ms; "
                               "/health reports unhealthy until it steps (a rank of its group may be stuck)",
                               i, i, e.in_flight, options_.step_watchdog_ms);
            }
            if (e.dead && !e.failed) {
                e.failed = true;
                to_fail.emplace_back(static_cast<int>(i), e.dead_reason);
            }
        }
        if (options_.queue_timeout_ms > 0) {
            for (auto it = pending_.begin(); it != pending_.end();) {
                Pending& p = it->second;
                if (p.prompt_owed > 0 && now - p.added_ms > options_.queue_timeout_ms) {
                    auto& e = engines_[static_cast<size_t>(p.engine)];
                    e.in_flight--;
                    e.outstanding_tokens -= p.prompt_owed + p.output_owed;
                    aborts[static_cast<size_t>(p.engine)].push_back(it->first);
                    timed_out.emplace_back(it->first, p.callback);
                    it = pending_.erase(it);
                } else {
                    ++it;
                }
            }
        }
    }
    for (size_t i = 0; i < aborts.size(); ++i) {
        if (!aborts[i].empty()) channel_.send(static_cast<int>(i), ipc::Abort{std::move(aborts[i])});
    }
    if (!timed_out.empty()) {
        MOESERVE_LOG_W(logger_, "api",
                       "%zu requests waited over %d ms without output; failing them (--request-queue-timeout)",
                       timed_out.size(), options_.queue_timeout_ms);
        fail_requests(
            timed_out,
            fmt::format(
                "The request waited more than {} s in the queue without being scheduled (--request-queue-timeout).",
                options_.queue_timeout_ms / 1000.0),
            true);
    }
    for (const auto& [engine, reason] : to_fail) fail_engine(engine, reason);
}

void EngineClient::place_unplaced() {
    std::vector<std::pair<int, std::shared_ptr<const ipc::AddRequest>>> sends;
    std::vector<std::pair<std::string, std::shared_ptr<OutputCallback>>> timed_out, lost;
    std::string lost_reason;
    {
        std::lock_guard lock(mutex_);
        if (unplaced_.empty()) return;
        const bool all_gone = std::all_of(engines_.begin(), engines_.end(), [](const auto& e) { return e.gone; });
        if (all_gone) lost_reason = engines_.front().dead_reason;
        const int64_t now = now_ms();
        for (auto it = unplaced_.begin(); it != unplaced_.end();) {
            Pending& p = it->second;
            const bool late = options_.queue_timeout_ms > 0 && now - p.added_ms > options_.queue_timeout_ms;
            const int best = all_gone || late ? -1 : pick_engine();
            if (all_gone || late) {
                (all_gone ? lost : timed_out).emplace_back(it->first, p.callback);
            } else if (best >= 0) {
                sends.emplace_back(best, p.request);
                place(best, it->first, std::move(p));
            } else {
                ++it;  // no engine takes requests yet (all recovering)
                continue;
            }
            it = unplaced_.erase(it);
        }
    }
    for (const auto& [engine, request] : sends) {
        MOESERVE_LOG_I(logger_, "api", "request %s (its engine's process died before it ran) goes to engine %d",
                       request->request_id.c_str(), options_.first_engine_index + engine);
        if (!channel_.send(engine, *request))
            MOESERVE_LOG_E(logger_, "api", "could not send request %s to engine %d", request->request_id.c_str(),
                           options_.first_engine_index + engine);
    }
    fail_requests(timed_out,
                  fmt::format("The request waited more than {} s without being scheduled (--request-queue-timeout).",
                              options_.queue_timeout_ms / 1000.0),
                  true);
    fail_requests(lost, lost_reason, false);
}

void EngineClient::fail_engine(int engine, const std::string& reason, int64_t before_ms) {
    MOESERVE_LOG_E(logger_, "api", "%s; failing its requests", reason.c_str());
    std::vector<std::pair<std::string, std::shared_ptr<OutputCallback>>> failed;
    {
        std::lock_guard lock(mutex_);
        auto& e = engines_[static_cast<size_t>(engine)];
        for (auto it = pending_.begin(); it != pending_.end();) {
            Pending& p = it->second;
            if (p.engine != engine || p.placed_ms >= before_ms) {
                ++it;
                continue;
            }
            e.in_flight--;
            e.outstanding_tokens -= p.prompt_owed + p.output_owed;
            if (e.process_restarting && p.request) {
                unplaced_.emplace_back(it->first, std::move(p));  // it never ran: another engine runs it
            } else {
                failed.emplace_back(it->first, p.callback);
                if (!e.gone) e.orphaned.push_back(it->first);
            }
            it = pending_.erase(it);
        }
    }
    fail_requests(failed, reason, false);
}

void EngineClient::fail_requests(const std::vector<std::pair<std::string, std::shared_ptr<OutputCallback>>>& failed,
                                 const std::string& reason, bool overloaded) {
    for (const auto& [id, cb] : failed) {
        ipc::RequestOutput out;
        out.request_id = id;
        out.finish_reason = ipc::FinishReason::kError;
        out.error = reason;
        out.overloaded = overloaded;
        (*cb)(out);
    }
}

}  // namespace moeserve::serve
