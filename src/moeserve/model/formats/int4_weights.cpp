#include "moeserve/model/formats/int4_weights.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "moeserve/core/dtype.h"
#include "moeserve/core/error.h"
#include "moeserve/kernels/ops.h"
#include "moeserve/model/formats/modelslim_w4a8.h"

namespace moeserve::model {

namespace {

// AutoAWQ packs output columns 8j..8j+7 into word j in this nibble order: column c -> nibble kAwq[c].
constexpr int kAwqNibble[8] = {0, 4, 1, 5, 2, 6, 3, 7};

// The raw bytes of an I32 tensor of the given shape; Error kInvalidModel naming it otherwise.
const uint8_t* packed_words(const io::WeightSource& weights, const std::string& name, const Shape& shape,
                            const char* what) {
    if (!weights.contains(name)) {
        raise(ErrorCode::kInvalidModel, "int4 tensor '{}' is missing from {}", weights.stored_name(name),
              weights.dir().string());
    }
    const TensorView v = weights.get(name);
    if (v.dtype != DType::kI32 || !(v.shape == shape)) {
        raise(ErrorCode::kInvalidModel, "{} is {} {}; {} needs I32 {}", weights.describe(name), dtype_name(v.dtype),
              v.shape.str(), what, shape.str());
    }
    return static_cast<const uint8_t*>(v.data);
}

// Nibble k (bits 4k..4k+3) of little-endian int32 word `word`.
int nibble(const uint8_t* words, int64_t word, int k) { return (words[word * 4 + k / 2] >> (4 * (k & 1))) & 0x0F; }

}  // namespace

Tensor int4_float_param(const io::WeightSource& weights, const std::string& name, const Shape& shape,
                        const char* what) {
    if (!weights.contains(name)) {
        raise(ErrorCode::kInvalidModel, "int4 {} '{}' is missing from {}", what, weights.stored_name(name),
              weights.dir().string());
    }
    const TensorView v = weights.get(name);
    const bool is_float = v.dtype == DType::kF32 || v.dtype == DType::kBF16 || v.dtype == DType::kF16;
    if (!is_float || !(v.shape == shape)) {
        raise(ErrorCode::kInvalidModel, "{} is {} {}; the {} must be BF16, F16 or F32 {}", weights.describe(name),
              dtype_name(v.dtype), v.shape.str(), what, shape.str());
    }
    return weights.load_f32(name);
}

Int4Matrix empty_int4_matrix(int64_t rows, int64_t cols, int64_t group_size) {
    const int64_t groups = kernels::int4_groups(cols, group_size);
    Int4Matrix m{Tensor(DType::kU8, {rows, cols / 2}),
                 Tensor(DType::kF32, {rows, groups}),
                 Tensor(DType::kF32, {rows, groups}),
                 group_size,
                 Tensor(),
                 0};
    std::memset(m.codes.data(), 0, m.codes.nbytes());
    return m;
}

namespace {

void set_code(Int4Matrix& m, int64_t j, int64_t p, int code) {
    m.codes.as<uint8_t>()[j * (m.cols() / 2) + p / 2] |= static_cast<uint8_t>(code << (4 * (p & 1)));
}

// Stored column i multiplies input column order[i] (an activation order).
void set_permutation(Int4Matrix& m, const std::vector<int32_t>& order) {
    m.perm = Tensor(DType::kI32, {static_cast<int64_t>(order.size())});
    std::copy(order.begin(), order.end(), m.perm.as<int32_t>());
}

void check_weight_shape(const io::WeightSource& weights, const std::string& name, int64_t rows, int64_t cols) {
    if (!weights.contains(name)) return;
    const Tensor s = weights.load_f32(name);
    if (s.numel() != 2 || s.as<float>()[0] != static_cast<float>(rows) ||
        s.as<float>()[1] != static_cast<float>(cols)) {
        raise(ErrorCode::kInvalidModel, "{} does not hold [{}, {}], the weight's shape", weights.describe(name), rows,
              cols);
    }
}

// A g_idx [cols] (GPTQ's g_idx, compressed-tensors' weight_g_idx: the group of each input column):
// empty when it is p / group_size (or absent); else the input columns sorted by group (stable),
// which must then fill each group with group_size columns (what desc_act and actorder "group"
// write). Error kUnsupported naming the tensor otherwise.
std::vector<int32_t> activation_order(const io::WeightSource& weights, const std::string& name, int64_t cols,
                                      int64_t group_size) {
    if (!weights.contains(name)) return {};
    const TensorView v = weights.get(name);
    if (v.dtype != DType::kI32 || !(v.shape == Shape{cols})) {
        raise(ErrorCode::kInvalidModel, "{} is {} {}; a g_idx is I32 [{}]", weights.describe(name), dtype_name(v.dtype),
              v.shape.str(), cols);
    }
    std::vector<int32_t> g(static_cast<size_t>(cols));
    std::memcpy(g.data(), v.data, g.size() * 4);
    bool in_order = true;
    for (int64_t p = 0; p < cols; ++p) in_order = in_order && g[size_t(p)] == p / group_size;
    if (in_order) return {};
    std::vector<int32_t> order(static_cast<size_t>(cols));
    for (int64_t p = 0; p < cols; ++p) order[size_t(p)] = static_cast<int32_t>(p);
    std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return g[size_t(a)] < g[size_t(b)]; });
    for (int64_t i = 0; i < cols; ++i) {
        if (g[size_t(order[size_t(i)])] != i / group_size) {
            raise(ErrorCode::kUnsupported,
                  "{}: group {} does not hold {} columns; moeserve runs act order with full groups only",
                  weights.describe(name), g[size_t(order[size_t(i)])], group_size);
        }
    }
    return order;
}

Int4Matrix read_compressed_tensors(const io::WeightSource& weights, const std::string& prefix, int64_t rows,
                                   int64_t cols, int64_t group_size, bool symmetric) {
    const int64_t words = (cols + 7) / 8, groups = kernels::int4_groups(cols, group_size);
    const uint8_t* packed =
        packed_words(weights, prefix + ".weight_packed", {rows, words}, "a 4-bit [out, in] weight packed 8 per word");
    check_weight_shape(weights, prefix + ".weight_shape", rows, cols);
    // actorder "group": the matrix takes its columns in group order (input column order[i])
    const std::vector<int32_t> order = activation_order(weights, prefix + ".weight_g_idx", cols, group_size);
    Int4Matrix m = empty_int4_matrix(rows, cols, group_size);
    if (order.empty()) {
        for (int64_t r = 0; r < rows; ++r) {
            std::memcpy(m.codes.as<uint8_t>() + r * (cols / 2), packed + r * words * 4, static_cast<size_t>(cols / 2));
        }
    } else {
        set_permutation(m, order);
        for (int64_t r = 0; r < rows; ++r) {
            for (int64_t i = 0; i < cols; ++i) {
                const int64_t p = order[static_cast<size_t>(i)];
                set_code(m, r, i, nibble(packed, r * words + p / 8, int(p % 8)));
            }
        }
    }
    m.scale = int4_float_param(weights, prefix + ".weight_scale", {rows, groups}, "weight_scale");
    float* zero = m.zero.as<float>();
    if (symmetric) {
        std::fill(zero, zero + rows * groups, 8.0f);  // stored q + 8, w = scale * q
        return m;
    }
    const uint8_t* zp = packed_words(weights, prefix + ".weight_zero_point", {(rows + 7) / 8, groups},
                                     "an asymmetric weight_zero_point packed 8 rows per word");
    for (int64_t r = 0; r < rows; ++r) {
        for (int64_t g = 0; g < groups; ++g)
            zero[r * groups + g] = static_cast<float>(nibble(zp, (r / 8) * groups + g, int(r % 8)));
    }
    return m;
}

// AWQ and GPTQ: qweight/qzeros/scales with [groups, out] scales. awq: AWQ's layout, else GPTQ's.
Int4Matrix read_awq_gptq(const io::WeightSource& weights, const std::string& prefix, int64_t rows, int64_t cols,
                         int64_t group_size, const Int4Config& cfg) {
    const bool awq = cfg.layout == Int4Layout::kAwq;
    const int64_t groups = kernels::int4_groups(cols, group_size);
    if (rows % 8 != 0 || (!awq && cols % 8 != 0)) {
        raise(ErrorCode::kInvalidModel, "'{}.qweight': a [{}, {}] weight cannot be packed 8 per int32 word", prefix,
              rows, cols);
    }
    const uint8_t* qw =
        awq ? packed_words(weights, prefix + ".qweight", {cols, rows / 8}, "AWQ's [in, out / 8] layout")
            : packed_words(weights, prefix + ".qweight", {cols / 8, rows}, "GPTQ's [in / 8, out] layout");
    const uint8_t* qz = packed_words(weights, prefix + ".qzeros", {groups, rows / 8}, "[groups, out / 8] zeros");
    const Tensor scales = int4_float_param(weights, prefix + ".scales", {groups, rows}, "scales");
    // GPTQ desc_act: the stored matrix takes its columns in group order (input column order[i])
    const std::vector<int32_t> order =
        awq ? std::vector<int32_t>() : activation_order(weights, prefix + ".g_idx", cols, group_size);
    Int4Matrix m = empty_int4_matrix(rows, cols, group_size);
    if (!order.empty()) set_permutation(m, order);
    const float zero_offset = !awq && cfg.gptq_zero_plus_one ? 1.0f : 0.0f;
    for (int64_t j = 0; j < rows; ++j) {
        const int zk = awq ? kAwqNibble[j % 8] : int(j % 8);
        for (int64_t i = 0; i < cols; ++i) {
            const int64_t p = order.empty() ? i : order[static_cast<size_t>(i)];
            set_code(m, j, i,
                     awq ? nibble(qw, p * (rows / 8) + j / 8, zk) : nibble(qw, (p / 8) * rows + j, int(p % 8)));
        }
        for (int64_t g = 0; g < groups; ++g) {
            m.zero.as<float>()[j * groups + g] =
                static_cast<float>(nibble(qz, g * (rows / 8) + j / 8, zk)) + zero_offset;
            m.scale.as<float>()[j * groups + g] = scales.as<float>()[g * rows + j];
        }
    }
    return m;
}

}  // namespace

bool stored_as_int4(const io::WeightSource& weights, const std::string& prefix, const Quantization& quant) {
    if (quant.checkpoint == CheckpointQuant::kModelSlim) return modelslim_w4a8(quant, prefix);
    if (quant.checkpoint != CheckpointQuant::kInt4) return false;
    return weights.contains(
        prefix + (quant.int4_config.layout == Int4Layout::kCompressedTensors ? ".weight_packed" : ".qweight"));
}

Int4Matrix load_int4_matrix(const io::WeightSource& weights, const std::string& prefix, int64_t rows, int64_t cols,
                            const Quantization& quant) {
    if (cols % 2 != 0) {
        raise(ErrorCode::kInvalidModel, "'{}.weight' has {} input columns; int4 weights need an even number", prefix,
              cols);
    }
    const Int4Config& cfg = quant.int4_config;
    const int64_t group_size = cfg.group_size == 0 ? cols : cfg.group_size;
    if (quant.checkpoint != CheckpointQuant::kModelSlim && !stored_as_int4(weights, prefix, quant)) {
        const Tensor f = load_weight_f32(weights, prefix, rows, cols, quant);
        return quantize_int4(f.as<float>(), rows, cols, group_size, cfg.symmetric);
    }
    Int4Matrix m;
    std::string stored;  // the tensor the codes came from
    if (quant.checkpoint == CheckpointQuant::kModelSlim) {
        if (!modelslim_w4a8(quant, prefix)) {
            raise(ErrorCode::kInvalidModel,
                  "{}: '{}.weight' is not W4A8_DYNAMIC but the first expert of its layer is; a layer's experts must "
                  "share one type",
                  quant.description_file, prefix);
        }
        m = read_modelslim_w4a8(weights, prefix, rows, cols);
        stored = prefix + ".weight";
    } else if (cfg.layout == Int4Layout::kCompressedTensors) {
        m = read_compressed_tensors(weights, prefix, rows, cols, group_size, cfg.symmetric);
        stored = prefix + ".weight_packed";
    } else {
        m = read_awq_gptq(weights, prefix, rows, cols, group_size, cfg);
        stored = prefix + ".qweight";
    }
    // the layer keeps its own copy: the file's pages (one value a byte for some ModelSlim savers) leave
    // the resident set
    weights.drop_resident(stored);
    return m;
}

Int4Matrix quantize_int4(const float* w, int64_t rows, int64_t cols, int64_t group_size, bool symmetric,
                         DType scale_dtype) {
    if (group_size == 0) group_size = cols;
    Int4Matrix m = empty_int4_matrix(rows, cols, group_size);
    const int64_t groups = kernels::int4_groups(cols, group_size);
    for (int64_t j = 0; j < rows; ++j) {
        for (int64_t g = 0; g < groups; ++g) {
            const int64_t p0 = g * group_size, p1 = std::min(cols, p0 + group_size);
            float lo = 0.0f, hi = 0.0f;
            for (int64_t p = p0; p < p1; ++p) {
                lo = std::min(lo, w[j * cols + p]);
                hi = std::max(hi, w[j * cols + p]);
            }
            float scale = symmetric ? std::max(hi, -lo) / 7.0f : (hi - lo) / 15.0f;
            if (scale_dtype == DType::kBF16) scale = bf16_to_f32(f32_to_bf16(scale));
            if (scale_dtype == DType::kF16) scale = f16_to_f32(f32_to_f16(scale));
            if (!(scale > 0.0f)) scale = 1.0f;  // an all-zero group: any scale, codes = zero
            const float zero = symmetric ? 8.0f : std::clamp(std::nearbyint(-lo / scale), 0.0f, 15.0f);
            m.scale.as<float>()[j * groups + g] = scale;
            m.zero.as<float>()[j * groups + g] = zero;
            for (int64_t p = p0; p < p1; ++p) {
                const float q = std::clamp(std::nearbyint(w[j * cols + p] / scale) + zero, 0.0f, 15.0f);
                set_code(m, j, p, static_cast<int>(q));
            }
        }
    }
    return m;
}

Tensor dequantize_int4(const Int4Matrix& m) {
    const int64_t cols = m.cols();
    Tensor f(DType::kF32, {m.rows(), m.in_cols()});
    if (m.in_cols() != cols) std::memset(f.data(), 0, f.nbytes());
    const kernels::Int4Weights v = m.view();
    std::vector<float> row(static_cast<size_t>(cols));
    for (int64_t j = 0; j < m.rows(); ++j) {
        float* out = f.as<float>() + j * m.in_cols();
        if (m.perm.empty()) {
            kernels::ops().dequantize_int4_row(v, j, out);
            continue;
        }
        kernels::ops().dequantize_int4_row(v, j, row.data());
        for (int64_t i = 0; i < cols; ++i) {
            const int32_t input = m.perm.as<int32_t>()[i];
            if (input >= 0) out[input] = row[size_t(i)];
        }
    }
    return f;
}

void gather_columns(const Int4Matrix& m, const float* x, int64_t rows, float* out) {
    const int64_t k = m.cols(), kx = m.in_cols();
    const int32_t* perm = m.perm.as<const int32_t>();
    for (int64_t r = 0; r < rows; ++r) {
        for (int64_t i = 0; i < k; ++i) out[r * k + i] = perm[i] >= 0 ? x[r * kx + perm[i]] : 0.0f;
    }
}

namespace {

// Rows [row0, +rows) and stored columns [col0, +cols) of m, with no act order; int4_rectangle's
// group boundary rule.
Int4Matrix stored_rectangle(const Int4Matrix& m, int64_t row0, int64_t rows, int64_t col0, int64_t cols,
                            const std::string& name) {
    const int64_t groups = kernels::int4_groups(m.cols(), m.group_size);
    // one group per row (per-channel): any column slice is one group of its own width
    const int64_t gs = groups == 1 ? std::max<int64_t>(cols, 2) : m.group_size;
    if (groups > 1 && (col0 % gs != 0 || (cols % gs != 0 && col0 + cols != m.cols()))) {
        raise(ErrorCode::kUnsupported,
              "'{}': a tensor-parallel slice of columns [{}, {}) splits its int4 groups of {}; use a TP size that "
              "divides the groups",
              name, col0, col0 + cols, gs);
    }
    const int64_t g0 = groups == 1 ? 0 : col0 / gs, ng = kernels::int4_groups(cols, gs);
    Int4Matrix r = empty_int4_matrix(rows, cols, gs);
    for (int64_t j = 0; j < rows; ++j) {
        std::memcpy(r.codes.as<uint8_t>() + j * (cols / 2),
                    m.codes.as<uint8_t>() + (row0 + j) * (m.cols() / 2) + col0 / 2, static_cast<size_t>(cols / 2));
        std::memcpy(r.scale.as<float>() + j * ng, m.scale.as<float>() + (row0 + j) * groups + g0, size_t(ng) * 4);
        std::memcpy(r.zero.as<float>() + j * ng, m.zero.as<float>() + (row0 + j) * groups + g0, size_t(ng) * 4);
    }
    return r;
}

// The group width act_order_columns pads to: 32, 64 or a multiple of 128 columns (the widths
// the int4 and W4A8 tiles take whole), at least `fullest`.
int64_t padded_group_width(int64_t fullest) {
    if (fullest <= 32) return 32;
    if (fullest <= 64) return 64;
    return (fullest + 127) / 128 * 128;
}

}  // namespace

Int4Matrix int4_rectangle(const Int4Matrix& m, int64_t row0, int64_t rows, int64_t col0, int64_t cols,
                          const std::string& name) {
    if (!m.perm.empty() && (col0 != 0 || cols != m.cols())) return act_order_columns(m, row0, rows, col0, cols);
    Int4Matrix r = stored_rectangle(m, row0, rows, col0, cols, name);
    if (!m.perm.empty()) {
        r.perm = Tensor(DType::kI32, {cols});
        std::memcpy(r.perm.data(), m.perm.data(), m.perm.nbytes());
    }
    return r;
}

Int4Matrix act_order_columns(const Int4Matrix& m, int64_t row0, int64_t rows, int64_t col0, int64_t cols) {
    const int64_t gs = m.group_size, groups = kernels::int4_groups(m.cols(), gs);
    const int32_t* perm = m.perm.as<const int32_t>();
    std::vector<std::vector<int64_t>> kept(static_cast<size_t>(groups));  // stored columns per group
    for (int64_t i = 0; i < m.cols(); ++i) {
        if (perm[i] >= col0 && perm[i] < col0 + cols) kept[static_cast<size_t>(i / gs)].push_back(i);
    }
    std::vector<int64_t> used;  // groups with a kept column
    size_t fullest = 0;
    for (int64_t g = 0; g < groups; ++g) {
        if (kept[size_t(g)].empty()) continue;
        used.push_back(g);
        fullest = std::max(fullest, kept[size_t(g)].size());
    }
    const int64_t width = padded_group_width(static_cast<int64_t>(fullest)), ng = static_cast<int64_t>(used.size());
    Int4Matrix r = empty_int4_matrix(rows, ng * width, width);
    r.perm = Tensor(DType::kI32, {ng * width});
    std::fill_n(r.perm.as<int32_t>(), ng * width, -1);
    r.input_cols = cols;
    for (int64_t a = 0; a < ng; ++a) {
        const int64_t g = used[size_t(a)];
        const std::vector<int64_t>& columns = kept[size_t(g)];
        for (size_t t = 0; t < columns.size(); ++t) {
            r.perm.as<int32_t>()[a * width + int64_t(t)] = static_cast<int32_t>(perm[columns[t]] - col0);
        }
        for (int64_t j = 0; j < rows; ++j) {
            for (size_t t = 0; t < columns.size(); ++t)
                set_code(r, j, a * width + int64_t(t), m.code(row0 + j, columns[t]));
            r.scale.as<float>()[j * ng + a] = m.scale.as<float>()[(row0 + j) * groups + g];
            r.zero.as<float>()[j * ng + a] = m.zero.as<float>()[(row0 + j) * groups + g];
        }
    }
    return r;
}

Int4Matrix int4_stored_columns(const Int4Matrix& m, int64_t col0, int64_t cols, const std::string& name,
                               std::vector<int32_t>& inputs) {
    inputs.resize(static_cast<size_t>(cols));
    for (int64_t i = 0; i < cols; ++i) {
        inputs[size_t(i)] = m.perm.empty() ? static_cast<int32_t>(col0 + i) : m.perm.as<const int32_t>()[col0 + i];
    }
    return stored_rectangle(m, 0, m.rows(), col0, cols, name);
}

Int4Matrix int4_rows(const Int4Matrix& m, const std::vector<int32_t>& rows) {
    const int64_t n = static_cast<int64_t>(rows.size()), ng = m.scale.dim(1), row_bytes = m.cols() / 2;
    Int4Matrix r = empty_int4_matrix(n, m.cols(), m.group_size);
    for (int64_t j = 0; j < n; ++j) {
        const int64_t src = rows[size_t(j)];
        std::memcpy(r.codes.as<uint8_t>() + j * row_bytes, m.codes.as<const uint8_t>() + src * row_bytes,
                    static_cast<size_t>(row_bytes));
        std::memcpy(r.scale.as<float>() + j * ng, m.scale.as<const float>() + src * ng, size_t(ng) * 4);
        std::memcpy(r.zero.as<float>() + j * ng, m.zero.as<const float>() + src * ng, size_t(ng) * 4);
    }
    if (!m.perm.empty()) {
        r.perm = Tensor(DType::kI32, {m.cols()});
        std::memcpy(r.perm.data(), m.perm.data(), m.perm.nbytes());
    }
    return r;
}

Int4Matrix load_int4_rectangle(const io::WeightSource& weights, const std::string& prefix, int64_t full_rows,
                               int64_t full_cols, int64_t row0, int64_t rows, int64_t col0, int64_t cols,
                               const Quantization& quant) {
    if (stored_as_int4(weights, prefix, quant)) {
        return int4_rectangle(load_int4_matrix(weights, prefix, full_rows, full_cols, quant), row0, rows, col0, cols,
                              prefix + ".weight");
    }
    const Tensor f = load_weight_f32(weights, prefix, full_rows, full_cols, quant);
    std::vector<float> rect(static_cast<size_t>(rows * cols));
    for (int64_t r = 0; r < rows; ++r) {
        std::memcpy(rect.data() + r * cols, f.as<float>() + (row0 + r) * full_cols + col0,
                    static_cast<size_t>(cols) * 4);
    }
    if (cols % 2 != 0) {
        raise(ErrorCode::kInvalidModel, "'{}.weight': a slice of {} columns; int4 weights need an even number", prefix,
              cols);
    }
    const Int4Config& cfg = quant.int4_config;
    return quantize_int4(rect.data(), rows, cols, cfg.group_size == 0 ? cols : cfg.group_size, cfg.symmetric);
}

Tensor load_weight_f32(const io::WeightSource& weights, const std::string& prefix, int64_t rows, int64_t cols,
                       const Quantization& quant) {
    if (stored_as_int4(weights, prefix, quant))
        return dequantize_int4(load_int4_matrix(weights, prefix, rows, cols, quant));
    const std::string name = prefix + ".weight";
    const TensorView v = weights.get(name);
    if (!(v.shape == Shape{rows, cols})) {
        raise(ErrorCode::kInvalidModel, "{} has shape {}; expected [{}, {}]", weights.describe(name), v.shape.str(),
              rows, cols);
    }
    return load_dequantized_f32(weights, name, quant.block_rows, quant.block_cols);
}

}  // namespace moeserve::model
