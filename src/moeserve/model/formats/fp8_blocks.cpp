#include "moeserve/model/formats/fp8_blocks.h"

#include <fmt/format.h>

#include <cstring>

#include "moeserve/core/error.h"
#include "moeserve/model/formats/checkpoint_format.h"
#include "moeserve/model/layers/weight_loading.h"

namespace moeserve::model {

namespace {
// kF8E4M3x128's geometry: 128 columns, the f32 scale and 128 bytes.
int64_t block_cols() { return ggml_traits(GgmlType::kF8E4M3x128).block_size; }
size_t block_bytes() { return ggml_traits(GgmlType::kF8E4M3x128).type_size; }
}  // namespace

bool fp8_packable(const io::WeightSource& weights, const std::string& name, const Quantization& quant, int64_t col0,
                  int64_t cols) {
    const int64_t block = block_cols();
    if (quant.checkpoint != CheckpointQuant::kFp8Block || quant.block_cols != block) return false;
    if (col0 % block != 0 || cols % block != 0 || !weights.contains(name)) return false;
    return weights.get(name).dtype == DType::kF8E4M3;
}

void pack_fp8_rows(const io::WeightSource& weights, const std::string& name, const Shape& shape, int64_t row0,
                   int64_t rows, int64_t col0, int64_t cols, const Quantization& quant, uint8_t* dst) {
    const TensorView w = get_checked(weights, name, shape);
    const int64_t width = shape[1];
    const int64_t block = block_cols();
    if (w.dtype != DType::kF8E4M3) {  // e.g. one expert of a layer stored unlike the others
        raise(ErrorCode::kInvalidModel, "tensor '{}' is {} where the layer's other weights are F8_E4M3 in {}", name,
              dtype_name(w.dtype), weights.dir().string());
    }
    MOESERVE_CHECK(
        row0 >= 0 && row0 + rows <= shape[0] && col0 % block == 0 && cols % block == 0 && col0 + cols <= width,
        "FP8 rectangle rows [{}, +{}) cols [{}, +{}) of {}", row0, rows, col0, cols, name);
    const Tensor scales = load_fp8_block_scales(weights, name, shape[0], width, quant.block_rows, quant.block_cols);
    const int64_t scale_cols = (width + quant.block_cols - 1) / quant.block_cols;
    const auto* src = w.as<const uint8_t>();
    for (int64_t r = 0; r < rows; ++r) {
        const int64_t row = row0 + r;
        const float* row_scales = scales.as<float>() + (row / quant.block_rows) * scale_cols;
        for (int64_t b = 0; b < cols / block; ++b) {
            const int64_t col = col0 + b * block;
            std::memcpy(dst, &row_scales[col / block], 4);
            std::memcpy(dst + 4, src + row * width + col, static_cast<size_t>(block));
            dst += block_bytes();
        }
    }
    weights.drop_resident(name);  // the repacked rows are what the layer reads from now on
}

size_t fp8_packed_bytes(int64_t rows, int64_t cols) {
    return static_cast<size_t>(rows) * static_cast<size_t>(cols / block_cols()) * block_bytes();
}

kernels::GgufMatrix fp8_matrix(const uint8_t* data, int64_t rows, int64_t cols) {
    return {GgmlType::kF8E4M3x128, data, rows, cols, fp8_packed_bytes(1, cols)};
}

namespace {

// DeepSeek's FP8 checkpoints (quant_method fp8, e4m3 with weight_block_size): runs FP8 W8A16 as
// stored; --quantization none widens to bf16, w8a8 / w4a16 quantize at load.
class Fp8BlockCheckpoint final : public CheckpointFormat {
public:
    CheckpointQuant kind() const override { return CheckpointQuant::kFp8Block; }

    bool read_config(const nlohmann::json& qc, const std::string& label, Quantization& q) const override {
        if (qc.value("quant_method", "") != "fp8") return false;
        q.checkpoint = kind();
        q.format = "fp8";
        if (qc.value("fmt", "e4m3") != "e4m3") {
            raise(ErrorCode::kUnsupported, "{}: fp8 fmt '{}' is not supported (expected e4m3)", label,
                  qc.value("fmt", ""));
        }
        if (!qc.contains("weight_block_size")) {
            raise(ErrorCode::kUnsupported, "{}: fp8 without weight_block_size (per-tensor FP8) is not supported",
                  label);
        }
        const auto& b = qc["weight_block_size"];
        if (!b.is_array() || b.size() != 2 || !b[0].is_number_integer() || !b[1].is_number_integer() ||
            b[0].get<int64_t>() < 1 || b[1].get<int64_t>() < 1) {
            raise(ErrorCode::kInvalidModel, "{}: quantization_config.weight_block_size must be [rows, cols]; got {}",
                  label, b.dump());
        }
        q.block_rows = b[0].get<int64_t>();
        q.block_cols = b[1].get<int64_t>();
        if (qc.contains("modules_to_not_convert") && qc["modules_to_not_convert"].is_array()) {
            for (const auto& s : qc["modules_to_not_convert"]) q.ignore.push_back(s.get<std::string>());
        }
        return true;
    }

    void resolve_run(Quantization& q, const std::string& label, const std::string& requested) const override {
        if (requested == "fp8") {
            q.fp8 = true;
            return;
        }
        CheckpointFormat::resolve_run(q, label, requested);
    }

    std::string describe(const Quantization& q) const override {
        if (!q.fp8) return CheckpointFormat::describe(q);
        const LinearCounts& c = *q.counts;
        return fmt::format(
            "fp8 checkpoint (blocks {}x{}), running FP8 W8A16: {} fp8 + {} high-precision linears, {} fp8 + {} "
            "float expert groups (high precision: routers, kv_b_proj, the lm_head, and weights whose columns are not "
            "whole 128-wide blocks)",
            q.block_rows, q.block_cols, c.fp8_linears.load(), c.float_linears.load(), c.fp8_experts.load(),
            c.float_experts.load());
    }

protected:
    void run_as_stored(Quantization& q) const override { q.fp8 = true; }
    std::string checkpoint_name(const Quantization& q) const override {
        return fmt::format("fp8 checkpoint (blocks {}x{})", q.block_rows, q.block_cols);
    }
};

}  // namespace

const CheckpointFormat& fp8_block_format() {
    static const Fp8BlockCheckpoint format;
    return format;
}

}  // namespace moeserve::model
