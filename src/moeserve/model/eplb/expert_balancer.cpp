#include "moeserve/model/eplb/expert_balancer.h"

#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <string>

#include <fmt/format.h>

#include "moeserve/core/error.h"

namespace moeserve::model {

namespace {
constexpr int kMoverNice = 10;  // below the engine's threads: steps go first on a busy machine
// A placement is adopted only when it lowers the layer's max/mean load by this share: moves cost
// loads and memory traffic, so near-equal placements are left alone.
constexpr double kMinGain = 0.10;
}  // namespace

ExpertBalancer::ExpertBalancer(const EplbConfig& config, int ep_rank, int64_t num_moe_layers,
                               const ExpertPlacement& initial, LoadExperts load, Install install, Logger* logger)
    : config_(config),
      ep_rank_(ep_rank),
      num_layers_(num_moe_layers),
      num_experts_(initial.num_experts()),
      initial_(initial),
      load_(std::move(load)),
      install_(std::move(install)),
      logger_(logger),
      placements_(static_cast<size_t>(num_moe_layers), initial),
      window_(static_cast<size_t>(config.window_size * num_moe_layers * initial.num_experts()), 0) {
    MOESERVE_CHECK(config.window_size >= 1 && config.step_interval >= 1, "EPLB window {} / interval {}",
                   config.window_size, config.step_interval);
    stats_.rank_load.assign(static_cast<size_t>(initial.ep_size()), 0);
}

ExpertBalancer::~ExpertBalancer() { stop_mover(); }

void ExpertBalancer::begin_forward(parallel::Communicator& ep, bool counted) {
    ++forward_;
    counting_ = counted;
    const int64_t row = num_layers_ * num_experts_;
    std::fill_n(window_.begin() + (forward_ % config_.window_size) * row, row, 0);
    if (!pending_.empty()) {
        advance_move(ep);
    } else if (forward_ % config_.step_interval == 0) {
        decide(ep);
    }
}

int32_t* ExpertBalancer::counts(int64_t moe_layer) {
    if (!counting_) return nullptr;
    return window_.data() + ((forward_ % config_.window_size) * num_layers_ + moe_layer) * num_experts_;
}

void ExpertBalancer::decide(parallel::Communicator& ep) {
    // 1. the window's counts, summed over the EP group: every rank then holds the same loads
    const int64_t row = num_layers_ * num_experts_;
    std::vector<int64_t> load(static_cast<size_t>(row), 0);
    for (int64_t f = 0; f < config_.window_size; ++f) {
        const int32_t* w = window_.data() + f * row;
        for (int64_t i = 0; i < row; ++i) load[static_cast<size_t>(i)] += w[i];
    }
    ep.all_reduce_sum(std::span<int64_t>(load));
    // 2. each layer's balance now, and a better placement where there is one
    ++stats_.decisions;
    std::fill(stats_.rank_load.begin(), stats_.rank_load.end(), 0);
    double sum_max = 0, sum_mean = 0, after_max = 0;
    move_slots_ = 0;
    for (int64_t m = 0; m < num_layers_; ++m) {
        const std::span<const int64_t> layer_load(load.data() + m * num_experts_, static_cast<size_t>(num_experts_));
        const ExpertPlacement& now = placements_[static_cast<size_t>(m)];
        const std::vector<double> loads = now.rank_loads(layer_load);
        const double mean = std::accumulate(loads.begin(), loads.end(), 0.0) / static_cast<double>(loads.size());
        for (size_t r = 0; r < loads.size(); ++r) stats_.rank_load[r] += std::llround(loads[r]);
        sum_max += *std::max_element(loads.begin(), loads.end());
        sum_mean += mean;
        ExpertPlacement next = now.rebalanced(layer_load);
        const std::vector<double> next_loads = next.rank_loads(layer_load);
        if (!(next == now) && load_imbalance(next_loads) < load_imbalance(loads) * (1.0 - kMinGain)) {
            for (int r = 0; r < now.ep_size(); ++r) move_slots_ += now.changed_slots(next, r);
            after_max += *std::max_element(next_loads.begin(), next_loads.end());
            pending_.emplace_back(m, std::move(next));
        } else {
            after_max += *std::max_element(loads.begin(), loads.end());
        }
    }
    stats_.imbalance = sum_mean > 0 ? sum_max / sum_mean : 1.0;
    if (logger_ != nullptr && (config_.log_balancedness || !pending_.empty())) {
        std::string ranks;
        for (int64_t v : stats_.rank_load) ranks += (ranks.empty() ? "" : " ") + std::to_string(v);
        MOESERVE_LOG_I(*logger_, "eplb", "forward %lld: rank loads [%s], max/mean %.3f; %s",
                       static_cast<long long>(forward_), ranks.c_str(), stats_.imbalance,
                       pending_.empty()
                           ? "placement kept"
                           : fmt::format("moving {} of {} layers ({} slots), max/mean then {:.3f}", pending_.size(),
                                         num_layers_, move_slots_, sum_mean > 0 ? after_max / sum_mean : 1.0)
                                 .c_str());
    }
    if (!pending_.empty()) start_mover();
}

void ExpertBalancer::start_mover() {
    switched_ = 0;
    staged_.clear();
    staged_.resize(pending_.size());
    {
        std::lock_guard lock(mutex_);
        staged_count_ = 0;
        mover_may_load_ = 0;
        stop_ = false;
        mover_error_.reset();
    }
    mover_ = std::thread([this] { mover_loop(); });
}

void ExpertBalancer::mover_loop() {
    ::setpriority(PRIO_PROCESS, static_cast<id_t>(::gettid()), kMoverNice);  // best effort
    for (size_t i = 0; i < pending_.size(); ++i) {
        {  // one layer ahead of the switches at most: its old and new slots are both held
            std::unique_lock lock(mutex_);
            wake_.wait(lock, [&] { return stop_ || i <= mover_may_load_; });
            if (stop_) return;
        }
        const auto& [layer, next] = pending_[i];
        std::optional<Experts> experts;
        try {
            if (placements_[static_cast<size_t>(layer)].changed_slots(next, ep_rank_) > 0) experts = load_(layer, next);
        } catch (const Error& e) {
            std::lock_guard lock(mutex_);
            mover_error_ = e;
            return;
        } catch (const std::exception& e) {  // e.g. out of memory: the step fails, not the process
            std::lock_guard lock(mutex_);
            mover_error_ =
                Error(ErrorCode::kInternal, fmt::format("EPLB: loading layer {} failed: {}", layer, e.what()));
            return;
        }
        std::lock_guard lock(mutex_);
        staged_[i] = std::move(experts);
        staged_count_ = i + 1;
    }
}

void ExpertBalancer::advance_move(parallel::Communicator& ep) {
    int64_t ready = 0;
    {
        std::lock_guard lock(mutex_);
        if (mover_error_) throw *mover_error_;
        ready = static_cast<int64_t>(staged_count_);
    }
    // the fewest layers any rank has ready: max of the negated counts
    std::vector<int64_t> v{-ready};
    ep.all_reduce_max(std::span<int64_t>(v));
    const auto agreed = static_cast<size_t>(-v[0]);
    for (; switched_ < agreed; ++switched_) {
        auto& [layer, next] = pending_[switched_];
        std::optional<Experts> experts;
        {
            std::lock_guard lock(mutex_);
            experts = std::move(staged_[switched_]);
        }
        install_(layer, std::move(experts));
        placements_[static_cast<size_t>(layer)] = std::move(next);
    }
    {
        std::lock_guard lock(mutex_);
        mover_may_load_ = switched_;
    }
    wake_.notify_all();
    if (switched_ < pending_.size()) return;
    stop_mover();
    pending_.clear();
    ++stats_.rebalances;
    stats_.moved_slots += move_slots_;
}

void ExpertBalancer::stop_mover() {
    {
        std::lock_guard lock(mutex_);
        stop_ = true;
    }
    wake_.notify_all();
    if (mover_.joinable()) mover_.join();
}

void ExpertBalancer::reset() {
    stop_mover();
    pending_.clear();
    staged_.clear();
    for (int64_t m = 0; m < num_layers_; ++m) {
        ExpertPlacement& p = placements_[static_cast<size_t>(m)];
        if (p == initial_) continue;
        std::optional<Experts> experts;
        if (p.changed_slots(initial_, ep_rank_) > 0) experts = load_(m, initial_);
        install_(m, std::move(experts));
        p = initial_;
    }
    std::fill(window_.begin(), window_.end(), 0);
    forward_ = 0;
}

}  // namespace moeserve::model
