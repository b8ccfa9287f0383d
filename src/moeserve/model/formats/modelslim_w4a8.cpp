#include "moeserve/model/formats/modelslim_w4a8.h"

#include "moeserve/core/error.h"

namespace moeserve::model {

namespace {

// The group size the second-level scales imply (cols when there are none); Error naming the
// tensor when its width does not divide cols into even groups.
int64_t group_size_of(const io::WeightSource& weights, const std::string& prefix, int64_t rows, int64_t cols) {
    const std::string name = prefix + ".weight_scale_second";
    if (!weights.contains(name)) return cols;
    const Shape& shape = weights.get(name).shape;
    const int64_t groups = shape.rank() == 2 ? shape[1] : 0;
    if (shape.rank() != 2 || shape[0] != rows || groups <= 0 || cols % groups != 0 || (cols / groups) % 2 != 0) {
        raise(ErrorCode::kInvalidModel,
              "{} has shape {}; W4A8_DYNAMIC per-group scales are [{}, groups] with groups dividing {} columns "
              "into even groups",
              weights.describe(name), shape.str(), rows, cols);
    }
    return cols / groups;
}

// Value (j, p) of the stored weight as a signed 4-bit integer, in either layout.
struct StoredInt4 {
    const int8_t* data;
    int64_t cols;
    bool packed;  // two rows per byte
    int value(int64_t j, int64_t p) const {
        if (!packed) return data[j * cols + p];
        const auto byte = static_cast<uint8_t>(data[(j / 2) * cols + p]);
        const int nibble = (j % 2 == 0 ? byte : byte >> 4) & 0x0F;
        return nibble >= 8 ? nibble - 16 : nibble;  // two's complement
    }
};

StoredInt4 stored_weight(const io::WeightSource& weights, const std::string& name, int64_t rows, int64_t cols) {
    const TensorView v = weights.get(name);
    const bool packed = v.shape == Shape{rows / 2, cols} && rows % 2 == 0;
    if (v.dtype != DType::kI8 || !(packed || v.shape == Shape{rows, cols})) {
        raise(ErrorCode::kInvalidModel,
              "{} is {} {}; a W4A8_DYNAMIC weight is I8 [{}, {}] (two int4 rows per byte) or [{}, {}] (one per byte)",
              weights.describe(name), dtype_name(v.dtype), v.shape.str(), rows / 2, cols, rows, cols);
    }
    return {static_cast<const int8_t*>(v.data), cols, packed};
}

}  // namespace

bool modelslim_w4a8(const Quantization& quant, const std::string& prefix) {
    if (quant.checkpoint != CheckpointQuant::kModelSlim || !quant.modelslim) return false;
    const auto it = quant.modelslim->find(prefix + ".weight");
    return it != quant.modelslim->end() && it->second == "W4A8_DYNAMIC";
}

Int4Matrix read_modelslim_w4a8(const io::WeightSource& weights, const std::string& prefix, int64_t rows, int64_t cols) {
    const std::string name = prefix + ".weight";
    const StoredInt4 q = stored_weight(weights, name, rows, cols);
    check_weight_offset_zero(weights, name);
    const int64_t gs = group_size_of(weights, prefix, rows, cols), ng = cols / gs;
    const Tensor channel = int4_float_param(weights, prefix + ".weight_scale", {rows, 1}, "weight_scale");
    const std::string second_name = prefix + ".weight_scale_second";
    const Tensor second = weights.contains(second_name)
                              ? int4_float_param(weights, second_name, {rows, ng}, "weight_scale_second")
                              : Tensor();
    Int4Matrix m = empty_int4_matrix(rows, cols, gs);
    for (int64_t j = 0; j < rows; ++j) {
        const float s = channel.as<float>()[j];
        for (int64_t g = 0; g < ng; ++g) {
            m.scale.as<float>()[j * ng + g] = second.empty() ? s : s * second.as<float>()[j * ng + g];
            m.zero.as<float>()[j * ng + g] = 8.0f;
        }
        uint8_t* codes = m.codes.as<uint8_t>() + j * (cols / 2);
        for (int64_t p = 0; p < cols; ++p) {
            const int v = q.value(j, p);
            if (v < -8 || v > 7) {
                raise(ErrorCode::kInvalidModel, "{}: value {} at [{}, {}] is outside int4's [-8, 7]",
                      weights.describe(name), v, j, p);
            }
            codes[p / 2] |= static_cast<uint8_t>((v + 8) << (4 * (p % 2)));
        }
    }
    return m;
}

}  // namespace moeserve::model
