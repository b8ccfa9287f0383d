// MindSpore golden-stick A8W8 checkpoints (quant_method osl, MindFormers names;
// model/formats/mindformers_checkpoint.h presents them under HF names): static W8A8 attention with a
// per-channel input divisor, dynamic W8A8 MLPs and experts, the rest float. They run as stored.
#include <fmt/format.h>

#include "moeserve/core/error.h"
#include "moeserve/model/formats/checkpoint_format.h"

namespace moeserve::model {

namespace {

class GoldenStick final : public CheckpointFormat {
public:
    CheckpointQuant kind() const override { return CheckpointQuant::kGoldenStick; }

    bool read_config(const nlohmann::json& qc, const std::string& /*label*/, Quantization& q) const override {
        if (qc.value("quant_method", "") != "osl") return false;  // the MindFormers yaml's quant_method
        q.checkpoint = kind();
        q.format = "golden-stick";
        return true;
    }

    void resolve_run(Quantization& q, const std::string& label, const std::string& requested) const override {
        if (!requested.empty() && requested != "auto") {
            raise(ErrorCode::kInvalidArgument,
                  "--quantization '{}': {} is a MindSpore golden-stick A8W8 checkpoint, which runs as stored; drop "
                  "the flag or pass auto",
                  requested, label);
        }
        q.int8 = true;
    }

    bool names_schemes() const override { return true; }

    // As ds_utils.py create_ptq('osl') quantizes: attention static, `feed_forward` (dense MLPs,
    // shared and routed experts) dynamic, lkv2kv (kv_b_proj) and lm_head left out; routers are no
    // linears it quantizes (kHigh / kDequantized layers).
    LinearScheme scheme(const Quantization& /*q*/, const std::string& module, LayerPrecision precision) const override {
        if (always_high(precision)) return LinearScheme::kFloat;
        if (module.find(".self_attn.") != std::string::npos) return LinearScheme::kW8A8Static;
        if (module.find(".mlp.") != std::string::npos) return LinearScheme::kW8A8Dynamic;
        return LinearScheme::kFloat;
    }

    std::string describe(const Quantization& q) const override {
        const LinearCounts& c = *q.counts;
        return fmt::format(
            "golden-stick A8W8 checkpoint (MindFormers names): {} static + {} dynamic + {} FLOAT linears, "
            "{} dynamic + {} FLOAT expert groups",
            c.static_linears.load(), c.dynamic_linears.load(), c.float_linears.load(), c.dynamic_experts.load(),
            c.float_experts.load());
    }

protected:
    std::string checkpoint_name(const Quantization& /*q*/) const override { return "golden-stick A8W8 checkpoint"; }
};

}  // namespace

const CheckpointFormat& golden_stick_format() {
    static const GoldenStick format;
    return format;
}

}  // namespace moeserve::model
