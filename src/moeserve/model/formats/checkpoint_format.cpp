#include "moeserve/model/formats/checkpoint_format.h"

#include <fmt/format.h>

#include "moeserve/core/error.h"

namespace moeserve::model {

void CheckpointFormat::resolve_run(Quantization& q, const std::string& label, const std::string& requested) const {
    if (requested.empty() || requested == "auto") {
        run_as_stored(q);
    } else if (requested == "w4a16" || requested == "w4a8") {
        q.int4 = true;
        q.w4a8 = requested == "w4a8";
        q.int4_config = Int4Config{.layout = Int4Layout::kCompressedTensors, .group_size = 128, .symmetric = false};
    } else if (requested == "w8a8") {
        q.int8 = true;
    } else if (requested == "w8a8-all") {
        q.int8 = true;
        q.int8_lm_head = true;
    } else if (requested == "fp8") {
        raise(ErrorCode::kInvalidArgument, "--quantization fp8 needs an FP8 checkpoint; {} has none", label);
    } else if (requested != "none") {
        raise(ErrorCode::kInvalidArgument,
              "--quantization '{}' is not supported (expected w8a8, w8a8-all, w4a16, w4a8, fp8 or none)", requested);
    }
}

LinearScheme CheckpointFormat::scheme(const Quantization& q, const std::string& module,
                                      LayerPrecision precision) const {
    if (q.int4_module(module, precision)) return q.w4a8 ? LinearScheme::kW4A8 : LinearScheme::kW4A16;
    return q.int8_module(module, precision) ? LinearScheme::kW8A8Dynamic : LinearScheme::kFloat;
}

std::string CheckpointFormat::describe(const Quantization& q) const {
    const LinearCounts& c = *q.counts;
    if (q.int4) return describe_int4_run(q, "quantized at load");  // an int4 checkpoint says so itself
    const std::string running = q.int8 ? (q.int8_lm_head ? ", running W8A8 int8 (lm_head too)" : ", running W8A8 int8")
                                : q.f32_weights ? ", running f32 (--dtype float32)"
                                                : ", running bf16";
    return fmt::format("{}{} ({} int8 + {} high-precision linears, {} int8 + {} float expert groups)",
                       checkpoint_name(q), running, c.dynamic_linears.load(), c.float_linears.load(),
                       c.dynamic_experts.load(), c.float_experts.load());
}

std::string describe_int4_run(const Quantization& q, const std::string& source) {
    const LinearCounts& c = *q.counts;
    const std::string group =
        q.int4_config.group_size == 0 ? std::string("per channel") : fmt::format("group {}", q.int4_config.group_size);
    return fmt::format(
        "{}, running {} int4 ({}, {}): {} int4 + {} high-precision linears, {} int4 + {} float expert groups", source,
        q.w4a8 ? "W4A8" : "W4A16", group, q.int4_config.symmetric ? "symmetric" : "asymmetric", c.int4_linears.load(),
        c.float_linears.load(), c.int4_experts.load(), c.float_experts.load());
}

namespace {

// bf16 / f16 / f32 weights: runs bf16 (or f32), or quantized at load.
class Unquantized final : public CheckpointFormat {
public:
    CheckpointQuant kind() const override { return CheckpointQuant::kNone; }

protected:
    std::string checkpoint_name(const Quantization& /*q*/) const override { return "unquantized checkpoint"; }
};

}  // namespace

const CheckpointFormat& unquantized_format() {
    static const Unquantized format;
    return format;
}

const CheckpointFormat& checkpoint_format(CheckpointQuant kind) {
    switch (kind) {
        case CheckpointQuant::kNone:
            return unquantized_format();
        case CheckpointQuant::kW8A8Int8:
            return compressed_tensors_format();
        case CheckpointQuant::kFp8Block:
            return fp8_block_format();
        case CheckpointQuant::kModelSlim:
            return modelslim_format();
        case CheckpointQuant::kGoldenStick:
            return golden_stick_format();
        case CheckpointQuant::kInt4:
            return int4_format();
        case CheckpointQuant::kMxfp4:
            return mxfp4_format();
    }
    raise(ErrorCode::kInternal, "checkpoint kind {} has no format", static_cast<int>(kind));
}

const std::vector<const CheckpointFormat*>& config_formats() {
    // int4 first: compressed-tensors pack-quantized is int4's, the rest of compressed-tensors W8A8
    static const std::vector<const CheckpointFormat*> formats{
        &int4_format(), &compressed_tensors_format(), &golden_stick_format(), &fp8_block_format(), &mxfp4_format()};
    return formats;
}

}  // namespace moeserve::model
