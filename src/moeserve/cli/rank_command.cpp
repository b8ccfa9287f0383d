// The hidden `moeserve rank`: one rank process of a deployment (serve starts one per local
// (dp_rank, tp_rank)). Joins the Gloo world through the head's rendezvous store, loads its TP/EP
// shard, and then either runs its DP group's EngineCore and talks to the API server (tp_rank 0),
// or follows its TP leader's forwards (tp_rank > 0).
#include <fmt/format.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <future>
#include <memory>
#include <optional>
#include <thread>

#include "moeserve/cli/engine_flags.h"
#include "moeserve/cli/eplb_flags.h"
#include "moeserve/cli/kv_transfer_config.h"
#include "moeserve/cli/rank_group.h"
#include "moeserve/cli/serve_layout.h"
#include "moeserve/cli/speculative_config.h"
#include "moeserve/cli/structured_vocabulary.h"
#include "moeserve/core/error.h"
#include "moeserve/core/log.h"
#include "moeserve/core/thread_pool.h"
#include "moeserve/engine/dp_coordinator.h"
#include "moeserve/engine/engine_core.h"
#include "moeserve/engine/engine_proc.h"
#include "moeserve/engine/engine_proc_tp.h"
#include "moeserve/engine/scheduler/policy_pd_hybrid.h"
#include "moeserve/ipc/auth.h"
#include "moeserve/model/kv_cache.h"
#include "moeserve/model/registry.h"
#include "moeserve/parallel/gloo_comm.h"
#include "moeserve/parallel/layout.h"
#include "moeserve/parallel/rendezvous.h"

namespace moeserve::cli {

namespace {

struct RankOptions {
    EngineOptions engine;
    int rank = 0;
    int dp = 1, tp = 1, ep = 1;
    // One of each per API server (--api-server-count), in server order.
    std::vector<std::string> input_addresses, output_addresses;
    std::string store_host = "127.0.0.1";
    int store_port = 0;
    std::string gloo_iface, gloo_hostname;
    int distributed_timeout_ms = 30000;
    bool collective_guard = true;
    int heartbeat_timeout_ms = 30000;
    bool self_heal = false;  // re-form the group after a failed step (the launcher restarts dead ranks)
    bool rejoin = false;     // this process replaces a dead rank of a formed group
};

// The engine socket addresses (inputs, outputs; one each per API server): as given, or
// (kAddressFromStore, one API server) as the head published them, read over one store connection.
std::pair<std::vector<std::string>, std::vector<std::string>> engine_addresses(const RankOptions& o, int dp_rank) {
    if (o.input_addresses.size() != o.output_addresses.size()) {
        raise(ErrorCode::kInvalidArgument, "rank: {} --input-address but {} --output-address", o.input_addresses.size(),
              o.output_addresses.size());
    }
    if (o.input_addresses.size() != 1) return {o.input_addresses, o.output_addresses};
    std::pair<std::string, std::string> out{o.input_addresses[0], o.output_addresses[0]};
    if (out.first != kAddressFromStore && out.second != kAddressFromStore) return {{out.first}, {out.second}};
    parallel::TcpStore store(o.store_host, o.store_port, std::chrono::milliseconds(o.distributed_timeout_ms));
    const auto read = [&store](const std::string& key) {
        const std::vector<char> value = store.get(key);
        return std::string(value.begin(), value.end());
    };
    if (out.first == kAddressFromStore) out.first = read(store_key_input_address(dp_rank));
    if (out.second == kAddressFromStore) out.second = read(store_key_output_address());
    return {{out.first}, {out.second}};
}

// VmRSS of this process in bytes (0 if unreadable).
int64_t resident_bytes() {
    std::ifstream in("/proc/self/status");
    std::string key;
    int64_t kb = 0;
    while (in >> key) {
        if (key == "VmRSS:") {
            in >> kb;
            return kb * 1024;
        }
        in.ignore(1 << 12, '\n');
    }
    return 0;
}

// How often an idle TP leader pings its followers: a quarter of the collective timeout, at most 1 s.
std::chrono::milliseconds keepalive_interval(const RankOptions& o) {
    return std::chrono::milliseconds(std::min(1000, std::max(10, o.distributed_timeout_ms / 4)));
}

double mib(int64_t bytes) { return static_cast<double>(bytes) / (1024.0 * 1024.0); }

// How this rank meets the others (more than one rank).
parallel::GlooConnectOptions gloo_options(const RankOptions& o, const EngineOptions& engine,
                                          const std::string& config_text) {
    Deployment d;  // only the fields the fingerprint reads
    d.sizes = {o.dp, o.tp, o.ep};
    d.collective_guard = o.collective_guard;
    d.max_rank_restarts = o.self_heal ? 1 : 0;  // the launcher passes --self-heal when d.self_healing()
    parallel::GlooConnectOptions go;
    go.sizes = d.sizes;
    go.rank = o.rank;
    go.store_host = o.store_host;
    go.store_port = o.store_port;
    go.iface = o.gloo_iface;
    go.hostname = o.gloo_hostname;
    go.timeout = std::chrono::milliseconds(o.distributed_timeout_ms);
    go.fingerprint = deployment_fingerprint(engine, d, config_text);
    go.collective_guard = o.collective_guard;
    if (const char* skip = std::getenv("MOESERVE_DEBUG_SKIP_COLLECTIVE"); skip != nullptr) {
        go.debug_skip_collective = skip;  // a test hook (tests/integration/parallel_serve_test.py, suite desync)
    }
    return go;
}

// A TP follower's life: its leader's forwards, and with self-healing, again after each time the
// group re-forms (the leader then announces the KV cache anew).
// A test hook (MOESERVE_DEBUG_FOLLOWER_FORWARD_DELAY_MS, tests/integration/pd_disagg_test.py suite
// kill): a TP follower that sleeps before each forward, so a prefill lasts long enough to kill a
// rank while its KV streams.
class DelayedModel final : public model::Model {
public:
    DelayedModel(model::Model& inner, std::chrono::milliseconds delay) : inner_(inner), delay_(delay) {}
    const model::ModelInfo& info() const override { return inner_.info(); }
    std::unique_ptr<model::KvCache> create_kv_cache(int64_t num_blocks, int64_t block_size) const override {
        return inner_.create_kv_cache(num_blocks, block_size);
    }
    TensorView forward(const model::ForwardBatch& batch, model::KvCache& kv) override {
        std::this_thread::sleep_for(delay_);
        return inner_.forward(batch, kv);
    }
    bool has_draft_head() const override { return inner_.has_draft_head(); }
    TensorView forward_draft(const model::ForwardBatch& batch, model::KvCache& kv) override {
        return inner_.forward_draft(batch, kv);
    }
    void group_reformed() override { inner_.group_reformed(); }

private:
    model::Model& inner_;
    std::chrono::milliseconds delay_;
};

int run_follower(model::Model& model, parallel::ParallelContext& ctx, RankGroup* group, const RankOptions& o,
                 Logger& logger) {
    std::optional<DelayedModel> delayed;
    if (const char* ms = std::getenv("MOESERVE_DEBUG_FOLLOWER_FORWARD_DELAY_MS"); ms != nullptr) {
        delayed.emplace(model, std::chrono::milliseconds(std::atoi(ms)));
    }
    model::Model& run_model = delayed ? static_cast<model::Model&>(*delayed) : model;
    std::optional<engine::KvTransferFollower> kv_transfer;
    if (!o.engine.kv_transfer_config.empty()) {
        const auto& g = ctx.groups;
        kv_transfer.emplace(rank_kv_transfer_config(o.engine.kv_transfer_config),
                            engine::kv_port_offset(g.dp_rank, o.tp, g.tp_rank), g.tp_rank, &logger);
    }
    while (true) {
        try {
            return engine::run_tp_follower(run_model, *ctx.tp, logger, kv_transfer ? &*kv_transfer : nullptr);
        } catch (const Error& e) {
            if (group == nullptr || !o.self_heal || !group->regroup(e, nullptr, std::chrono::milliseconds(1000))) throw;
            model.group_reformed();  // EPLB's placement starts over on every rank
        }
    }
}

// Runs build() on another thread while this one keeps the TP followers fed (leader null: no
// followers, build() here). They wait for the leader's first message in a broadcast bounded by
// --distributed-timeout-ms, and a leader's setup can outlast that: reading the structured-output
// vocabulary took 3.7 s under ASan on a loaded machine, and the followers' timeouts re-formed the
// group again and again until the restarts gave up.
template <class Build>
auto built_while_feeding(engine::TpLeaderModel* leader, std::chrono::milliseconds interval, Build build) {
    if (leader == nullptr) return build();
    auto result = std::async(std::launch::async, std::move(build));
    while (result.wait_for(interval / 2) != std::future_status::ready) leader->keepalive();
    return result.get();
}

// The engine configuration of a DP rank's leader (TP rank 0).
engine::EngineConfig leader_engine_config(const RankOptions& o, const EngineOptions& engine,
                                          const engine::SpeculativeConfig& speculative, const model::ModelInfo& info,
                                          const nlohmann::json& config, int dp_rank, Logger& logger) {
    engine::EngineConfig ec = make_engine_config(engine, speculative, info, total_ram_bytes());
    ec.engine_index = dp_rank;
    std::string vocab_error;
    ec.vocabulary =
        load_structured_vocabulary(o.engine.tokenizer_dir(), info.vocab_size, config, o.engine.model, &vocab_error);
    if (!ec.vocabulary) MOESERVE_LOG_W(logger, "engine", "structured outputs are off: %s", vocab_error.c_str());
    ec.kv_transfer = rank_kv_transfer_config(engine.kv_transfer_config);
    return ec;
}

// How this rank loads the model (its parallel layout is added once the group exists).
model::LoadOptions rank_load_options(const EngineOptions& engine, const engine::SpeculativeConfig& speculative,
                                     Logger& logger) {
    model::LoadOptions load{.max_model_len = engine.max_model_len,
                            .dtype = engine.dtype,
                            .quantization = engine.quantization,
                            .kv_cache_dtype = engine.kv_cache_dtype,
                            .eplb = parse_eplb_flags(engine.enable_eplb, engine.eplb_config),
                            .draft_head = speculative.uses_draft_head(),
                            .logger = &logger};
    if (const char* skew = std::getenv("MOESERVE_DEBUG_ROUTER_SKEW"); skew != nullptr) {
        load.debug_router_skew = skew;  // a test hook (tests/integration/parallel_serve_test.py, suite eplb)
    }
    return load;
}

int run_rank(const RankOptions& o) {
    if (o.rejoin && std::getenv("MOESERVE_DEBUG_EXIT_ON_REJOIN") != nullptr) {  // a test hook: a crash loop
        std::fprintf(stderr, "rank %d: exiting at once on a restart (MOESERVE_DEBUG_EXIT_ON_REJOIN)\n", o.rank);
        return 3;
    }
    const auto started = std::chrono::steady_clock::now();
    const parallel::ParallelSizes sizes{o.dp, o.tp, o.ep};
    parallel::validate(sizes);
    const auto groups = parallel::rank_groups(sizes, o.rank);
    Logger logger(parallel::rank_tag(groups), parse_log_level(o.engine.log_level));
    const model::ModelSource source = model::open_model_source(o.engine.model);  // read once, here
    const nlohmann::json& config = source.config.json();
    EngineOptions engine = o.engine;
    engine.max_model_len = resolve_max_model_len(o.engine, config);
    ThreadPool pool(
        std::max(1, o.engine.threads > 0 ? o.engine.threads : static_cast<int>(std::thread::hardware_concurrency())));

    parallel::ParallelContext single;  // one rank: no communicators
    std::optional<RankGroup> group;
    const engine::SpeculativeConfig speculative = parse_speculative_config(engine.speculative_config, source);
    model::LoadOptions load = rank_load_options(engine, speculative, logger);
    if (sizes.world() > 1) {
        group.emplace(gloo_options(o, engine, config.dump()), o.rejoin, logger);
        load.parallel = model::ParallelConfig::from_context(group->context());
    }
    parallel::ParallelContext& ctx = group ? group->context() : single;
    auto model = model::load_model(source, pool, load);
    if (group) {
        group->join();  // a restarted rank joins once loaded
        group->announce_loaded();
    }
    const auto& info = model->info();
    const double load_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
    MOESERVE_LOG_I(logger, "engine",
                   "rank %d of %d: weights %.1f MiB, resident %.1f MiB after load, connect + load %.2f s, %d threads",
                   o.rank, sizes.world(), mib(info.rank_weight_bytes > 0 ? info.rank_weight_bytes : info.weight_bytes),
                   mib(resident_bytes()), load_s, pool.num_threads());
    MOESERVE_LOG_I(logger, "engine", "rank %d: quantization: %s", o.rank, info.quantization.c_str());
    const std::string kv_warning =
        model::kv_cache_dtype_warning(model::parse_kv_cache_dtype(engine.kv_cache_dtype, DType::kBF16));
    if (!kv_warning.empty()) MOESERVE_LOG_W(logger, "engine", "rank %d: %s", o.rank, kv_warning.c_str());

    if (groups.tp_rank != 0) return run_follower(*model, ctx, group ? &*group : nullptr, o, logger);

    std::unique_ptr<engine::TpLeaderModel> leader;
    model::Model* served = model.get();
    if (sizes.tp > 1) {
        // Idle followers wait in a broadcast bounded by the timeout: keep them fed well within it.
        leader = std::make_unique<engine::TpLeaderModel>(*model, *ctx.tp, keepalive_interval(o));
        served = leader.get();
    }
    engine::EngineConfig ec = built_while_feeding(leader.get(), keepalive_interval(o), [&] {
        return leader_engine_config(o, engine, speculative, info, config, groups.dp_rank, logger);
    });
    ec.logger = &logger;
    std::unique_ptr<engine::SchedulingPolicy> policy;
    if (engine.pd_hybrid) policy = std::make_unique<engine::PdHybridPolicy>();
    engine::EngineCore core(*served, pool, ec, std::move(policy));
    if (const auto* kv = core.kv_transfer()) {
        MOESERVE_LOG_I(logger, "engine", "engine %d: KV transfer %s%s%s", groups.dp_rank,
                       engine::kv_role_name(kv->config().role), kv->endpoint().empty() ? "" : ", serving KV on ",
                       kv->endpoint().c_str());
    }
    MOESERVE_LOG_I(logger, "engine",
                   "model %s loaded: %d KV blocks of %d tokens (%s, %lld bytes/token), resident %.1f MiB",
                   info.model_type.c_str(), ec.num_blocks, ec.block_size, engine.kv_cache_dtype.c_str(),
                   static_cast<long long>(info.kv_bytes_per_token), mib(resident_bytes()));
    const auto [input_addresses, output_addresses] = engine_addresses(o, groups.dp_rank);
    ipc::EngineChannel channel(
        input_addresses, output_addresses,
        {.heartbeat_timeout_ms = o.heartbeat_timeout_ms, .rank_plane_key = ec.kv_transfer.rank_plane_key});
    engine::EngineProcOptions eo{.engine_index = groups.dp_rank};
    if (leader) eo.heartbeat_ms = static_cast<int>(std::min<int64_t>(eo.heartbeat_ms, keepalive_interval(o).count()));
    if (leader) eo.on_iteration = [&leader] { leader->keepalive(); };
    std::optional<engine::DpCoordinator> coordinator;
    if (parallel::dp_groups_step_together(sizes)) {
        coordinator.emplace(core, *ctx.dp, engine::DpCoordinatorOptions{});
    }
    if (group && o.self_heal) {
        eo.regroup = [&](const Error& failure, const std::function<void()>& still_waiting) {
            for (Error last = failure;;) {
                if (!group->regroup(last, still_waiting, std::chrono::milliseconds(eo.heartbeat_ms))) return false;
                try {
                    model->group_reformed();          // EPLB's placement starts over on every rank
                    if (leader) leader->regrouped();  // the followers start over: the KV cache again
                    if (coordinator) coordinator->regrouped();
                    return true;
                } catch (const Error& e) {
                    last = e;  // the new generation failed at once: the next one
                }
            }
        };
    }
    const int rc = coordinator ? engine::run_engine_loop_dp(core, *coordinator, channel, logger, eo)
                               : engine::run_engine_loop(core, channel, logger, eo);
    if (leader && rc == 0) leader->shutdown();
    return rc;
}

}  // namespace

void add_rank_command(CLI::App& app, std::function<int()>* action) {
    auto r = std::make_shared<RankOptions>();
    CLI::App* rank = app.add_subcommand("rank", "")->group("");  // hidden: started by serve
    r->engine = engine_defaults(EngineCommand::kRank);
    add_engine_flags(rank, r->engine, EngineCommand::kRank);
    rank->add_option("--rank", r->rank);
    rank->add_option("--dp-size", r->dp);
    rank->add_option("--tp-size", r->tp);
    rank->add_option("--ep-size", r->ep);
    rank->add_option("--input-address", r->input_addresses)->required();
    rank->add_option("--output-address", r->output_addresses)->required();
    rank->add_option("--store-host", r->store_host);
    rank->add_option("--store-port", r->store_port);
    rank->add_option("--gloo-iface", r->gloo_iface);
    rank->add_option("--gloo-hostname", r->gloo_hostname);
    rank->add_option("--distributed-timeout-ms", r->distributed_timeout_ms);
    rank->add_flag("--no-collective-guard{false}", r->collective_guard);
    rank->add_option("--heartbeat-timeout-ms", r->heartbeat_timeout_ms);
    rank->add_flag("--self-heal", r->self_heal);
    rank->add_flag("--rejoin", r->rejoin);
    rank->callback([r, action] { *action = [r] { return run_rank(*r); }; });
}

}  // namespace moeserve::cli
