// Writes int4 weights in the checkpoint layouts moeserve reads (formats/int4_weights.h), for
// `moeserve make-model --quantization w4a16 | w4a16-asym | w4a16-act | w4a8 | awq | gptq | gptq-act`: tests and
// benchmarks get int4 checkpoints without the Python quantizers.
#pragma once

#include <nlohmann/json.hpp>

#include <optional>
#include <string>
#include <vector>

#include "moeserve/io/safetensors_writer.h"
#include "moeserve/model/formats/int4_weights.h"
#include "moeserve/model/quantization.h"

namespace moeserve::model {

// The layout, group size and symmetry a make-model --quantization name writes; nullopt for
// names that are not int4.
std::optional<Int4Config> int4_layout_for(const std::string& quantization);

// The dtype the layout stores scales in (compressed-tensors BF16, AWQ and GPTQ F16): the
// generator quantizes with it so the checkpoint reads back exactly.
DType int4_scale_dtype(const Int4Config& cfg);

// w [rows, cols] quantized as cfg's layout stores it (int4_scale_dtype scales); with
// cfg.desc_act (GPTQ) in a seeded random activation order, as `perm`.
Int4Matrix quantize_int4_for(const float* w, int64_t rows, int64_t cols, const Int4Config& cfg, uint64_t seed);

// Adds module `prefix`'s int4 weight m to the writer in cfg's layout; returns the names written.
// AWQ and GPTQ need rows % 8 == 0 (and GPTQ cols % 8 == 0); GPTQ v1 stores zero - 1 (zeros >= 1).
std::vector<std::string> add_int4_tensors(io::SafetensorsWriter& writer, const std::string& prefix, const Int4Matrix& m,
                                          const Int4Config& cfg);

// The config.json quantization_config of a checkpoint in cfg's layout (`ignore`: module names
// compressed-tensors leaves unquantized).
nlohmann::json int4_quantization_config(const Int4Config& cfg, const std::vector<std::string>& ignore);

}  // namespace moeserve::model
