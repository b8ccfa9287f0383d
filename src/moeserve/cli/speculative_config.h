// vLLM's --speculative-config JSON, read for this engine's speculative decoding (docs/serving.md,
// "Speculative decoding"):
//   {"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_max": 4, "prompt_lookup_min": 2}
//   {"method": "deepseek_mtp", "num_speculative_tokens": 1}   (refused: the MTP layer is not loaded yet)
#pragma once

#include <string>

#include "moeserve/engine/spec_decode/speculative_config.h"

namespace moeserve::cli {

// Empty text = no speculation. Raises Error(kInvalidArgument) with one sentence naming
// --speculative-config and the field for malformed JSON, an unknown field or method,
// num_speculative_tokens outside [1, engine::kMaxSpeculativeTokens], or prompt lookup lengths
// outside 1 <= prompt_lookup_min <= prompt_lookup_max <= 64 (a missing one takes the other's value;
// both missing: 5, as vLLM). deepseek_mtp: kInvalidModel when model_dir's checkpoint has no MTP
// layer (num_nextn_predict_layers and its eh_proj tensor), else kUnsupported (not built yet).
engine::SpeculativeConfig parse_speculative_config(const std::string& text, const std::string& model_dir);

}  // namespace moeserve::cli
