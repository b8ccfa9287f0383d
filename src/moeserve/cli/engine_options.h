// The engine's options, one struct for every command that runs an EngineCore (`serve` forwards
// them to its `rank` processes; `generate` runs the engine in-process), and the one function
// that turns them into the EngineCore's config, KV cache sizing included.
#pragma once

#include <cstdint>
#include <string>

#include "moeserve/engine/engine_core.h"
#include "moeserve/model/model.h"
#include "moeserve/model/registry.h"

namespace moeserve::cli {

// --threads when not given: the command picks (all cores, or the cores split between ranks).
inline constexpr int kThreadsUnset = -1;

struct EngineOptions {
    std::string model;
    std::string tokenizer;  // folder with tokenizer.json (+ tokenizer_config.json); empty = model
    const std::string& tokenizer_dir() const { return tokenizer.empty() ? model : tokenizer; }
    int32_t max_num_seqs = 256;
    int32_t max_model_len = 0;  // 0 = min(max_position_embeddings, 4096) (serve); generate: 4096
    int32_t max_num_batched_tokens = 2048;
    int32_t block_size = 16;
    double gpu_memory_utilization = 0.9;
    std::string kv_cache_memory;  // bytes, with an optional K/M/G suffix; empty = from utilization
    bool enable_prefix_caching = true;
    uint64_t seed = 0;
    int threads = kThreadsUnset;
    std::string log_level = "info";
    bool pd_hybrid = false;    // --pd-hybrid or env OMNI_PD_HYBRID=1 (read by serve)
    std::string quantization;  // --quantization: "" (as the checkpoint says) or a value engine_flags.cpp lists
    std::string scheduling_policy = "fcfs";  // fcfs | priority (the request's `priority` field)
    std::string kv_cache_dtype =
        "auto";                      // --kv-cache-dtype: auto (--dtype's, else the checkpoint's) | bf16 | fp32 | fp8
    std::string dtype = "auto";      // --dtype: auto | bfloat16 (the checkpoint's bf16) | float32 (widened)
    std::string kv_transfer_config;  // --kv-transfer-config: vLLM's JSON (kv_transfer_config.h); "" = none
    std::string speculative_config;  // --speculative-config: vLLM's JSON (speculative_config.h); "" = none
    bool enable_eplb = false;        // --enable-eplb: expert-parallel load balancing (eplb_flags.h)
    std::string eplb_config;         // --eplb-config: vLLM's JSON; "" = defaults
};

// Everything wrong with these options that can be found without loading weights, raised as
// Error kInvalidArgument / kInvalidModel / kUnsupported with one sentence naming the flag, file or
// field: the flag ranges (--max-num-seqs, --max-num-batched-tokens, --block-size >= 1,
// --gpu-memory-utilization in (0, 1], --threads >= 1, --kv-cache-memory, --speculative-config, --eplb-config), then
// model::check_model (config.json, --quantization, --dtype, --kv-cache-dtype, the checkpoint's headers and tensor
// index). Every command that runs an engine calls it first (serve before it binds its port), so
// one fault reads the same in serve and generate. Returns the model it opened and the parsed
// --speculative-config, so the caller reads neither a second time.
struct CheckedEngineOptions {
    model::ModelSource source;
    engine::SpeculativeConfig speculative;
};
CheckedEngineOptions check_engine_options(const EngineOptions& o);

// --kv-cache-memory: bytes with an optional K, M or G suffix (KiB, MiB, GiB; binary units),
// e.g. 4G. Raises kInvalidArgument naming the flag unless it is a size > 0.
int64_t parse_bytes(const std::string& text);

// This host's RAM in bytes (8 GiB when the system does not say).
int64_t total_ram_bytes();

// EngineConfig::num_blocks (the null block 0 included) for these options: the KV budget is
// --kv-cache-memory, else gpu_memory_utilization x total_ram less weight_bytes; it holds
// budget / (kv_bytes_per_token x block_size) blocks, the null block among them (it takes a real
// block of the cache, as vLLM's null block comes out of its pool), capped at what max_num_seqs
// sequences of max_model_len tokens can use, plus the null block. Raises kInvalidArgument, naming
// the flags, when the blocks besides the null block hold less than one max_model_len sequence.
// o.max_model_len must be resolved (> 0).
int32_t kv_cache_num_blocks(const EngineOptions& o, int64_t kv_bytes_per_token, int64_t weight_bytes,
                            int64_t total_ram);

// The EngineCore config of these options for `model` (limits, KV blocks from
// kv_cache_num_blocks, prefix caching, seed, scheduling order, the parsed --speculative-config).
// What depends on the deployment (engine_index, vocabulary, kv_transfer, logger) stays the caller's.
engine::EngineConfig make_engine_config(const EngineOptions& o, const engine::SpeculativeConfig& speculative,
                                        const model::ModelInfo& info, int64_t total_ram);

}  // namespace moeserve::cli
