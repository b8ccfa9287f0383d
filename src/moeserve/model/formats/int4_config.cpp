#include "moeserve/model/formats/int4_config.h"

#include <fmt/format.h>

#include <string_view>

#include "moeserve/core/error.h"
#include "moeserve/model/formats/checkpoint_format.h"

namespace moeserve::model {

namespace {

// A group size read from `field`: -1 or the row width (0 here) means one group per row.
int64_t group_size_of(const nlohmann::json& v, const std::string& label, const std::string& field) {
    if (v.is_null()) return 0;
    if (!v.is_number_integer() || (v.get<int64_t>() != -1 && (v.get<int64_t>() < 2 || v.get<int64_t>() % 2 != 0))) {
        raise(ErrorCode::kUnsupported, "{}: {} is {}; moeserve runs int4 groups of an even number of columns (or -1)",
              label, field, v.dump());
    }
    return v.get<int64_t>() == -1 ? 0 : v.get<int64_t>();
}

void check_bits(const nlohmann::json& v, const std::string& label, const std::string& field) {
    if (!v.is_number_integer() || v.get<int>() != 4) {
        raise(ErrorCode::kUnsupported, "{}: {} is {}; moeserve runs 4-bit weights of this format only", label, field,
              v.dump());
    }
}

// substring: AutoAWQ and GPTQ skip every module whose name contains an entry, so each becomes
// "re:.*<entry>.*"; compressed-tensors lists names (or "re:" patterns) as they are.
void append_names(const nlohmann::json& qc, const char* key, bool substring, std::vector<std::string>& out) {
    if (!qc.contains(key) || !qc[key].is_array()) return;
    for (const auto& s : qc[key]) {
        if (!s.is_string()) continue;
        if (!substring) {
            out.push_back(s.get<std::string>());
            continue;
        }
        std::string escaped;
        for (const char ch : s.get<std::string>()) {
            if (std::string_view("\\^$.|?*+()[]{}").find(ch) != std::string_view::npos) escaped += '\\';
            escaped += ch;
        }
        out.push_back("re:.*" + escaped + ".*");
    }
}

Int4Config compressed_tensors(const nlohmann::json& qc, const std::string& label) {
    if (!qc.contains("config_groups") || !qc["config_groups"].is_object() || qc["config_groups"].empty()) {
        raise(ErrorCode::kInvalidModel, "{}: compressed-tensors quantization_config has no config_groups", label);
    }
    std::optional<Int4Config> found;
    for (const auto& [group, g] : qc["config_groups"].items()) {
        const std::string where = "quantization_config.config_groups." + group;
        const nlohmann::json w = g.value("weights", nlohmann::json());
        if (!w.is_object()) raise(ErrorCode::kInvalidModel, "{}: {}.weights is missing", label, where);
        check_bits(w.value("num_bits", nlohmann::json()), label, where + ".weights.num_bits");
        if (w.value("type", "int") != "int") {
            raise(ErrorCode::kUnsupported, "{}: {}.weights.type is '{}'; expected int", label, where,
                  w.value("type", ""));
        }
        Int4Config c;
        const nlohmann::json act = g.value("input_activations", nlohmann::json());
        if (!act.is_null()) {
            // W4A8 as vLLM's compressed-tensors runs it: int8 activations quantized per token
            const bool dynamic_token = act.is_object() && act.value("num_bits", 0) == 8 &&
                                       act.value("type", "int") == "int" && act.value("symmetric", true) &&
                                       act.value("dynamic", false) && act.value("strategy", "") == "token";
            if (!dynamic_token) {
                raise(ErrorCode::kUnsupported,
                      "{}: {}.input_activations is {}; moeserve runs int4 weights with f32 activations or 8-bit "
                      "symmetric dynamic per-token ones",
                      label, where, act.dump());
            }
            c.int8_activations = true;
        }
        // compressed-tensors' ActivationOrdering: "group" (alias "dynamic") stores weight_g_idx, the
        // group of each input column; "weight" (alias "static") keeps the groups contiguous, as
        // without an order (a weight_g_idx is read wherever the file has one).
        const nlohmann::json actorder = w.value("actorder", nlohmann::json());
        if (actorder == "group" || actorder == "dynamic") {
            c.desc_act = true;
        } else if (!actorder.is_null() && actorder != "weight" && actorder != "static") {
            raise(ErrorCode::kUnsupported,
                  "{}: {}.weights.actorder is {}; expected group, weight, dynamic, static or null", label, where,
                  actorder.dump());
        }
        const std::string strategy = w.value("strategy", "");
        if (strategy == "group") {
            c.group_size = group_size_of(w.value("group_size", nlohmann::json()), label, where + ".weights.group_size");
            if (c.group_size == 0) {
                raise(ErrorCode::kInvalidModel, "{}: {}.weights.strategy group needs a group_size", label, where);
            }
        } else if (strategy == "channel") {
            c.group_size = 0;
        } else {
            raise(ErrorCode::kUnsupported, "{}: {}.weights.strategy is '{}'; moeserve runs int4 group or channel",
                  label, where, strategy);
        }
        c.symmetric = w.value("symmetric", true);
        if (found && (found->group_size != c.group_size || found->symmetric != c.symmetric ||
                      found->desc_act != c.desc_act || found->int8_activations != c.int8_activations)) {
            raise(ErrorCode::kUnsupported,
                  "{}: config groups with different int4 group sizes, symmetry, actorder or activations", label);
        }
        found = c;
    }
    return *found;
}

Int4Config awq(const nlohmann::json& qc, const std::string& label) {
    check_bits(qc.value("bits", qc.value("w_bit", nlohmann::json())), label, "quantization_config.bits");
    const std::string version = qc.value("version", "gemm");
    if (version != "gemm" && version != "GEMM") {
        raise(ErrorCode::kUnsupported, "{}: quantization_config.version is '{}'; moeserve reads AWQ's gemm layout",
              label, version);
    }
    if (!qc.value("zero_point", true)) {
        raise(ErrorCode::kUnsupported, "{}: quantization_config.zero_point is false; moeserve reads AWQ with zeros",
              label);
    }
    Int4Config c;
    c.layout = Int4Layout::kAwq;
    c.group_size = group_size_of(qc.value("group_size", qc.value("q_group_size", nlohmann::json(128))), label,
                                 "quantization_config.group_size");
    c.symmetric = false;
    return c;
}

Int4Config gptq(const nlohmann::json& qc, const std::string& label) {
    check_bits(qc.value("bits", nlohmann::json()), label, "quantization_config.bits");
    Int4Config c;
    c.layout = Int4Layout::kGptq;
    c.group_size = group_size_of(qc.value("group_size", nlohmann::json(128)), label, "quantization_config.group_size");
    c.symmetric = qc.value("sym", true);
    const std::string format = qc.value("checkpoint_format", "gptq");
    if (format != "gptq" && format != "gptq_v2") {
        raise(ErrorCode::kUnsupported, "{}: quantization_config.checkpoint_format is '{}'; expected gptq or gptq_v2",
              label, format);
    }
    c.gptq_zero_plus_one = format == "gptq";
    c.desc_act = qc.value("desc_act", false);
    return c;
}

}  // namespace

std::optional<Int4Config> parse_int4_config(const nlohmann::json& qc, const std::string& label,
                                            std::vector<std::string>& ignore) {
    const std::string method = qc.value("quant_method", "");
    if (method == "compressed-tensors" && qc.value("format", "") == "pack-quantized") {
        append_names(qc, "ignore", false, ignore);
        return compressed_tensors(qc, label);
    }
    if (method == "awq") {
        append_names(qc, "modules_to_not_convert", true, ignore);
        return awq(qc, label);
    }
    if (method == "gptq") {
        append_names(qc, "modules_to_not_convert", true, ignore);
        return gptq(qc, label);
    }
    return std::nullopt;
}

const char* int4_layout_name(Int4Layout layout) {
    switch (layout) {
        case Int4Layout::kCompressedTensors:
            return "compressed-tensors pack-quantized";
        case Int4Layout::kAwq:
            return "awq";
        case Int4Layout::kGptq:
            return "gptq";
    }
    return "?";
}

namespace {

// int4 checkpoints (compressed-tensors pack-quantized, AutoAWQ, GPTQ): run as stored ("", auto:
// W4A16, or W4A8 where compressed-tensors gives 8-bit input_activations), W4A16 (w4a16), with int8
// activations (w4a8) or dequantized to bf16 (none).
class Int4Checkpoint final : public CheckpointFormat {
public:
    CheckpointQuant kind() const override { return CheckpointQuant::kInt4; }

    bool read_config(const nlohmann::json& qc, const std::string& label, Quantization& q) const override {
        const auto config = parse_int4_config(qc, label, q.ignore);
        if (!config) return false;
        q.checkpoint = kind();
        q.int4_config = *config;
        q.format = int4_layout_name(config->layout);
        return true;
    }

    void resolve_run(Quantization& q, const std::string& label, const std::string& requested) const override {
        if (requested.empty() || requested == "auto" || requested == "w4a16" || requested == "w4a8") {
            q.int4 = true;
            // a W4A8 checkpoint runs W4A8 unless w4a16 asks for f32 activations
            q.w4a8 = requested == "w4a8" || (requested != "w4a16" && q.int4_config.int8_activations);
        } else if (requested != "none") {
            raise(ErrorCode::kInvalidArgument,
                  "--quantization '{}': {} is an int4 ({}) checkpoint; pass w4a16 (as stored), w4a8 (int8 "
                  "activations), none (bf16) or leave it out",
                  requested, label, q.format);
        }
    }

    std::string describe(const Quantization& q) const override {
        return q.int4 ? describe_int4_run(q, fmt::format("{} checkpoint", q.format)) : CheckpointFormat::describe(q);
    }

protected:
    std::string checkpoint_name(const Quantization& q) const override {
        return fmt::format("int4 {} checkpoint", q.format);
    }
};

}  // namespace

const CheckpointFormat& int4_format() {
    static const Int4Checkpoint format;
    return format;
}

}  // namespace moeserve::model
