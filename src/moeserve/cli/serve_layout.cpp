// Deployment validation, socket addresses, fingerprint and rank argv for serve / rank.
#include "moeserve/cli/serve_layout.h"

#include <fmt/format.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "moeserve/cli/engine_flags.h"
#include "moeserve/core/error.h"

namespace moeserve::cli {

std::string read_text_file(const std::string& path) {
    std::ifstream in(path);
    if (!in) raise(ErrorCode::kNotFound, "cannot open {}", path);
    std::ostringstream s;
    s << in.rdbuf();
    return s.str();
}

int32_t config_int(const nlohmann::json& config, const char* field, int32_t fallback, const std::string& dir) {
    const auto it = config.find(field);
    if (it == config.end() || it->is_null()) return fallback;
    if (!it->is_number_integer() || it->get<int64_t>() < 0 || it->get<int64_t>() > INT32_MAX) {
        raise(ErrorCode::kInvalidModel, "{}/config.json: field '{}' must be a non-negative integer; got {}", dir, field,
              it->dump());
    }
    return it->get<int32_t>();
}

int32_t resolve_max_model_len(const EngineOptions& o, const nlohmann::json& config) {
    const int64_t positions = config_int(config, "max_position_embeddings", 4096, o.model);
    if (o.max_model_len < 0) raise(ErrorCode::kInvalidArgument, "--max-model-len must be > 0; got {}", o.max_model_len);
    if (o.max_model_len == 0) return static_cast<int32_t>(std::min<int64_t>(positions, 4096));
    if (o.max_model_len > positions) {
        raise(ErrorCode::kInvalidArgument, "--max-model-len {} exceeds the model's max_position_embeddings {}",
              o.max_model_len, positions);
    }
    return o.max_model_len;
}

// Across nodes the API server binds its ZeroMQ sockets on ports the kernel picks (never ports
// guessed from the rendezvous port: an outgoing connection may hold one) and publishes them in
// the rendezvous store; the ranks read them there (kAddressFromStore).
// API server 0 keeps the names of the one-server deployment; server s > 0 adds ".s<s>".
std::string Deployment::output_address(const std::string& ipc_dir, int server) const {
    if (local_sockets()) return "ipc://" + ipc_dir + "/out" + (server == 0 ? "" : fmt::format(".s{}", server));
    return kAddressFromStore;
}

std::string Deployment::input_address(const std::string& ipc_dir, int engine, int server) const {
    if (local_sockets())
        return fmt::format("ipc://{}/in{}{}", ipc_dir, engine, server == 0 ? "" : fmt::format(".s{}", server));
    return kAddressFromStore;
}

std::string Deployment::bind_address() const { return fmt::format("tcp://{}:*", address); }

std::string store_key_output_address() { return "moeserve/ipc/output"; }
std::string store_key_input_address(int engine) { return fmt::format("moeserve/ipc/input/{}", engine); }

namespace {

// External load balancing (--data-parallel-rank r): this instance runs DP rank r alone, with its
// own API server.
void run_one_dp_rank(const ParallelFlags& f, int dp, Deployment& d) {
    const int r = f.data_parallel_rank;
    if (f.headless) {
        raise(ErrorCode::kInvalidArgument,
              "--data-parallel-rank {} runs that DP rank with its own API server; it does not go with --headless", r);
    }
    if (r >= dp) {
        raise(ErrorCode::kInvalidArgument,
              "--data-parallel-rank must be in [0, {}) for --data-parallel-size {}; got {}", dp, dp, r);
    }
    if ((f.data_parallel_start_rank != 0 && f.data_parallel_start_rank != r) ||
        (f.data_parallel_size_local >= 0 && f.data_parallel_size_local != 1)) {
        raise(ErrorCode::kInvalidArgument,
              "--data-parallel-rank {} runs one DP rank (rank {}, size-local 1); drop --data-parallel-start-rank "
              "and --data-parallel-size-local",
              r, r);
    }
    // DP rank 0 may take any free port (0; it logs the one it bound), the others must be told it.
    if (r > 0 && f.data_parallel_rpc_port == 0) {
        raise(ErrorCode::kInvalidArgument,
              "--data-parallel-rank {} needs --data-parallel-rpc-port: the instance of DP rank 0 hosts the "
              "rendezvous store on it and the others connect to it",
              r);
    }
    d.start = r;
    d.local = 1;
    d.external_lb = true;
}

// Tensor parallelism splits the attention heads, and splits or replicates the KV heads.
void check_tp_splits_heads(int tp, const nlohmann::json& config) {
    const int64_t heads = config_int(config, "num_attention_heads", 1, "--model");
    const int64_t kv_heads = config_int(config, "num_key_value_heads", static_cast<int32_t>(heads), "--model");
    if (heads % tp != 0) {
        raise(ErrorCode::kInvalidArgument,
              "--tensor-parallel-size {} does not divide the model's num_attention_heads {}", tp, heads);
    }
    if (kv_heads % tp != 0 && tp % kv_heads != 0) {
        raise(ErrorCode::kInvalidArgument,
              "--tensor-parallel-size {} and the model's num_key_value_heads {}: one must divide the other "
              "(KV heads are split or replicated)",
              tp, kv_heads);
    }
}

}  // namespace

Deployment make_deployment(const ParallelFlags& f, const nlohmann::json& config, const std::string& gloo_iface) {
    Deployment d;
    if (f.data_parallel_size < 1)
        raise(ErrorCode::kInvalidArgument, "--data-parallel-size must be >= 1; got {}", f.data_parallel_size);
    if (f.tensor_parallel_size < 1)
        raise(ErrorCode::kInvalidArgument, "--tensor-parallel-size must be >= 1; got {}", f.tensor_parallel_size);
    d.sizes = parallel::make_sizes(f.data_parallel_size, f.tensor_parallel_size, f.enable_expert_parallel);
    parallel::validate(d.sizes);
    const int dp = d.sizes.dp, tp = d.sizes.tp;
    d.start = f.data_parallel_start_rank;
    if (d.start < 0 || d.start >= dp) {
        raise(ErrorCode::kInvalidArgument,
              "--data-parallel-start-rank must be in [0, {}) for --data-parallel-size {}; got {}", dp, dp, d.start);
    }
    d.local = f.data_parallel_size_local < 0 ? dp - d.start : f.data_parallel_size_local;
    if (d.local < 1) raise(ErrorCode::kInvalidArgument, "--data-parallel-size-local must be >= 1; got {}", d.local);
    if (d.start + d.local > dp) {
        raise(ErrorCode::kInvalidArgument,
              "--data-parallel-start-rank {} + --data-parallel-size-local {} exceeds --data-parallel-size {}", d.start,
              d.local, dp);
    }
    if (f.data_parallel_rank >= 0) run_one_dp_rank(f, dp, d);
    if (!f.headless && !d.external_lb && d.start != 0) {
        raise(ErrorCode::kInvalidArgument,
              "the head node (without --headless) runs the DP ranks from 0; got --data-parallel-start-rank {} "
              "(start the other nodes with --headless)",
              d.start);
    }
    d.all_local = !f.headless && d.local == dp;
    d.address = f.data_parallel_address.empty() ? "127.0.0.1" : f.data_parallel_address;
    d.rpc_port = f.data_parallel_rpc_port;
    if (d.rpc_port < 0 || d.rpc_port > 65535) {
        raise(ErrorCode::kInvalidArgument, "--data-parallel-rpc-port must be in [0, 65535]; got {}", d.rpc_port);
    }
    // The head may take any free port (0; it logs the one it bound), the other nodes must be told it.
    if (f.headless && d.rpc_port == 0) {
        raise(ErrorCode::kInvalidArgument,
              "a --headless node needs --data-parallel-rpc-port (the head's rendezvous port)");
    }
    if (!d.all_local && !d.external_lb && f.data_parallel_address.empty()) {
        raise(ErrorCode::kInvalidArgument,
              "ranks on several nodes need --data-parallel-address (the head's address, reachable from every node)");
    }
    if (f.distributed_timeout_ms < 100) {
        raise(ErrorCode::kInvalidArgument, "--distributed-timeout-ms must be >= 100; got {}", f.distributed_timeout_ms);
    }
    d.timeout_ms = f.distributed_timeout_ms;
    d.collective_guard = !f.disable_collective_guard;
    if (f.max_rank_restarts < 0) {
        raise(ErrorCode::kInvalidArgument, "--max-rank-restarts must be >= 0; got {}", f.max_rank_restarts);
    }
    d.max_rank_restarts = f.max_rank_restarts;
    check_tp_splits_heads(tp, config);
    d.gloo_iface = gloo_iface;
    // Without an interface name, ranks bind: loopback when all are here, the head's address on the
    // head, and the machine's hostname elsewhere.
    // External load balancing on the default (loopback) address: every instance on this node.
    const bool loopback = d.address == "127.0.0.1" || d.address == "localhost";
    d.gloo_hostname = d.all_local || (d.external_lb && loopback)      ? "127.0.0.1"
                      : f.headless || (d.external_lb && d.start != 0) ? ""
                                                                      : d.address;
    return d;
}

bool Deployment::self_healing() const { return max_rank_restarts > 0; }

std::string deployment_fingerprint(const EngineOptions& e, const Deployment& d, const std::string& config_text) {
    uint64_t h = 1469598103934665603ull;  // FNV-1a of config.json
    for (const unsigned char c : config_text) h = (h ^ c) * 1099511628211ull;
    return fmt::format("config.json fnv1a {:016x}, dp {} tp {} ep {}, collective guard {}, self-healing {}, {}", h,
                       d.sizes.dp, d.sizes.tp, d.sizes.ep, d.collective_guard ? "on" : "off",
                       d.self_healing() ? "on" : "off", engine_flags_fingerprint(e));
}

std::vector<std::string> rank_argv(const EngineOptions& e, const Deployment& d, int rank, int store_port,
                                   const std::string& ipc_dir, int threads) {
    const int dp_rank = rank / d.sizes.tp;
    std::vector<std::string> a = {"moeserve",
                                  "rank",
                                  "--rank",
                                  std::to_string(rank),
                                  "--dp-size",
                                  std::to_string(d.sizes.dp),
                                  "--tp-size",
                                  std::to_string(d.sizes.tp),
                                  "--ep-size",
                                  std::to_string(d.sizes.ep),
                                  "--store-host",
                                  d.address,
                                  "--store-port",
                                  std::to_string(store_port),
                                  "--distributed-timeout-ms",
                                  std::to_string(d.timeout_ms),
                                  "--heartbeat-timeout-ms",
                                  std::to_string(d.heartbeat_timeout_ms)};
    EngineOptions rank_engine = e;
    rank_engine.threads = threads;  // this rank's share of its host's cores
    const std::vector<std::string> engine_flags = rank_engine_argv(rank_engine);
    a.insert(a.end(), engine_flags.begin(), engine_flags.end());
    for (int s = 0; s < d.api_servers; ++s) {  // the engine connects to every API server
        a.insert(a.end(), {"--input-address", d.input_address(ipc_dir, dp_rank, s), "--output-address",
                           d.output_address(ipc_dir, s)});
    }
    if (!d.collective_guard) a.emplace_back("--no-collective-guard");
    if (d.self_healing()) a.emplace_back("--self-heal");
    if (!d.gloo_iface.empty()) a.insert(a.end(), {"--gloo-iface", d.gloo_iface});
    if (!d.gloo_hostname.empty()) a.insert(a.end(), {"--gloo-hostname", d.gloo_hostname});
    return a;
}

}  // namespace moeserve::cli
