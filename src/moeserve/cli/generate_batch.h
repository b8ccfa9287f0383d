// `moeserve generate --input prompts.jsonl --output out.jsonl`: offline batch generation through
// the engine (continuous batching), vLLM's LLM.generate from a file.
#pragma once

#include <cstdint>
#include <string>

namespace moeserve::cli {

// Engine flags, named as vLLM's.
struct EngineFlags {
    int32_t max_num_seqs = 256;
    int32_t max_num_batched_tokens = 2048;
    int32_t block_size = 16;
    double gpu_memory_utilization = 0.9;  // share of total RAM for weights + KV cache
    int64_t kv_cache_memory = 0;          // bytes of KV cache; overrides the utilization when > 0
    bool enable_prefix_caching = true;
    int64_t max_model_len = 4096;
    uint64_t seed = 0;
    int threads = 0;                      // 0 = all cores
    std::string quantization;             // "" (as the checkpoint says), w8a8, w8a8-all, fp8, none
    std::string kv_cache_dtype = "auto";  // auto (the checkpoint's: bf16) | bf16 | fp32
};

struct GenerateBatchOptions {
    std::string model;
    std::string input;   // JSON lines: {"prompt" | "prompt_token_ids" | "messages", sampling fields...}
    std::string output;  // JSON lines, in input order
    EngineFlags engine;
    bool progress = true;
};

// Runs every line of the input through one engine and writes the results. Errors in the input
// (bad JSON, unknown or mistyped fields) raise Error kInvalidArgument naming the line; a request
// the engine rejects (too long) gets an "error" in its output line instead.
int run_generate_batch(const GenerateBatchOptions& options);

}  // namespace moeserve::cli
