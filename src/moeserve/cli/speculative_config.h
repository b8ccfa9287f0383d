// vLLM's --speculative-config JSON, read for this engine's speculative decoding (docs/serving.md,
// "Speculative decoding"):
//   {"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_max": 4, "prompt_lookup_min": 2}
//   {"method": "deepseek_mtp", "num_speculative_tokens": 1}   (the checkpoint's MTP layer drafts)
// and moeserve's "adaptive": false (default true: the drafts per step follow their measured cost,
// engine/spec_decode/draft_budget.h).
#pragma once

#include <string>

#include "moeserve/engine/spec_decode/speculative_config.h"
#include "moeserve/model/registry.h"

namespace moeserve::cli {

// Empty text = no speculation. Raises Error(kInvalidArgument) with one sentence naming
// --speculative-config and the field for malformed JSON, an unknown field or method,
// num_speculative_tokens outside [1, engine::kMaxSpeculativeTokens], or prompt lookup lengths
// outside 1 <= prompt_lookup_min <= prompt_lookup_max <= 64 (a missing one takes the other's value;
// both missing: 5, as vLLM). deepseek_mtp (or mtp): kInvalidModel when the model's checkpoint has
// no MTP layer (num_nextn_predict_layers and its eh_proj tensor), kUnsupported for
// num_speculative_tokens other than 1 (one MTP layer, not chained).
engine::SpeculativeConfig parse_speculative_config(const std::string& text, const model::ModelSource& model);

}  // namespace moeserve::cli
