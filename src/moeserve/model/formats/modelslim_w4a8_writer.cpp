#include "moeserve/model/formats/modelslim_w4a8_writer.h"

#include <algorithm>
#include <cmath>

namespace moeserve::model {

namespace {

// The per-row and per-group scales of the two-stage quantization, and the int4 values.
struct W4a8Quantized {
    std::vector<float> channel, second;  // [rows], [rows, groups] (empty per row)
    std::vector<int8_t> q;               // [rows, cols], in [-8, 7]
};

W4a8Quantized quantize(const float* w, int64_t rows, int64_t cols, int64_t group_size) {
    const int64_t gs = group_size == 0 ? cols : group_size, ng = (cols + gs - 1) / gs;
    W4a8Quantized out;
    out.channel.resize(size_t(rows));
    if (group_size != 0) out.second.resize(size_t(rows * ng));
    out.q.resize(size_t(rows * cols));
    for (int64_t j = 0; j < rows; ++j) {
        const float* row = w + j * cols;
        float amax = 0.0f;
        for (int64_t p = 0; p < cols; ++p) amax = std::max(amax, std::fabs(row[p]));
        if (!(amax > 0.0f)) amax = 1.0f;  // an all-zero row: any scale
        out.channel[size_t(j)] = group_size == 0 ? amax / 7.0f : amax / 127.0f;
        for (int64_t g = 0; g < ng; ++g) {
            const int64_t p0 = g * gs, p1 = std::min(cols, p0 + gs);
            float scale = out.channel[size_t(j)];
            if (group_size != 0) {
                float gmax = 0.0f;
                for (int64_t p = p0; p < p1; ++p) gmax = std::max(gmax, std::fabs(row[p] / scale));
                const float second = gmax > 0.0f ? gmax / 7.0f : 1.0f;
                out.second[size_t(j * ng + g)] = second;
                scale *= second;  // the f32 product moeserve's reader forms
            }
            for (int64_t p = p0; p < p1; ++p) {
                out.q[size_t(j * cols + p)] =
                    static_cast<int8_t>(std::clamp(std::nearbyint(row[p] / scale), -8.0f, 7.0f));
            }
        }
    }
    return out;
}

}  // namespace

std::vector<std::string> add_modelslim_w4a8(io::SafetensorsWriter& writer, const std::string& prefix, const float* w,
                                            int64_t rows, int64_t cols, const ModelSlimW4a8Layout& layout,
                                            nlohmann::json& desc) {
    const W4a8Quantized m = quantize(w, rows, cols, layout.group_size);
    const int64_t ng = layout.group_size == 0 ? 1 : (cols + layout.group_size - 1) / layout.group_size;
    std::vector<std::string> names;
    auto add = [&](const std::string& suffix, DType dtype, const Shape& shape, const void* data) {
        writer.add(prefix + suffix, dtype, shape, data);
        names.push_back(prefix + suffix);
    };
    if (layout.packed && rows % 2 == 0) {
        std::vector<int8_t> packed(size_t(rows / 2 * cols));
        for (int64_t i = 0; i < rows / 2; ++i) {
            for (int64_t p = 0; p < cols; ++p) {
                const auto lo = static_cast<uint8_t>(m.q[size_t(2 * i * cols + p)] & 0x0F);
                const auto hi = static_cast<uint8_t>(m.q[size_t((2 * i + 1) * cols + p)] & 0x0F);
                packed[size_t(i * cols + p)] = static_cast<int8_t>(lo | (hi << 4));
            }
        }
        add(".weight", DType::kI8, {rows / 2, cols}, packed.data());
    } else {
        add(".weight", DType::kI8, {rows, cols}, m.q.data());
    }
    const std::vector<float> zeros(size_t(rows * ng), 0.0f);
    add(".weight_scale", DType::kF32, {rows, 1}, m.channel.data());
    add(".weight_offset", DType::kF32, {rows, 1}, zeros.data());
    if (layout.group_size != 0) {
        add(".weight_scale_second", DType::kF32, {rows, ng}, m.second.data());
        add(".weight_offset_second", DType::kF32, {rows, ng}, zeros.data());
    }
    std::vector<float> scale_bias(size_t(rows), 0.0f);
    for (int64_t j = 0; j < rows; ++j) {
        for (int64_t p = 0; p < cols; ++p) {
            const float s = layout.group_size == 0
                                ? m.channel[size_t(j)]
                                : m.channel[size_t(j)] * m.second[size_t(j * ng + p / layout.group_size)];
            scale_bias[size_t(j)] += 8.0f * s * m.q[size_t(j * cols + p)];
        }
    }
    add(".scale_bias", DType::kF32, {rows, 1}, scale_bias.data());
    for (const auto& n : names) desc[n] = "W4A8_DYNAMIC";
    return names;
}

}  // namespace moeserve::model
