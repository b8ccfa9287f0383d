// gpt-oss's MXFP4 checkpoints (quant_method mxfp4): the routed experts stored as MXFP4 blocks
// (`*_blocks` + `*_scales`, formats/mxfp4_hf.h), everything else bf16. The experts run as stored,
// MXFP4 blocks against q8_0 activations (the GGUF dot products); --quantization none widens them to
// bf16. The weights' form is the tensors', so the gpt-oss expert loader (gpt_oss/experts.cpp)
// reads them; this format names the run and the log line.
#include <fmt/format.h>

#include "moeserve/core/error.h"
#include "moeserve/model/formats/checkpoint_format.h"

namespace moeserve::model {

namespace {

class Mxfp4Checkpoint final : public CheckpointFormat {
public:
    CheckpointQuant kind() const override { return CheckpointQuant::kMxfp4; }

    bool read_config(const nlohmann::json& qc, const std::string& /*label*/, Quantization& q) const override {
        if (qc.value("quant_method", "") != "mxfp4") return false;
        q.checkpoint = kind();
        q.format = "mxfp4";
        return true;
    }

    void resolve_run(Quantization& q, const std::string& label, const std::string& requested) const override {
        if (requested.empty() || requested == "auto" || requested == "mxfp4") {
            q.mxfp4 = true;
        } else if (requested != "none") {
            raise(ErrorCode::kUnsupported,
                  "{}: an mxfp4 checkpoint runs its experts as stored (--quantization auto) or widened to bf16 "
                  "(none); '{}' is not supported",
                  label, requested);
        }
    }

    std::string describe(const Quantization& q) const override {
        const LinearCounts& c = *q.counts;
        return fmt::format("mxfp4 checkpoint, running {}: {} MXFP4 + {} float expert groups, {} float linears",
                           q.mxfp4 ? "MXFP4 experts (q8_0 activations)" : "bf16 (widened at load)",
                           c.mxfp4_experts.load(), c.float_experts.load(), c.float_linears.load());
    }

protected:
    std::string checkpoint_name(const Quantization&) const override { return "mxfp4 checkpoint"; }
};

}  // namespace

const CheckpointFormat& mxfp4_format() {
    static const Mxfp4Checkpoint format;
    return format;
}

}  // namespace moeserve::model
