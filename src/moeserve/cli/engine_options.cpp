#include "moeserve/cli/engine_options.h"

#include <unistd.h>

#include <algorithm>
#include <limits>

#include "moeserve/cli/eplb_flags.h"
#include "moeserve/cli/speculative_config.h"
#include "moeserve/core/error.h"
#include "moeserve/engine/kv_cache/kv_cache_manager.h"
#include "moeserve/model/registry.h"

namespace moeserve::cli {

int64_t parse_bytes(const std::string& text) {
    size_t used = 0;
    double value = 0;
    try {
        value = std::stod(text, &used);
    } catch (const std::exception&) {
        raise(ErrorCode::kInvalidArgument, "--kv-cache-memory '{}' is not a size like 4G or 512M", text);
    }
    const std::string suffix = text.substr(used);
    double scale = 1;
    if (suffix == "K" || suffix == "KiB" || suffix == "k")
        scale = 1024.0;
    else if (suffix == "M" || suffix == "MiB")
        scale = 1024.0 * 1024;
    else if (suffix == "G" || suffix == "GiB")
        scale = 1024.0 * 1024 * 1024;
    else if (!suffix.empty())
        raise(ErrorCode::kInvalidArgument, "--kv-cache-memory '{}': unknown unit '{}' (K, M or G)", text, suffix);
    if (value <= 0) raise(ErrorCode::kInvalidArgument, "--kv-cache-memory must be > 0; got '{}'", text);
    return static_cast<int64_t>(value * scale);
}

CheckedEngineOptions check_engine_options(const EngineOptions& o) {
    const auto at_least_one = [](const char* flag, int64_t value) {
        if (value < 1) raise(ErrorCode::kInvalidArgument, "{} must be >= 1; got {}", flag, value);
    };
    at_least_one("--max-num-seqs", o.max_num_seqs);
    at_least_one("--max-num-batched-tokens", o.max_num_batched_tokens);
    at_least_one("--block-size", o.block_size);
    if (o.threads != kThreadsUnset) {
        if (o.threads < 1)
            raise(ErrorCode::kInvalidArgument, "--threads must be >= 1; got {} (leave it out for all cores)",
                  o.threads);
    }
    // vLLM's range: a share of the memory, more than nothing and at most all of it.
    if (!(o.gpu_memory_utilization > 0 && o.gpu_memory_utilization <= 1)) {
        raise(ErrorCode::kInvalidArgument, "--gpu-memory-utilization must be in (0, 1]; got {}",
              o.gpu_memory_utilization);
    }
    if (!o.kv_cache_memory.empty()) parse_bytes(o.kv_cache_memory);
    model::ModelSource source = model::open_model_source(o.model);
    engine::SpeculativeConfig speculative = parse_speculative_config(o.speculative_config, source);
    parse_eplb_flags(o.enable_eplb, o.eplb_config);
    model::LoadOptions load;
    load.dtype = o.dtype;
    load.quantization = o.quantization;
    load.kv_cache_dtype = o.kv_cache_dtype;
    model::check_model(source, load);
    return {std::move(source), speculative};
}

int64_t total_ram_bytes() {
    const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGE_SIZE);
    return pages > 0 && page > 0 ? static_cast<int64_t>(pages) * page : int64_t{8} << 30;
}

int32_t kv_cache_num_blocks(const EngineOptions& o, int64_t kv_bytes_per_token, int64_t weight_bytes,
                            int64_t total_ram) {
    MOESERVE_CHECK(o.max_model_len > 0, "max_model_len {} not resolved", o.max_model_len);
    if (o.block_size < 1) raise(ErrorCode::kInvalidArgument, "--block-size must be >= 1; got {}", o.block_size);
    if (o.max_num_seqs < 1) raise(ErrorCode::kInvalidArgument, "--max-num-seqs must be >= 1; got {}", o.max_num_seqs);
    const int64_t budget =
        !o.kv_cache_memory.empty()
            ? parse_bytes(o.kv_cache_memory)
            : static_cast<int64_t>(o.gpu_memory_utilization * static_cast<double>(total_ram)) - weight_bytes;
    const int64_t per_seq = (int64_t{o.max_model_len} + o.block_size - 1) / o.block_size;
    int64_t blocks = engine::num_blocks_for_bytes(budget, kv_bytes_per_token, o.block_size);
    // NOTE(#5): more blocks than max_num_seqs full-length sequences only serve the prefix cache;
    // cap there so the default 0.9 of RAM is not committed for a small model.
    blocks = std::min(blocks, per_seq * o.max_num_seqs + 1);
    if (blocks < per_seq + 1) {
        raise(ErrorCode::kInvalidArgument,
              "the KV cache has room for {} blocks of {} tokens, less than one {}-token sequence needs; "
              "raise --kv-cache-memory / --gpu-memory-utilization or lower --max-model-len",
              blocks, o.block_size, o.max_model_len);
    }
    return static_cast<int32_t>(std::min<int64_t>(blocks, std::numeric_limits<int32_t>::max()));
}

engine::EngineConfig make_engine_config(const EngineOptions& o, const engine::SpeculativeConfig& speculative,
                                        const model::ModelInfo& info, int64_t total_ram) {
    engine::EngineConfig c;
    c.max_num_seqs = o.max_num_seqs;
    c.max_num_batched_tokens = o.max_num_batched_tokens;
    c.max_model_len = o.max_model_len;
    c.block_size = o.block_size;
    c.num_blocks = kv_cache_num_blocks(o, info.kv_bytes_per_token, info.weight_bytes, total_ram);
    c.enable_prefix_caching = o.enable_prefix_caching;
    c.seed = o.seed;
    c.scheduling_order =
        o.scheduling_policy == "priority" ? engine::SchedulingOrder::kPriority : engine::SchedulingOrder::kFcfs;
    c.speculative = speculative;
    return c;
}

}  // namespace moeserve::cli
