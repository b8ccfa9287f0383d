// MindSpore golden-stick A8W8 checkpoints (MindSpore-Lab/DeepSeek-R1-0528-A8W8) keep MindFormers
// parameter names and layouts. This converter presents one under the Hugging Face names and
// layouts the DeepSeek-V3 model loads, with the static/dynamic int8 tensors named as ModelSlim's
// (docs/quantization.md, "The checkpoint formats' spec"). Depends on io and the
// DeepSeek config, and the quantization it resolves.
#pragma once

#include <memory>
#include <string>

#include "moeserve/io/hf_config.h"
#include "moeserve/io/weight_source.h"
#include "moeserve/model/deepseek_v3/config.h"
#include "moeserve/model/quantization.h"

namespace moeserve::model {

// Whether the checkpoint uses MindFormers names (model.tok_embeddings.embedding_weight or
// model.norm_out.weight).
bool has_mindformers_names(const io::WeightSource& weights);

// Whether `weights` are read as a golden-stick A8W8 checkpoint; the one place every architecture
// asks. golden-stick keeps quant_method in the MindFormers yaml, so MindFormers names with no
// quant_method in config.json (with --quantization auto or not given) resolve `quant` as
// golden-stick. Names and quant_method that disagree are a kInvalidModel naming `label` (the model
// folder) and both sides.
bool resolve_golden_stick(const io::WeightSource& weights, const io::HfConfig& config, const std::string& requested,
                          Quantization& quant, const std::string& label);

// The DeepSeek-V3 golden-stick checkpoint `mf` under HF names:
//   attention q2l_proj / kv2l / l2q_proj / wo -> q_a_proj / kv_a_proj_with_mqa / q_b_proj / o_proj
//     (._layer.weight -> .weight, ._layer.matmul.dequant_scale -> .deq_scale, ._layer.matmul.
//     quant_bias -> .quant_bias, .quant_op.input_scale -> .input_scale, .quant_op.input_zp ->
//     .input_offset), with the rope rows of kv2l and of every l2q_proj head put back in HF order;
//   lkv2kv_k_nope + lkv2kv_v -> kv_b_proj (per head: nope rows, then v rows);
//   feed_forward.{w1,w3,w2} (dense, shared_experts) -> mlp.{gate,up,down}_proj with
//     ._layer.matmul.weight_scale -> .weight_scale; routed_experts.ffn.{w1,w3,w2} [E, in, out]
//     unstacked to mlp.experts.E.*_proj.weight [out, in] and weight_scale [E, out] to [out] each;
//   router.dense.weight / router.e_score_correction_bias -> mlp.gate.*; the norms, embedding, lm_head;
//   fused names left by ffn_concat / qkv_concat (w_gate_hidden = w1 | w3, qkv2l = q2l_proj | kv2l
//   with one quant_op) are split first.
// Layers past num_hidden_layers (MTP) are left out, as the HF loader leaves them. Errors
// (moeserve::Error naming the file and the MindFormers tensor): a missing tensor, a wrong dtype or
// shape, a tensor the map does not know (OSP's quant_op.beta, ...), a fused tensor next to its
// parts, a config without q_lora_rank.
std::unique_ptr<io::WeightSource> mindformers_deepseek_as_hf(std::unique_ptr<io::WeightSource> mf,
                                                             const DeepseekV3Config& c);

}  // namespace moeserve::model
