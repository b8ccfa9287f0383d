// What `moeserve serve` and its hidden `moeserve rank` share: the engine flags (engine_flags.h), the parallel
// deployment (which (dp_rank, tp_rank) ranks this node runs, where the head's rendezvous store and
// ZeroMQ sockets are), its validation with clear messages, and the rank process's argv.
#pragma once

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>
#include <vector>

#include "moeserve/cli/engine_options.h"
#include "moeserve/parallel/layout.h"

namespace moeserve::cli {

// The parallel flags of serve, as given.
struct ParallelFlags {
    int data_parallel_size = 1;
    int tensor_parallel_size = 1;
    int data_parallel_size_local = -1;  // -1: data_parallel_size - start rank
    int data_parallel_start_rank = 0;
    int data_parallel_rank = -1;        // >= 0: external load balancing, this instance is that DP rank
    std::string data_parallel_address;  // the head's address; default 127.0.0.1
    int data_parallel_rpc_port = 0;     // 0: any free port (only when every rank is local)
    bool enable_expert_parallel = false;
    bool headless = false;
    int distributed_timeout_ms = 30000;
    bool disable_collective_guard = false;
    int max_rank_restarts = 3;
};

// The validated deployment of this node.
struct Deployment {
    parallel::ParallelSizes sizes;
    int start = 0, local = 1;  // DP ranks [start, start + local) run here
    bool all_local = true;     // every DP rank on this node: ipc:// sockets and loopback Gloo
    // --data-parallel-rank (vLLM's external load balancing): this instance is one DP rank with its
    // own API server, which reaches only that rank's engine (ipc://); the instances' ranks still
    // form one Gloo world through DP rank 0's rendezvous store.
    bool external_lb = false;
    bool local_sockets() const { return all_local || external_lb; }
    std::string address;        // the head: rendezvous store and (not all_local) ZeroMQ over tcp
    int rpc_port = 0;           // rendezvous store port (0 = ephemeral, all_local only)
    std::string gloo_iface;     // env GLOO_SOCKET_IFNAME
    std::string gloo_hostname;  // the address ranks bind when no interface is named
    int timeout_ms = 30000;
    // The desync guard on every collective group (parallel/guarded_comm.h); in the fingerprint,
    // since guarded and unguarded ranks cannot share a group.
    bool collective_guard = true;
    int heartbeat_timeout_ms = 30000;  // --heartbeat-timeout-ms: the engine sockets' liveness bound
    // --max-rank-restarts: how often in a row a dead rank is started again (self-healing) before
    // its group is given up; 0 = never (a dead rank stops its group for good).
    int max_rank_restarts = 3;
    // Whether a dead rank is restarted (by the API server, or by the --headless process of its
    // node) and its group re-formed: every DP group in lock-step over EP, else the dead rank's DP
    // group alone (the others serve on). With external load balancing each instance restarts its
    // own ranks. In the fingerprint: every node must agree.
    bool self_healing() const;
    // --api-server-count: API server processes, each with its own engine sockets (local_sockets()
    // only); every engine connects to all of them.
    int api_servers = 1;

    int world() const { return sizes.world(); }
    // API server `server`'s PULL socket and its PUSH socket of engine i as the ranks are told:
    // under ipc_dir when local_sockets(), else kAddressFromStore (the head binds bind_address()
    // and publishes what it got under the store keys below; one API server only).
    std::string output_address(const std::string& ipc_dir, int server = 0) const;
    std::string input_address(const std::string& ipc_dir, int engine, int server = 0) const;
    std::string bind_address() const;  // tcp://address:* (a port the kernel picks)
};

inline constexpr const char* kAddressFromStore = "from-rendezvous-store";
std::string store_key_output_address();
std::string store_key_input_address(int engine);

// Checks the flags against each other and the model's config (heads divisible by tp, or KV heads
// replicated, ep | dp*tp, start + local <= dp, ports); raises Error kInvalidArgument with a
// sentence naming the flags. gloo_iface: the environment's GLOO_SOCKET_IFNAME (may be empty).
Deployment make_deployment(const ParallelFlags& flags, const nlohmann::json& config, const std::string& gloo_iface);

// What every rank must agree on: the model config digest, the sizes, the guard, self-healing and the
// engine flags the table marks (engine_flags_fingerprint).
std::string deployment_fingerprint(const EngineOptions& engine, const Deployment& d, const std::string& config_text);

// argv of `moeserve rank` for global rank `rank` (store_port: the bound rendezvous port).
std::vector<std::string> rank_argv(const EngineOptions& engine, const Deployment& d, int rank, int store_port,
                                   const std::string& ipc_dir, int threads);

// Registers the hidden `rank` subcommand (the rank process serve starts).
void add_rank_command(CLI::App& app, std::function<int()>* action);

// Shared helpers.
std::string read_text_file(const std::string& path);
// config[field] as an int32, fallback when absent; Error naming dir/config.json and the field
// when it is not a non-negative integer.
int32_t config_int(const nlohmann::json& config, const char* field, int32_t fallback, const std::string& dir);
int32_t resolve_max_model_len(const EngineOptions& o, const nlohmann::json& config);

}  // namespace moeserve::cli
