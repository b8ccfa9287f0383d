// compressed-tensors W8A8 int8 checkpoints (vLLM's `int-quantized`; OmniInfer's
// `npu_w8a8_dynamic` is the same scheme by another name): int8 weights with a per-output-channel
// weight_scale, dynamic per-token symmetric int8 activations. compressed-tensors
// `pack-quantized` (int4) is int4_config.cpp's.
#include <fmt/format.h>

#include "moeserve/core/error.h"
#include "moeserve/model/formats/checkpoint_format.h"

namespace moeserve::model {

namespace {

// config_groups.<g>.weights {num_bits 8, type int, strategy channel, symmetric},
// input_activations {dynamic, strategy token}; format int-quantized.
void check_config_groups(const nlohmann::json& q, const std::string& where) {
    const std::string format = q.value("format", "");
    if (format != "int-quantized" && format != "pack-quantized" && !format.empty()) {
        raise(ErrorCode::kUnsupported, "{}: quantization_config.format '{}' is not supported (expected int-quantized)",
              where, format);
    }
    if (!q.contains("config_groups") || !q["config_groups"].is_object()) {
        raise(ErrorCode::kInvalidModel, "{}: compressed-tensors quantization_config has no config_groups", where);
    }
    for (const auto& [group, g] : q["config_groups"].items()) {
        nlohmann::json w = g.contains("weights") ? g["weights"] : nlohmann::json();
        if (w.is_object() && w.contains("num_bits") && w["num_bits"].is_object()) {
            // OmniInfer: {module substring: bits}, for W4A8 mixes; all 8 is plain W8A8
            for (const auto& [module, bits] : w["num_bits"].items()) {
                if (!bits.is_number_integer() || bits.get<int>() != 8) {
                    raise(ErrorCode::kUnsupported,
                          "{}: config group '{}' weights.num_bits gives '{}' {} bits; only 8-bit weights (W8A8) are "
                          "supported",
                          where, group, module, bits.dump());
                }
            }
            w["num_bits"] = 8;
        }
        if (!w.is_object() || !w.value("num_bits", nlohmann::json(0)).is_number_integer() ||
            w.value("num_bits", 0) != 8 || w.value("type", "") != "int" || w.value("strategy", "") != "channel" ||
            !w.value("symmetric", true)) {
            raise(ErrorCode::kUnsupported,
                  "{}: config group '{}' weights must be 8-bit symmetric int per channel (W8A8); got {}", where, group,
                  w.dump());
        }
        const auto& a = g.contains("input_activations") ? g["input_activations"] : nlohmann::json();
        if (!a.is_object() || a.value("num_bits", 0) != 8 || !a.value("dynamic", false) ||
            a.value("strategy", "") != "token" || !a.value("symmetric", true)) {
            raise(ErrorCode::kUnsupported,
                  "{}: config group '{}' input_activations must be dynamic 8-bit symmetric per token; got {}", where,
                  group, a.dump());
        }
    }
}

void append_strings(const nlohmann::json& qc, const char* key, std::vector<std::string>& out) {
    if (!qc.contains(key) || !qc[key].is_array()) return;
    for (const auto& s : qc[key]) out.push_back(s.get<std::string>());
}

class CompressedTensorsW8A8 final : public CheckpointFormat {
public:
    CheckpointQuant kind() const override { return CheckpointQuant::kW8A8Int8; }

    bool read_config(const nlohmann::json& qc, const std::string& label, Quantization& q) const override {
        const std::string method = qc.value("quant_method", "");
        if (method == "compressed-tensors") {
            check_config_groups(qc, label);
            q.format = "compressed-tensors";
            append_strings(qc, "ignore", q.ignore);
        } else if (method == "npu_w8a8_dynamic") {  // weight_scale [N] or [N, 1]
            q.format = "npu_w8a8_dynamic (OmniInfer)";
            append_strings(qc, "ignore", q.ignore);
            append_strings(qc, "ignored_layers", q.ignore);
        } else {
            return false;
        }
        q.checkpoint = kind();
        return true;
    }

protected:
    void run_as_stored(Quantization& q) const override { q.int8 = true; }
    std::string checkpoint_name(const Quantization& /*q*/) const override {
        return "compressed-tensors w8a8 int8 checkpoint";
    }
};

}  // namespace

const CheckpointFormat& compressed_tensors_format() {
    static const CompressedTensorsW8A8 format;
    return format;
}

}  // namespace moeserve::model
