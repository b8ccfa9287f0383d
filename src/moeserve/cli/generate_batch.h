// `moeserve generate`'s engine: the model and EngineCore of an offline run, configured as serve's
// ranks configure theirs (engine_options.h), and the batch mode `--input prompts.jsonl --output
// out.jsonl` through it (continuous batching), vLLM's LLM.generate from a file. The
// single-prompt mode (generate_command.cpp) runs its one request through the same engine.
#pragma once

#include <memory>
#include <string>

#include "moeserve/cli/engine_options.h"
#include "moeserve/core/thread_pool.h"
#include "moeserve/engine/engine_core.h"
#include "moeserve/model/model.h"

namespace moeserve::cli {

// --threads, else every core.
int offline_threads(const EngineOptions& o);

struct OfflineEngine {
    std::unique_ptr<model::Model> model;
    engine::EngineConfig config;
    std::unique_ptr<engine::EngineCore> core;
};

// Loads checked.source (o.model, opened and checked; o.max_model_len resolved) on pool, which must outlive the engine,
// and builds its EngineCore with make_engine_config. Raises Error as load_model, make_engine_config
// and EngineCore do (e.g. a KV cache too small for one max_model_len sequence).
OfflineEngine load_offline_engine(const EngineOptions& o, const CheckedEngineOptions& checked, ThreadPool& pool);

struct GenerateBatchOptions {
    std::string input;   // JSON lines: {"prompt" | "prompt_token_ids" | "messages", sampling fields...}
    std::string output;  // JSON lines, in input order
    EngineOptions engine;
    bool progress = true;
};

// Runs every line of the input through one engine and writes the results. Errors in the input
// (bad JSON, unknown or mistyped fields, a line the request rules refuse: prompt + max_tokens
// over --max-model-len, out-of-range values) raise Error kInvalidArgument naming the line before
// any request runs; an error of the engine during the run goes into that line's "error".
// checked: options.engine, checked (check_engine_options).
int run_generate_batch(const GenerateBatchOptions& options, const CheckedEngineOptions& checked);

// " | drafts: A of D accepted (R%), S steps" for the summary lines of a run with speculative
// decoding (stats of its engine), "" without drafts.
std::string speculation_summary(const ipc::Stats& stats);
// " | routed experts read X MB per <per>": `bytes` of Model::routed_expert_bytes over `tokens`,
// or "" when either is 0.
std::string expert_bytes_summary(int64_t bytes, int64_t tokens, const char* per);
// " | a decoded token reads W MB of weights + K kB of KV per context token": the decode roofline's
// bytes (ModelInfo), "" where the model does not count them.
std::string decode_bytes_summary(const model::ModelInfo& info);

}  // namespace moeserve::cli
