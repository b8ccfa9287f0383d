// Options that shape how a model is built from its checkpoint (not from config.json).
#pragma once

#include <cstdint>

#include <string>

#include "moeserve/core/dtype.h"
#include "moeserve/core/log.h"
#include "moeserve/model/eplb/eplb_config.h"
#include "moeserve/model/parallel_config.h"
#include "moeserve/model/quantization.h"

namespace moeserve::model {

struct LoadOptions {
    int64_t max_model_len = 0;  // longest sequence served (RoPE tables); 0 = max_position_embeddings
    ParallelConfig parallel{};  // this rank's TP/EP shard; default: the whole model on one rank
    // --dtype (vLLM's): "auto" / "bfloat16" keep the checkpoint's bf16 weights; "float32" (also
    // "float", "fp32") widens them to f32 at load (resolved into quant.f32_weights).
    std::string dtype = "auto";
    std::string quantization{};  // --quantization: "" (as the checkpoint) or a value cli/engine_flags.cpp lists
    Quantization quant{};        // resolved by load_model() from config.json and `quantization`
    // --kv-cache-dtype: "auto" (config.json's torch_dtype: bf16 for these checkpoints), "bf16",
    // "fp32". The library default stays fp32 (the reference tests' exact cache); the CLI's is auto.
    std::string kv_cache_dtype = "fp32";
    DType kv_dtype = DType::kF32;  // resolved by load_model() from kv_cache_dtype
    EplbConfig eplb{};             // --enable-eplb / --eplb-config (needs expert parallelism)
    // --speculative-config deepseek_mtp: load the checkpoint's MTP layer (model.layers.{N}, N =
    // num_hidden_layers) as the draft head, with a KV layer of its own (Model::forward_draft).
    bool draft_head = false;
    // A test hook (env MOESERVE_DEBUG_ROUTER_SKEW in `rank`/`generate`): "<experts>:<bias>", experts
    // a list of ids and ranges ("0,5-7"); bias is added to their router logits in every MoE layer.
    std::string debug_router_skew{};
    Logger* logger = nullptr;  // where the model logs while it serves (EPLB's decisions); null: silent
};

}  // namespace moeserve::model
