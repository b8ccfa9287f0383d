#include "moeserve/model/formats/modelslim.h"

#include <fmt/format.h>

#include <vector>

#include "moeserve/core/error.h"
#include "moeserve/io/json_file.h"
#include "moeserve/model/formats/checkpoint_format.h"
#include "moeserve/model/formats/static_int8.h"

namespace moeserve::model {

namespace {

const char* const kModelSlimMetaKeys[] = {"model_quant_type",  "version",       "group_size",
                                          "kv_cache_type",     "kv_quant_type", "fa_quant_type",
                                          "reduce_quant_type", "metadata",      "optional"};

bool ends_with(const std::string& s, const std::string& suffix) {
    return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// The description file of a ModelSlim checkpoint in dir, or "" when there is none.
std::filesystem::path find_description(const std::filesystem::path& dir) {
    std::error_code ec;
    auto exact = dir / "quant_model_description.json";
    if (std::filesystem::exists(exact, ec)) return exact;
    std::vector<std::filesystem::path> found;
    for (const auto& entry : std::filesystem::directory_iterator(dir, ec)) {
        const std::string name = entry.path().filename().string();
        if (name.rfind("quant_model_description_", 0) == 0 && ends_with(name, ".json")) found.push_back(entry.path());
    }
    if (found.size() > 1) {
        raise(ErrorCode::kInvalidModel, "{}: {} and {} are both ModelSlim descriptions; keep one", dir.string(),
              found[0].filename().string(), found[1].filename().string());
    }
    return found.empty() ? std::filesystem::path() : found[0];
}

class ModelSlim final : public CheckpointFormat {
public:
    CheckpointQuant kind() const override { return CheckpointQuant::kModelSlim; }

    void resolve_run(Quantization& q, const std::string& label, const std::string& requested) const override {
        // "ascend": what older vllm-ascend releases needed for these checkpoints
        if (!requested.empty() && requested != "auto" && requested != "ascend") {
            raise(ErrorCode::kInvalidArgument,
                  "--quantization '{}': {} is a ModelSlim checkpoint ({}), which runs as stored; drop the flag or "
                  "pass auto (or ascend)",
                  requested, label, std::filesystem::path(q.description_file).filename().string());
        }
        q.int8 = true;
    }

    bool names_schemes() const override { return true; }

    // The description's entry for module + ".weight". Error kInvalidModel naming the tensor and
    // the file when it is missing, kUnsupported for a type moeserve does not run (W8A16,
    // W4A4_*, ..., and W8A8 static for a router or kv_b_proj). A router or kv_b_proj stored as
    // W8A8_DYNAMIC or W4A8_DYNAMIC runs dequantized.
    LinearScheme scheme(const Quantization& q, const std::string& module, LayerPrecision precision) const override {
        const std::string name = module + ".weight";
        const auto it = q.modelslim->find(name);
        if (it == q.modelslim->end()) {
            raise(ErrorCode::kInvalidModel,
                  "{}: no entry for '{}'; a ModelSlim description must give every linear's type (add \"{}\": "
                  "\"FLOAT\" for an unquantized one)",
                  q.description_file, name, name);
        }
        const bool high = always_high(precision);  // a router, MLA's kv_b_proj: kept dequantized
        if (it->second == "FLOAT") return LinearScheme::kFloat;
        if (it->second == "W8A8_DYNAMIC") return high ? LinearScheme::kFloat : LinearScheme::kW8A8Dynamic;
        if (it->second == "W4A8_DYNAMIC") return high ? LinearScheme::kFloat : LinearScheme::kW4A8;
        if (it->second == "W8A8" && !high) return LinearScheme::kW8A8Static;
        raise(ErrorCode::kUnsupported,
              "{}: '{}' has type '{}'; moeserve runs the ModelSlim types FLOAT, W8A8, W8A8_DYNAMIC and W4A8_DYNAMIC{}",
              q.description_file, name, it->second,
              high ? " (and a router or kv_b_proj only as FLOAT, W8A8_DYNAMIC or W4A8_DYNAMIC)" : "");
    }

    std::string describe(const Quantization& q) const override {
        const LinearCounts& c = *q.counts;
        const std::string int4_linears =
            c.int4_linears.load() > 0 ? fmt::format(" + {} W4A8_DYNAMIC", c.int4_linears.load()) : "";
        const std::string int4_experts =
            c.int4_experts.load() > 0 ? fmt::format(" + {} W4A8_DYNAMIC", c.int4_experts.load()) : "";
        return fmt::format(
            "ModelSlim checkpoint ({}): {} W8A8 static + {} W8A8_DYNAMIC{} + {} FLOAT linears, "
            "{} W8A8_DYNAMIC{} + {} FLOAT expert groups",
            std::filesystem::path(q.description_file).filename().string(), c.static_linears.load(),
            c.dynamic_linears.load(), int4_linears, c.float_linears.load(), c.dynamic_experts.load(), int4_experts,
            c.float_experts.load());
    }

protected:
    std::string checkpoint_name(const Quantization& /*q*/) const override { return "ModelSlim checkpoint"; }
};

}  // namespace

const CheckpointFormat& modelslim_format() {
    static const ModelSlim format;
    return format;
}

std::map<std::string, std::string> parse_modelslim_description(const nlohmann::json& j, const std::string& label) {
    if (!j.is_object()) {
        raise(ErrorCode::kInvalidModel,
              "{}: a ModelSlim description must be a JSON object of tensor name -> type; got {}", label, j.type_name());
    }
    std::map<std::string, std::string> out;
    for (const auto& [key, value] : j.items()) {
        bool meta = false;
        for (const char* m : kModelSlimMetaKeys) meta = meta || key == m;
        if (meta || !value.is_string()) continue;
        out.emplace(key, value.get<std::string>());
    }
    return out;
}

std::optional<Quantization> read_modelslim(const std::filesystem::path& model_dir, const std::string& requested) {
    const std::filesystem::path desc = find_description(model_dir);
    if (desc.empty()) {
        if (requested == "ascend") {
            raise(ErrorCode::kInvalidArgument,
                  "--quantization ascend needs a ModelSlim checkpoint; {} has no quant_model_description.json",
                  model_dir.string());
        }
        return std::nullopt;
    }
    Quantization q;
    q.checkpoint = CheckpointQuant::kModelSlim;
    q.format = "modelslim";
    q.description_file = desc.string();
    modelslim_format().resolve_run(q, model_dir.string(), requested);
    q.modelslim = std::make_shared<const std::map<std::string, std::string>>(
        parse_modelslim_description(io::read_json_file(desc), desc.string()));
    return q;
}

void check_fused_shards(const io::WeightSource& weights, const Quantization& quant,
                        const std::vector<std::string>& modules) {
    if (quant.checkpoint != CheckpointQuant::kModelSlim || modules.size() < 2) return;
    const LinearScheme first = quant.scheme(modules[0]);
    for (size_t i = 1; i < modules.size(); ++i) {
        if (quant.scheme(modules[i]) != first) {
            raise(ErrorCode::kInvalidModel,
                  "{}: '{}.weight' and '{}.weight' share an input (one fused matmul) but have different types",
                  quant.description_file, modules[0], modules[i]);
        }
        if (first != LinearScheme::kW8A8Static) continue;
        for (const char* p : {".input_scale", ".input_offset"}) {
            const float a = scalar_param(weights, modules[0] + p), b = scalar_param(weights, modules[i] + p);
            if (a != b) {
                raise(ErrorCode::kInvalidModel,
                      "'{}{}' = {} but '{}{}' = {}: linears that share an input must share its static quantization "
                      "(vllm-ascend keeps one per fused module)",
                      modules[0], p, a, modules[i], p, b);
            }
        }
    }
}

}  // namespace moeserve::model
