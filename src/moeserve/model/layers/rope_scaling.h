// RoPE settings from config.json: rope_theta plus the optional rope_scaling (HF v4) or
// rope_parameters (HF v5) object. Supported types: default, linear, yarn; others are an error.
#pragma once

#include <cstdint>
#include <string>

#include "moeserve/io/hf_config.h"

namespace moeserve::model {

struct RopeScaling {
    std::string rope_type = "default";  // "default" | "linear" | "yarn"
    double rope_theta = 10000.0;
    double factor = 1.0;
    int64_t original_max_position_embeddings = 0;  // yarn; 0 = max_position_embeddings
    double beta_fast = 32.0;                       // yarn
    double beta_slow = 1.0;                        // yarn
    double mscale = 1.0;                           // yarn (DeepSeek)
    double mscale_all_dim = 0.0;                   // yarn (DeepSeek)
    double attention_factor = 0.0;                 // yarn; 0 = derive from factor / mscale
    bool truncate = true;                          // yarn: round the correction range to whole dims (gpt-oss: false)

    // default_theta is the architecture's HF default for rope_theta.
    static RopeScaling parse(const io::HfConfig& config, double default_theta);
};

}  // namespace moeserve::model
