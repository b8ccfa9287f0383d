// Ascend ModelSlim checkpoints: quant_model_description.json (or one
// quant_model_description_*.json) names each tensor's type (FLOAT, W8A8 static, W8A8_DYNAMIC);
// its presence marks the checkpoint whatever config.json says (the MindIE saver writes one
// without quant_method). They run as stored (docs/quantization.md).
#pragma once

#include <nlohmann/json.hpp>

#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "moeserve/model/quantization.h"

namespace moeserve::model {

// The ModelSlim checkpoint in model_dir, or nullopt when it has no description. requested must
// be "", "auto" or "ascend" (vllm-ascend's old flag) for one; "ascend" is refused for a directory
// without. Errors kInvalidArgument name the flag, kInvalidModel the description file.
std::optional<Quantization> read_modelslim(const std::filesystem::path& model_dir, const std::string& requested);

// ModelSlim description parsing (exposed for tests): a flat JSON object of tensor name -> type;
// the meta keys and every non-string value are skipped. Error kInvalidModel naming `label`.
std::map<std::string, std::string> parse_modelslim_description(const nlohmann::json& j, const std::string& label);

// The linears that share one input and that engines fuse into one matmul (q/k/v_proj;
// q_a_proj + kv_a_proj_with_mqa; gate/up_proj): in a ModelSlim checkpoint they must have the same
// type and, for W8A8, the same input_scale and input_offset (vllm-ascend keeps one per fused
// module). Error kInvalidModel naming the two tensors otherwise. No-op for other checkpoints.
void check_fused_shards(const io::WeightSource& weights, const Quantization& quant,
                        const std::vector<std::string>& modules);

}  // namespace moeserve::model
