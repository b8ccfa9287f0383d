#include "moeserve/model/formats/int4_writer.h"

#include <algorithm>
#include <random>

#include "moeserve/core/dtype.h"
#include "moeserve/core/error.h"

namespace moeserve::model {

namespace {

constexpr int kAwqNibble[8] = {0, 4, 1, 5, 2, 6, 3, 7};  // output column c of a word -> its nibble

// Little-endian int32 words with nibble k of word w settable.
struct Words {
    std::vector<uint8_t> bytes;
    explicit Words(int64_t n, uint8_t fill = 0) : bytes(static_cast<size_t>(n) * 4, fill) {}
    void set(int64_t word, int k, int v) {
        uint8_t& b = bytes[static_cast<size_t>(word * 4 + k / 2)];
        const int shift = 4 * (k & 1);
        b = static_cast<uint8_t>((b & ~(0x0F << shift)) | ((v & 0x0F) << shift));
    }
};

// Scales or zeros [rows, groups] as the [groups, rows] AWQ and GPTQ store.
std::vector<float> transposed(const Tensor& t) {
    const int64_t rows = t.dim(0), groups = t.dim(1);
    std::vector<float> out(static_cast<size_t>(rows * groups));
    for (int64_t j = 0; j < rows; ++j) {
        for (int64_t g = 0; g < groups; ++g) out[static_cast<size_t>(g * rows + j)] = t.as<float>()[j * groups + g];
    }
    return out;
}

Tensor encoded(const std::vector<float>& v, DType dtype, const Shape& shape) {
    Tensor t(dtype, shape);
    for (size_t i = 0; i < v.size(); ++i) {
        auto* h = t.as<uint16_t>() + i;
        *h = dtype == DType::kBF16 ? f32_to_bf16(v[i]) : f32_to_f16(v[i]);
    }
    return t;
}

// slot[p]: the stored column of m that multiplies input column p (p itself without an act order).
std::vector<int64_t> column_slots(const Int4Matrix& m) {
    std::vector<int64_t> slot(static_cast<size_t>(m.cols()));
    for (int64_t i = 0; i < m.cols(); ++i) slot[size_t(m.perm.empty() ? i : m.perm.as<int32_t>()[i])] = i;
    return slot;
}

// The group of each input column, as GPTQ's g_idx and compressed-tensors' weight_g_idx store it.
std::vector<int32_t> group_index(const Int4Matrix& m, const std::vector<int64_t>& slot) {
    std::vector<int32_t> g_idx(slot.size());
    for (size_t p = 0; p < slot.size(); ++p) g_idx[p] = static_cast<int32_t>(slot[p] / m.group_size);
    return g_idx;
}

std::vector<std::string> add_compressed_tensors(io::SafetensorsWriter& w, const std::string& prefix,
                                                const Int4Matrix& m, bool symmetric) {
    const int64_t rows = m.rows(), cols = m.cols(), words = (cols + 7) / 8, groups = m.scale.dim(1);
    const std::vector<int64_t> slot = column_slots(m);
    Words packed(rows * words, 0x88);  // padding columns hold q = 0, stored as 8
    for (int64_t j = 0; j < rows; ++j) {
        for (int64_t p = 0; p < cols; ++p) packed.set(j * words + p / 8, int(p % 8), m.code(j, slot[size_t(p)]));
    }
    w.add(prefix + ".weight_packed", DType::kI32, {rows, words}, packed.bytes.data());
    const std::vector<float> scale(m.scale.as<float>(), m.scale.as<float>() + rows * groups);
    w.add(prefix + ".weight_scale", encoded(scale, DType::kBF16, {rows, groups}));
    const int64_t shape[2] = {rows, cols};
    w.add(prefix + ".weight_shape", DType::kI64, {2}, shape);
    std::vector<std::string> names = {prefix + ".weight_packed", prefix + ".weight_scale", prefix + ".weight_shape"};
    if (!m.perm.empty()) {  // actorder "group"
        const std::vector<int32_t> g_idx = group_index(m, slot);
        w.add(prefix + ".weight_g_idx", DType::kI32, {cols}, g_idx.data());
        names.push_back(prefix + ".weight_g_idx");
    }
    if (!symmetric) {
        Words zp((rows + 7) / 8 * groups);
        for (int64_t j = 0; j < rows; ++j) {
            for (int64_t g = 0; g < groups; ++g)
                zp.set((j / 8) * groups + g, int(j % 8), int(m.zero.as<float>()[j * groups + g]));
        }
        w.add(prefix + ".weight_zero_point", DType::kI32, {(rows + 7) / 8, groups}, zp.bytes.data());
        names.push_back(prefix + ".weight_zero_point");
    }
    return names;
}

std::vector<std::string> add_awq_gptq(io::SafetensorsWriter& w, const std::string& prefix, const Int4Matrix& m,
                                      const Int4Config& cfg) {
    const bool awq = cfg.layout == Int4Layout::kAwq;
    const int64_t rows = m.rows(), cols = m.cols(), groups = m.scale.dim(1);
    MOESERVE_CHECK(rows % 8 == 0 && (awq || cols % 8 == 0), "{}: [{}, {}] cannot be packed 8 per word", prefix, rows,
                   cols);
    MOESERVE_CHECK(!awq || m.perm.empty(), "{}: AWQ has no act order", prefix);
    const std::vector<int64_t> slot = column_slots(m);
    Words qweight(rows * cols / 8), qzeros(groups * rows / 8);
    const int zero_offset = !awq && cfg.gptq_zero_plus_one ? 1 : 0;
    for (int64_t j = 0; j < rows; ++j) {
        const int zk = awq ? kAwqNibble[j % 8] : int(j % 8);
        for (int64_t p = 0; p < cols; ++p) {
            if (awq) {
                qweight.set(p * (rows / 8) + j / 8, zk, m.code(j, p));
            } else {
                qweight.set((p / 8) * rows + j, int(p % 8), m.code(j, slot[size_t(p)]));
            }
        }
        for (int64_t g = 0; g < groups; ++g) {
            const int z = int(m.zero.as<float>()[j * groups + g]) - zero_offset;
            MOESERVE_CHECK(z >= 0 && z <= 15, "{}: zero {} cannot be stored", prefix, z + zero_offset);
            qzeros.set(g * (rows / 8) + j / 8, zk, z);
        }
    }
    w.add(prefix + ".qweight", DType::kI32, awq ? Shape{cols, rows / 8} : Shape{cols / 8, rows}, qweight.bytes.data());
    w.add(prefix + ".qzeros", DType::kI32, {groups, rows / 8}, qzeros.bytes.data());
    w.add(prefix + ".scales", encoded(transposed(m.scale), DType::kF16, {groups, rows}));
    std::vector<std::string> names = {prefix + ".qweight", prefix + ".qzeros", prefix + ".scales"};
    if (!awq) {
        const std::vector<int32_t> g_idx = group_index(m, slot);
        w.add(prefix + ".g_idx", DType::kI32, {cols}, g_idx.data());
        names.push_back(prefix + ".g_idx");
    }
    return names;
}

}  // namespace

std::optional<Int4Config> int4_layout_for(const std::string& quantization) {
    if (quantization == "w4a16") return Int4Config{Int4Layout::kCompressedTensors, 32, true, true, false, false};
    if (quantization == "w4a16-asym") return Int4Config{Int4Layout::kCompressedTensors, 32, false, true, false, false};
    if (quantization == "awq") return Int4Config{Int4Layout::kAwq, 32, false, true, false, false};
    if (quantization == "gptq") return Int4Config{Int4Layout::kGptq, 32, true, true, false, false};
    if (quantization == "gptq-act") return Int4Config{Int4Layout::kGptq, 32, true, true, true, false};
    if (quantization == "w4a16-act") return Int4Config{Int4Layout::kCompressedTensors, 32, true, true, true, false};
    if (quantization == "w4a8") return Int4Config{Int4Layout::kCompressedTensors, 32, true, true, false, true};
    return std::nullopt;
}

DType int4_scale_dtype(const Int4Config& cfg) {
    return cfg.layout == Int4Layout::kCompressedTensors ? DType::kBF16 : DType::kF16;
}

std::vector<std::string> add_int4_tensors(io::SafetensorsWriter& writer, const std::string& prefix, const Int4Matrix& m,
                                          const Int4Config& cfg) {
    if (cfg.layout == Int4Layout::kCompressedTensors) return add_compressed_tensors(writer, prefix, m, cfg.symmetric);
    return add_awq_gptq(writer, prefix, m, cfg);
}

Int4Matrix quantize_int4_for(const float* w, int64_t rows, int64_t cols, const Int4Config& cfg, uint64_t seed) {
    if (!cfg.desc_act) return quantize_int4(w, rows, cols, cfg.group_size, cfg.symmetric, int4_scale_dtype(cfg));
    // an activation order: a seeded Fisher-Yates shuffle of the columns (mt19937 is the same
    // everywhere; std::shuffle's algorithm is not)
    std::vector<int32_t> order(static_cast<size_t>(cols));
    for (int64_t i = 0; i < cols; ++i) order[size_t(i)] = static_cast<int32_t>(i);
    std::mt19937_64 rng(seed);
    for (int64_t i = cols - 1; i > 0; --i) std::swap(order[size_t(i)], order[size_t(rng() % uint64_t(i + 1))]);
    std::vector<float> permuted(static_cast<size_t>(rows * cols));
    for (int64_t j = 0; j < rows; ++j) {
        for (int64_t i = 0; i < cols; ++i) permuted[size_t(j * cols + i)] = w[j * cols + order[size_t(i)]];
    }
    Int4Matrix m = quantize_int4(permuted.data(), rows, cols, cfg.group_size, cfg.symmetric, int4_scale_dtype(cfg));
    m.perm = Tensor(DType::kI32, {cols});
    std::copy(order.begin(), order.end(), m.perm.as<int32_t>());
    return m;
}

nlohmann::json int4_quantization_config(const Int4Config& cfg, const std::vector<std::string>& ignore) {
    if (cfg.layout == Int4Layout::kAwq) {
        return {{"quant_method", "awq"}, {"bits", 4},         {"group_size", cfg.group_size},
                {"zero_point", true},    {"version", "gemm"}, {"modules_to_not_convert", nullptr}};
    }
    if (cfg.layout == Int4Layout::kGptq) {
        return {{"quant_method", "gptq"},       {"bits", 4},
                {"group_size", cfg.group_size}, {"desc_act", cfg.desc_act},
                {"sym", cfg.symmetric},         {"checkpoint_format", "gptq"}};
    }
    return {{"quant_method", "compressed-tensors"},
            {"format", "pack-quantized"},
            {"quantization_status", "compressed"},
            {"config_groups",
             {{"group_0",
               {{"targets", {"Linear"}},
                {"input_activations", cfg.int8_activations ? nlohmann::json{{"num_bits", 8},
                                                                            {"type", "int"},
                                                                            {"symmetric", true},
                                                                            {"dynamic", true},
                                                                            {"strategy", "token"}}
                                                           : nlohmann::json()},
                {"output_activations", nullptr},
                {"weights",
                 {{"num_bits", 4},
                  {"type", "int"},
                  {"symmetric", cfg.symmetric},
                  {"strategy", "group"},
                  {"group_size", cfg.group_size},
                  {"dynamic", false},
                  {"actorder", cfg.desc_act ? nlohmann::json("group") : nlohmann::json()}}}}}}},
            {"ignore", ignore}};
}

}  // namespace moeserve::model
