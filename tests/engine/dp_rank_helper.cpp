// One DP rank process for the multi-process DP + EP test: connects through the rendezvous store
// (Gloo over loopback), loads its EP shard of the model, runs EngineCore + DpCoordinator over a
// scripted workload and writes each request's tokens and its counters to an output file.
// Exit codes: 0 ok, 3 Error kUnavailable, 4 other error. Usage:
//   dp_rank_helper --rank R --dp D --store HOST:PORT --model DIR --workload FILE --out FILE
//                  [--hybrid 0|1] [--timeout-ms T] [--flip 0|1]
// Workload lines: "<dp rank> <round> <request id> <max_tokens> <tok,tok,...>".
#include <csignal>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "moeserve/core/error.h"
#include "moeserve/engine/dp_coordinator.h"
#include "moeserve/engine/scheduler/policy_pd_hybrid.h"
#include "moeserve/model/registry.h"
#include "moeserve/parallel/gloo_comm.h"

using namespace moeserve;

namespace {

struct Args {
    int rank = 0, dp = 2, store_port = 0, timeout_ms = 10000;
    bool hybrid = false, flip = false;
    std::string store_host = "127.0.0.1", model, workload, out;
};

Args parse(int argc, char** argv) {
    Args a;
    for (int i = 1; i + 1 < argc; i += 2) {
        const std::string k = argv[i], v = argv[i + 1];
        if (k == "--rank")
            a.rank = std::stoi(v);
        else if (k == "--dp")
            a.dp = std::stoi(v);
        else if (k == "--store") {
            a.store_host = v.substr(0, v.rfind(':'));
            a.store_port = std::stoi(v.substr(v.rfind(':') + 1));
        } else if (k == "--timeout-ms")
            a.timeout_ms = std::stoi(v);
        else if (k == "--hybrid")
            a.hybrid = v == "1";
        else if (k == "--flip")
            a.flip = v == "1";
        else if (k == "--model")
            a.model = v;
        else if (k == "--workload")
            a.workload = v;
        else if (k == "--out")
            a.out = v;
    }
    return a;
}

std::map<int64_t, std::vector<ipc::AddRequest>> read_workload(const std::string& path, int rank, int64_t& last_round) {
    std::map<int64_t, std::vector<ipc::AddRequest>> plan;
    std::ifstream in(path);
    std::string line;
    last_round = 0;
    while (std::getline(in, line)) {
        std::istringstream ss(line);
        int r = 0;
        int64_t round = 0;
        ipc::AddRequest add;
        std::string toks;
        ss >> r >> round >> add.request_id >> add.sampling.max_tokens >> toks;
        last_round = std::max(last_round, round);
        if (r != rank) continue;
        std::stringstream ts(toks);
        for (std::string t; std::getline(ts, t, ',');) add.prompt_token_ids.push_back(std::stoi(t));
        add.sampling.temperature = 0;
        plan[round].push_back(add);
    }
    return plan;
}

int run(const Args& a) {
    parallel::GlooConnectOptions g;
    g.sizes = {a.dp, 1, a.dp};
    g.rank = a.rank;
    g.store_host = a.store_host;
    g.store_port = a.store_port;
    g.hostname = "127.0.0.1";
    g.timeout = std::chrono::milliseconds(a.timeout_ms);
    g.fingerprint = "dp_rank_helper";
    parallel::ParallelContext ctx = parallel::connect_gloo(g);
    ThreadPool pool(1);
    model::LoadOptions o{.max_model_len = 256};
    o.parallel = model::ParallelConfig::from_context(ctx);
    o.parallel.debug_flip_moe_exchange = a.flip;
    auto model = model::load_model(a.model, pool, o);
    engine::EngineConfig ec;
    ec.max_num_seqs = 16;
    ec.max_num_batched_tokens = 16;
    ec.max_model_len = 256;
    ec.block_size = 16;
    ec.num_blocks = 32;
    ec.engine_index = a.rank;
    std::unique_ptr<engine::SchedulingPolicy> policy;
    if (a.hybrid) policy = std::make_unique<engine::PdHybridPolicy>();
    engine::EngineCore core(*model, pool, ec, std::move(policy));
    engine::DpCoordinator coord(core, *ctx.dp, engine::DpCoordinatorOptions{});
    int64_t last_round = 0;
    auto plan = read_workload(a.workload, a.rank, last_round);
    std::map<std::string, std::vector<int32_t>> tokens;
    for (int64_t round = 0;; ++round) {
        if (auto it = plan.find(round); it != plan.end()) {
            for (const auto& add : it->second) core.add_request(add);
        }
        for (const auto& out : coord.step().outputs) {
            auto& t = tokens[out.request_id];
            t.insert(t.end(), out.new_token_ids.begin(), out.new_token_ids.end());
        }
        if (round >= last_round && !coord.global_has_work()) break;
    }
    std::ofstream out(a.out);
    for (const auto& [id, t] : tokens) {
        out << id << ' ';
        for (size_t i = 0; i < t.size(); ++i) out << (i ? "," : "") << t[i];
        out << '\n';
    }
    const auto& c = coord.counters();
    out << "#counters prefill " << c.prefill_steps << " decode " << c.decode_steps << " mixed " << c.mixed_steps
        << " dummy " << (c.dummy_prefill_steps + c.dummy_decode_steps + c.dummy_mixed_steps) << " control_ms "
        << c.control_seconds * 1e3 << " forward_ms " << c.forward_seconds * 1e3 << '\n';
    return 0;
}

}  // namespace

int main(int argc, char** argv) {
    // A write to a peer that died must be an error (EPIPE -> Error kUnavailable), not a kill.
    signal(SIGPIPE, SIG_IGN);
    const Args a = parse(argc, argv);
    try {
        return run(a);
    } catch (const Error& e) {
        std::fprintf(stderr, "dp rank %d: %s\n", a.rank, e.what());
        return e.code() == ErrorCode::kUnavailable ? 3 : 4;
    } catch (const std::exception& e) {
        std::fprintf(stderr, "dp rank %d: %s\n", a.rank, e.what());
        return 4;
    }
}
