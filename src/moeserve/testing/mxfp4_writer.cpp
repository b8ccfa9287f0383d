#include "moeserve/testing/mxfp4_writer.h"

#include "moeserve/core/dtype.h"
#include "moeserve/core/error.h"
#include "moeserve/core/ggml_type.h"
#include "moeserve/kernels/ops.h"

namespace moeserve::testing {

namespace {

bool ends_with(const std::string& s, const std::string& suffix) {
    return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// One GGUF MXFP4 block (the exponent, then element j in byte j's low nibble and j + 16 in its
// high one) as Hugging Face's: its scale, and element 2i in byte i's low nibble, 2i + 1 high.
void hf_block_from_gguf(const uint8_t* gguf, uint8_t* blocks, uint8_t* scale) {
    *scale = gguf[0];
    const auto element = [&](int j) { return j < 16 ? gguf[1 + j] & 0x0F : gguf[1 + j - 16] >> 4; };
    for (int i = 0; i < 16; ++i) blocks[i] = static_cast<uint8_t>(element(2 * i) | (element(2 * i + 1) << 4));
}

}  // namespace

bool is_mxfp4_expert_tensor(const std::string& name) {
    return ends_with(name, ".mlp.experts.gate_up_proj") || ends_with(name, ".mlp.experts.down_proj");
}

std::vector<std::string> add_mxfp4_expert_tensor(io::SafetensorsWriter& writer, const std::string& name,
                                                 const Tensor& t) {
    const int64_t experts = t.dim(0), in = t.dim(1), out = t.dim(2);
    if (in % 32 != 0) {
        raise(ErrorCode::kInvalidArgument, "{}: {} input columns are not whole 32-element MXFP4 blocks", name, in);
    }
    const int64_t nb = in / 32;
    Tensor blocks(DType::kU8, {experts, out, nb, 16});
    Tensor scales(DType::kU8, {experts, out, nb});
    std::vector<float> row(static_cast<size_t>(in));
    std::vector<uint8_t> gguf(static_cast<size_t>(nb * 17));
    for (int64_t e = 0; e < experts; ++e) {
        for (int64_t r = 0; r < out; ++r) {  // output row r is input-major column r
            for (int64_t c = 0; c < in; ++c) row[size_t(c)] = bf16_to_f32(t.as<uint16_t>()[(e * in + c) * out + r]);
            kernels::ops().quantize_gguf(GgmlType::kMXFP4, row.data(), gguf.data(), in);
            const int64_t first = (e * out + r) * nb;
            for (int64_t b = 0; b < nb; ++b) {
                hf_block_from_gguf(gguf.data() + b * 17, blocks.as<uint8_t>() + (first + b) * 16,
                                   scales.as<uint8_t>() + first + b);
            }
        }
    }
    writer.add(name + "_blocks", std::move(blocks));
    writer.add(name + "_scales", std::move(scales));
    return {name + "_blocks", name + "_scales"};
}

}  // namespace moeserve::testing
