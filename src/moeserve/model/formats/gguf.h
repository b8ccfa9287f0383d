// GGUF checkpoints (llama.cpp's files): which GGUF architectures load as which model_type, their
// hyperparameters as the config.json the architecture already parses, and their tensor names
// mapped onto the checkpoint names the layers read (io::WeightSource::from_gguf). Stacked expert
// tensors [n_expert, ...] are read as per-expert slices, never copied. The same tensor table
// drives the writer (make-model --format gguf). Adding a GGUF architecture is one file
// (gguf_qwen3moe.cpp, gguf_deepseek2.cpp: see gguf_arch.h) and one row in gguf_architectures()
// (gguf.cpp).
#pragma once

#include <nlohmann/json.hpp>

#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "moeserve/io/gguf_file.h"
#include "moeserve/io/gguf_writer.h"
#include "moeserve/io/hf_config.h"
#include "moeserve/io/weight_source.h"
#include "moeserve/model/formats/gguf_kv_b.h"

namespace moeserve::model {

// True when `path` names a file ending in .gguf (a model directory never does).
bool is_gguf_path(const std::filesystem::path& path);

// One GGUF tensor and the checkpoint name(s) it holds: one name, or one per expert for a stacked
// tensor (slice e is names[e]), or one half of a checkpoint tensor stored split (kv_b: DeepSeek's
// kv_b_proj as attn_k_b / attn_v_b of `heads` heads with qk_nope key rows, gguf_kv_b.h).
struct GgufTensorEntry {
    std::string gguf;
    std::vector<std::string> names;
    bool stacked = false;
    bool required = true;
    std::optional<KvbPart> kv_b{};
    int64_t heads = 0, qk_nope = 0;  // kv_b only
    // Writer only: the tensor made from the checkpoint's in another layout (gpt-oss's interleaved,
    // input-major experts); null: the names' tensors as stored (stacked when `stacked`).
    std::function<Tensor(const io::WeightSource& weights)> convert{};
};

struct GgufModel {
    std::shared_ptr<const io::GgufCheckpoint> file;
    io::HfConfig config;  // the config.json equivalent of the metadata (label: the file)
    std::shared_ptr<const io::WeightSource> weights;
    std::string description;  // "GGUF qwen3moe, 3 files: Q4_K x 74, F32 x 25" (the log line)
};

// The config.json equivalent of a GGUF file's metadata (model_type included). Throws
// kUnsupported naming the file and general.architecture when it is not one moeserve maps, and
// kInvalidModel naming the file and key for a missing or malformed hyperparameter.
nlohmann::json gguf_config_json(const io::GgufCheckpoint& file);

// Opens a GGUF file (or split set): its config and its tensors under checkpoint names (a split
// tensor joined in memory, the rest zero-copy). A required tensor that is missing or a stacked
// one whose shape is not [expert_count, ...] throws kInvalidModel naming the file and the tensor.
GgufModel open_gguf_model(const std::filesystem::path& path);
// The same for a file already open, with the config gguf_config_json made of it.
GgufModel map_gguf_model(std::shared_ptr<const io::GgufCheckpoint> file, const io::HfConfig& config);

// The GGUF architecture name of a model_type ("qwen3_moe" -> "qwen3moe"), or "" when none.
std::string gguf_architecture_of(const std::string& model_type);

// The tensor table of a config.json (as gguf_config_json makes it, or a generated model's).
std::vector<GgufTensorEntry> gguf_tensor_table(const io::HfConfig& config);

// The metadata keys of a config.json (architecture, hyperparameters) set on a writer; the
// inverse of gguf_config_json. Throws kUnsupported when the model_type has no GGUF architecture.
void set_gguf_model_metadata(const io::HfConfig& config, io::GgufWriter& writer);

}  // namespace moeserve::model
