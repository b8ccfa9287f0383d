// The generator's MindSpore golden-stick A8W8 writer (make-model --quantization mindspore-a8w8):
// the DeepSeek-V3 random model in MindFormers names and layouts, written independently of the
// loader's converter (model/formats/mindformers_checkpoint.h). Internal to the generator.
#pragma once

#include <cstdint>
#include <filesystem>
#include <vector>

#include "moeserve/model/deepseek_v3/config.h"
#include "moeserve/model/weight_spec.h"
#include "moeserve/testing/generator.h"
#include "moeserve/testing/generator_parts.h"

namespace moeserve::testing::gen {

// Writes the safetensors files (and, with num_shards > 1, an index whose name holds "quant", as
// vllm-mindspore's loader looks for) of the model `specs` describes into out_dir, adding to
// result. Attention: static A8W8 with a calibration pass and per-input-channel smoothing folded
// into input_scale (o_proj: per-tensor, [1]), rope rows permuted as MindFormers keeps them;
// MLPs and experts: per-token dynamic with per-channel weight_scale, routed experts stacked
// [E, in, out]; kv_b_proj split into lkv2kv_k_nope / lkv2kv_v; the rest bf16 as generated.
void write_mindformers_a8w8(const std::vector<model::WeightSpec>& specs, const model::DeepseekV3Config& c,
                            uint64_t seed, const TensorSource& source, int num_shards,
                            const std::filesystem::path& out_dir, GeneratedModel& result);

}  // namespace moeserve::testing::gen
