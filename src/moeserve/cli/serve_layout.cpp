// Deployment validation, socket addresses, fingerprint and rank argv for serve / rank.
#include "moeserve/cli/serve_layout.h"

#include <fmt/format.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "moeserve/core/error.h"
#include "moeserve/io/gguf_file.h"
#include "moeserve/io/hf_config.h"
#include "moeserve/model/formats/gguf.h"

namespace moeserve::cli {

std::string read_text_file(const std::string& path) {
    std::ifstream in(path);
    if (!in) raise(ErrorCode::kNotFound, "cannot open {}", path);
    std::ostringstream s;
    s << in.rdbuf();
    return s.str();
}

nlohmann::json read_model_config(const std::string& dir) {
    if (model::is_gguf_path(dir)) return model::gguf_config_json(io::GgufCheckpoint(dir));
    return io::HfConfig::from_model_dir(dir).json();  // the loader's reader: the same words for the same fault
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

void add_engine_options(CLI::App* sub, EngineOptions& o, bool positional_model) {
    if (positional_model) {  // `serve MODEL` as `vllm serve MODEL`; --model stays (the caller checks one is given)
        sub->add_option("model_tag", o.model, "Hugging Face model directory");
        sub->add_option("--model", o.model, "Hugging Face model directory (or give it first, as `serve DIR`)");
    } else {
        sub->add_option("--model", o.model, "Hugging Face model directory")->required();
    }
    sub->add_option("--tokenizer", o.tokenizer,
                    "folder with tokenizer.json and tokenizer_config.json (default: the model's)");
    sub->add_option("--max-num-seqs", o.max_num_seqs, "most sequences in one batch")->capture_default_str();
    sub->add_option("--max-model-len", o.max_model_len,
                    "longest sequence, prompt + output (default: min(max_position_embeddings, 4096))");
    sub->add_option("--max-num-batched-tokens", o.max_num_batched_tokens, "most tokens in one step")
        ->capture_default_str();
    sub->add_option("--block-size", o.block_size, "KV cache block size in tokens")->capture_default_str();
    sub->add_option("--gpu-memory-utilization", o.gpu_memory_utilization, "on CPU: share of RAM for weights + KV cache")
        ->capture_default_str();
    sub->add_option("--kv-cache-memory,--kv-cache-memory-bytes", o.kv_cache_memory,
                    "KV cache size per rank, e.g. 2G (overrides --gpu-memory-utilization)");
    sub->add_flag("--enable-prefix-caching,!--no-enable-prefix-caching", o.enable_prefix_caching,
                  "reuse KV blocks of shared prompt prefixes (default on)");
    sub->add_option("--seed", o.seed, "seed of requests without their own")->capture_default_str();
    sub->add_option("--threads", o.threads,
                    "compute threads per rank (default: the host's cores divided between its ranks)");
    sub->add_option("--log-level", o.log_level, "debug | info | warning | error")->capture_default_str();
    sub->add_option("--quantization,-q", o.quantization,
                    "w8a8 | w8a8-all (lm_head too) | fp8 (FP8 as stored) | none (bf16); default: the checkpoint's "
                    "quantization_config");
    sub->add_option("--scheduling-policy", o.scheduling_policy,
                    "fcfs: arrival order | priority: the requests' `priority` field, lower first (ties by arrival); "
                    "the lowest priority is preempted first")
        ->check(CLI::IsMember({"fcfs", "priority"}))
        ->capture_default_str();
    sub->add_option("--kv-cache-dtype", o.kv_cache_dtype,
                    "auto (the checkpoint's dtype: bf16) | bf16 | fp32 | fp8 (fp8_e4m3; experimental: e4m3 with a "
                    "scale per row): element type of the KV / MLA latent cache")
        ->capture_default_str();
    sub->add_option("--dtype", o.dtype,
                    "auto | bfloat16 (bf16): the checkpoint's bf16 weights; float32 (float, fp32): widened to f32 at "
                    "load, twice the memory (half/float16 are refused)")
        ->capture_default_str();
    sub->add_option("--kv-transfer-config", o.kv_transfer_config,
                    "PD disaggregation: {\"kv_connector\": \"MoeserveConnector\", \"kv_role\": \"kv_producer\" | "
                    "\"kv_consumer\" | \"kv_both\", \"kv_ip\", \"kv_port\", \"kv_connector_extra_config\"} "
                    "(docs/parallelism.md)");
    sub->add_option("--speculative-config", o.speculative_config,
                    "speculative decoding: {\"method\": \"ngram\", \"num_speculative_tokens\": K, "
                    "\"prompt_lookup_max\": N, \"prompt_lookup_min\": M} (docs/serving.md)");
    sub->add_flag("--enable-eplb", o.enable_eplb,
                  "expert-parallel load balancing: count the tokens routed to each expert and move experts between "
                  "EP ranks (copies of hot ones with num_redundant_experts) in the background (docs/parallelism.md)");
    sub->add_option("--eplb-config", o.eplb_config,
                    "EPLB: {\"window_size\": forwards counted (1000), \"step_interval\": forwards between "
                    "decisions (3000), \"num_redundant_experts\": extra slots (0), \"log_balancedness\": false}");
    sub->add_flag("--pd-hybrid", o.pd_hybrid,
                  "PD hybrid scheduling: all DP ranks agree each step on prefill or decode (env: OMNI_PD_HYBRID=1)");
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
    if (f.data_parallel_rank >= 0) {
        const int r = f.data_parallel_rank;
        if (f.headless) {
            raise(ErrorCode::kInvalidArgument,
                  "--data-parallel-rank {} runs that DP rank with its own API server; it does not go with --headless",
                  r);
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
    return fmt::format(
        "config.json fnv1a {:016x}, dp {} tp {} ep {}, max_model_len {}, block_size {}, max_num_seqs {}, pd_hybrid {}, "
        "quantization '{}', kv_cache_dtype {}, dtype {}, collective guard {}, self-healing {}, eplb {} '{}'",
        h, d.sizes.dp, d.sizes.tp, d.sizes.ep, e.max_model_len, e.block_size, e.max_num_seqs, e.pd_hybrid ? 1 : 0,
        e.quantization, e.kv_cache_dtype, e.dtype, d.collective_guard ? "on" : "off", d.self_healing() ? "on" : "off",
        e.enable_eplb ? "on" : "off", e.eplb_config);
}

std::vector<std::string> rank_argv(const EngineOptions& e, const Deployment& d, int rank, int store_port,
                                   const std::string& ipc_dir, int threads) {
    const int dp_rank = rank / d.sizes.tp;
    std::vector<std::string> a = {"moeserve",
                                  "rank",
                                  "--model",
                                  e.model,
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
                                  std::to_string(d.heartbeat_timeout_ms),
                                  "--max-num-seqs",
                                  std::to_string(e.max_num_seqs),
                                  "--max-model-len",
                                  std::to_string(e.max_model_len),
                                  "--max-num-batched-tokens",
                                  std::to_string(e.max_num_batched_tokens),
                                  "--block-size",
                                  std::to_string(e.block_size),
                                  "--gpu-memory-utilization",
                                  fmt::format("{}", e.gpu_memory_utilization),
                                  "--seed",
                                  std::to_string(e.seed),
                                  "--threads",
                                  std::to_string(threads),
                                  "--log-level",
                                  e.log_level};
    for (int s = 0; s < d.api_servers; ++s) {  // the engine connects to every API server
        a.insert(a.end(), {"--input-address", d.input_address(ipc_dir, dp_rank, s), "--output-address",
                           d.output_address(ipc_dir, s)});
    }
    if (!d.collective_guard) a.emplace_back("--no-collective-guard");
    if (d.self_healing()) a.emplace_back("--self-heal");
    if (!d.gloo_iface.empty()) a.insert(a.end(), {"--gloo-iface", d.gloo_iface});
    if (!d.gloo_hostname.empty()) a.insert(a.end(), {"--gloo-hostname", d.gloo_hostname});
    if (!e.kv_cache_memory.empty()) a.insert(a.end(), {"--kv-cache-memory", e.kv_cache_memory});
    if (!e.enable_prefix_caching) a.push_back("--no-enable-prefix-caching");
    if (e.pd_hybrid) a.push_back("--pd-hybrid");
    if (!e.quantization.empty()) a.insert(a.end(), {"--quantization", e.quantization});
    a.insert(a.end(), {"--scheduling-policy", e.scheduling_policy});
    if (!e.tokenizer.empty()) a.insert(a.end(), {"--tokenizer", e.tokenizer});
    if (!e.kv_transfer_config.empty()) a.insert(a.end(), {"--kv-transfer-config", e.kv_transfer_config});
    if (!e.speculative_config.empty()) a.insert(a.end(), {"--speculative-config", e.speculative_config});
    if (e.enable_eplb) a.emplace_back("--enable-eplb");
    if (!e.eplb_config.empty()) a.insert(a.end(), {"--eplb-config", e.eplb_config});
    a.insert(a.end(), {"--kv-cache-dtype", e.kv_cache_dtype});
    a.insert(a.end(), {"--dtype", e.dtype});
    return a;
}

}  // namespace moeserve::cli
