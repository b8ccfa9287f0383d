// The GGUF architectures moeserve maps (formats/gguf.cpp keeps their table), one file each:
// general.architecture -> model_type, the metadata -> config.json fields, config.json -> metadata
// (the writer), and the tensor table in both directions. Internal to model/formats.
#pragma once

#include <nlohmann/json.hpp>

#include <string>
#include <vector>

#include "moeserve/io/gguf_file.h"
#include "moeserve/io/gguf_writer.h"
#include "moeserve/io/hf_config.h"
#include "moeserve/model/formats/gguf.h"

namespace moeserve::model {

struct GgufArchitecture {
    std::string gguf;
    std::string model_type;
    nlohmann::json (*config)(const io::GgufCheckpoint& file, const std::string& arch) = nullptr;
    void (*metadata)(const io::HfConfig& config, const std::string& arch, io::GgufWriter& writer) = nullptr;
    std::vector<GgufTensorEntry> (*tensors)(const io::HfConfig& config) = nullptr;
    // Other model_types the writer files under this architecture, as llama.cpp's converter does
    // (Kimi-K2 is a deepseek2 file); the reader gives `model_type`.
    std::vector<std::string> also_written_from = {};
};

const GgufArchitecture& gguf_qwen3moe();   // gguf_qwen3moe.cpp
const GgufArchitecture& gguf_deepseek2();  // gguf_deepseek2.cpp
const GgufArchitecture& gguf_gpt_oss();    // gguf_gpt_oss.cpp
const GgufArchitecture& gguf_qwen2moe();   // gguf_qwen2moe.cpp
const GgufArchitecture& gguf_llama();      // gguf_llama.cpp (Mixtral)
const GgufArchitecture& gguf_glm4moe();    // gguf_glm4moe.cpp

// Shared by the architectures (gguf.cpp).
// An integer key that may also be a per-layer array with one value (head_count_kv); kUnsupported
// when the layers differ.
int64_t gguf_int_or_uniform_array(const io::GgufHeader& h, const std::string& key);
// The key's integer / float value, or `fallback` when the file does not have it.
int64_t gguf_int_or(const io::GgufHeader& h, const std::string& key, int64_t fallback);
double gguf_float_or(const io::GgufHeader& h, const std::string& key, double fallback);
// The vocabulary size: the rows of token_embd.weight (kInvalidModel when it is missing).
int64_t gguf_vocab_size(const io::GgufCheckpoint& file);
// ARCH.rope.scaling.* as config.json's rope_scaling (none, linear, yarn); nullopt for none.
// yarn_log_multiplier is read as DeepSeek's mscale_all_dim (llama.cpp's converter writes
// 0.1 * mscale_all_dim) when `deepseek_mscale`.
std::optional<nlohmann::json> gguf_rope_scaling(const io::GgufHeader& h, const std::string& arch, bool deepseek_mscale);
// config.json's bos / eos from tokenizer.ggml.{bos,eos}_token_id, where the file has them.
void gguf_special_token_ids(const io::GgufHeader& h, nlohmann::json& config);
// Tensor-table rows every architecture shares.
GgufTensorEntry gguf_stacked_experts(const std::string& gguf, const std::string& layer_prefix,
                                     const std::string& hf_proj, int64_t experts);

// The GQA architectures' common parts (qwen3moe, qwen2moe, llama, glm4moe, gpt-oss).
// Reader: config.json's common fields from `a`.* (a: the GGUF architecture; vocabulary, sizes, heads, head size from
// attention.key_length, context, epsilon, rope_theta with `default_theta`, rope_scaling, tied
// embeddings, BOS / EOS), with model_type and architectures set; the caller adds its own.
nlohmann::json gguf_gqa_config(const io::GgufCheckpoint& file, const std::string& a, const std::string& model_type,
                               const std::string& hf_class, double default_theta);
// Writer: the same keys from config.json (head_dim, else hidden_size / heads; feed_forward_length
// from intermediate_size).
void gguf_set_gqa_metadata(const io::HfConfig& c, const std::string& a, double default_theta, io::GgufWriter& w);
// Into table t: b's (blk.N.) attn_q / attn_k / attn_v / attn_output .weight, their .bias where
// the model has them, under layer prefix p (model.layers.N.).
void gguf_attention_entries(std::vector<GgufTensorEntry>& t, const std::string& b, const std::string& p, bool qkv_bias,
                            bool o_bias);
// The table's ends: token_embd first, output_norm and output (absent when tied) last.
void gguf_embedding_entry(std::vector<GgufTensorEntry>& t);
void gguf_output_entries(std::vector<GgufTensorEntry>& t, const io::HfConfig& config);

}  // namespace moeserve::model
