// A checkpoint format: how a checkpoint says it is one, how it runs for --quantization, the
// scheme of each of its modules, and its load-log line. Each format is one file under
// model/formats/ (compressed_tensors.cpp, fp8_blocks.cpp, int4_config.cpp, golden_stick.cpp,
// modelslim.cpp; unquantized: checkpoint_format.cpp; a GGUF file describes itself: gguf.h) with its loaders and
// kernels; checkpoint_format() finds one by kind, and resolve_quantization (model/quantization.h)
// asks config_formats() in turn. docs/adding_a_model.md says how to add one.
#pragma once

#include <nlohmann/json.hpp>

#include <string>
#include <vector>

#include "moeserve/model/quantization.h"

namespace moeserve::model {

class CheckpointFormat {
public:
    virtual ~CheckpointFormat() = default;
    virtual CheckpointQuant kind() const = 0;

    // Whether quantization_config `qc` (an object) is this format's; then q's checkpoint fields
    // are filled (kind, format name, ignore list, block or group sizes). Errors name `label`.
    // Formats recognised otherwise (ModelSlim by its description file) never read a config.
    virtual bool read_config(const nlohmann::json& /*qc*/, const std::string& /*label*/, Quantization& /*q*/) const {
        return false;
    }

    // How the checkpoint runs for --quantization `requested`: sets q.int8 / int4 / fp8, or refuses
    // naming the flag and `label`. Default: "" or "auto" run as stored (run_as_stored); w8a8,
    // w8a8-all and w4a16 quantize at load; none runs bf16; fp8 is refused.
    virtual void resolve_run(Quantization& q, const std::string& label, const std::string& requested) const;

    // Whether the checkpoint names each module's scheme itself (then scheme() says where a module
    // runs W8A8 dynamic, not q's run flags).
    virtual bool names_schemes() const { return false; }

    // The scheme of `module` (the weight name without ".weight"). Default: W4A16 or W8A8 dynamic
    // where q's run flags, the ignore list and the layer's precision allow, else float.
    virtual LinearScheme scheme(const Quantization& q, const std::string& module, LayerPrecision precision) const;

    // The load log's line, with the loader's counts.
    virtual std::string describe(const Quantization& q) const;

protected:
    // What "auto" runs.
    virtual void run_as_stored(Quantization& /*q*/) const {}
    // The checkpoint as the log names it ("unquantized checkpoint", ...).
    virtual std::string checkpoint_name(const Quantization& q) const = 0;
};

// The format of a kind (kNone: unquantized).
const CheckpointFormat& checkpoint_format(CheckpointQuant kind);
// The formats a quantization_config can name, in the order they are asked.
const std::vector<const CheckpointFormat*>& config_formats();

// Each format's one instance (its file defines it).
const CheckpointFormat& unquantized_format();
const CheckpointFormat& compressed_tensors_format();
const CheckpointFormat& fp8_block_format();
const CheckpointFormat& int4_format();
const CheckpointFormat& golden_stick_format();
const CheckpointFormat& modelslim_format();
const CheckpointFormat& mxfp4_format();

// The log line of a W4A16 run; source: "quantized at load", "<format> checkpoint".
std::string describe_int4_run(const Quantization& q, const std::string& source);

// Whether the layer's precision keeps it in high precision whatever the checkpoint stores
// (a router, MLA's absorbed kv_b_proj).
inline bool always_high(LayerPrecision precision) {
    return precision == LayerPrecision::kHigh || precision == LayerPrecision::kDequantized;
}

}  // namespace moeserve::model
