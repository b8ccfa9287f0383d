#include "moeserve/model/formats/mxfp4_hf.h"

#include <vector>

#include "moeserve/core/error.h"
#include "moeserve/core/ggml_type.h"
#include "moeserve/kernels/ops.h"

namespace moeserve::model {
namespace {

constexpr int64_t kBlock = 32;          // elements per MXFP4 block
constexpr size_t kHfBlockBytes = 16;    // an HF block's nibbles
constexpr size_t kGgufBlockBytes = 17;  // the exponent, then the nibbles

// Element k (0-31) of an HF block: byte k / 2, low nibble for even k.
inline uint8_t hf_code(const uint8_t* block, int k) { return (block[k / 2] >> (4 * (k % 2))) & 0xF; }

}  // namespace

size_t mxfp4_row_bytes(int64_t cols) { return static_cast<size_t>(cols / kBlock) * kGgufBlockBytes; }

void mxfp4_row_from_hf(const uint8_t* hf_blocks, const uint8_t* hf_scales, int64_t cols, uint8_t* dst) {
    for (int64_t b = 0; b < cols / kBlock; ++b) {
        const uint8_t* src = hf_blocks + static_cast<size_t>(b) * kHfBlockBytes;
        uint8_t* out = dst + static_cast<size_t>(b) * kGgufBlockBytes;
        out[0] = hf_scales[b];
        for (int j = 0; j < 16; ++j) out[1 + j] = static_cast<uint8_t>(hf_code(src, j) | (hf_code(src, j + 16) << 4));
    }
}

void mxfp4_rows_from_hf(std::string_view tensor, std::span<const uint8_t> blocks, std::span<const uint8_t> scales,
                        int64_t cols, int64_t first_row, int64_t row_step, int64_t rows, std::span<uint8_t> dst) {
    if (cols <= 0 || cols % kBlock != 0) {
        raise(ErrorCode::kInvalidModel, "MXFP4 tensor '{}': rows of {} elements, expected a positive multiple of 32",
              tensor, cols);
    }
    const auto hf_row = static_cast<size_t>(cols / 2);
    const auto scale_row = static_cast<size_t>(cols / kBlock);
    if (blocks.size() % hf_row != 0) {
        raise(ErrorCode::kInvalidModel, "MXFP4 tensor '{}': its _blocks hold {} bytes, not whole rows of {} bytes",
              tensor, blocks.size(), hf_row);
    }
    const size_t total_rows = blocks.size() / hf_row;
    if (scales.size() != total_rows * scale_row) {
        raise(ErrorCode::kInvalidModel, "MXFP4 tensor '{}': its _scales hold {} bytes, expected {} ({} rows of {})",
              tensor, scales.size(), total_rows * scale_row, total_rows, scale_row);
    }
    int64_t last = 0;  // the last source row, if it fits in 64 bits
    const bool overflows = rows > 0 && (__builtin_mul_overflow(rows - 1, row_step, &last) ||
                                        __builtin_add_overflow(last, first_row, &last));
    if (rows < 0 || first_row < 0 || row_step < 1 || overflows ||
        (rows > 0 && static_cast<size_t>(last) >= total_rows)) {
        raise(ErrorCode::kInvalidArgument,
              "MXFP4 tensor '{}': rows {} + {} x step {} are outside its {} rows of {} elements", tensor, first_row,
              rows, row_step, total_rows, cols);
    }
    const size_t out_row = mxfp4_row_bytes(cols);
    if (dst.size() != static_cast<size_t>(rows) * out_row) {
        raise(ErrorCode::kInvalidArgument, "MXFP4 tensor '{}': {} rows need {} bytes, the destination has {}", tensor,
              rows, static_cast<size_t>(rows) * out_row, dst.size());
    }
    for (int64_t r = 0; r < rows; ++r) {
        const auto src = static_cast<size_t>(first_row + r * row_step);
        mxfp4_row_from_hf(blocks.data() + src * hf_row, scales.data() + src * scale_row, cols,
                          dst.data() + static_cast<size_t>(r) * out_row);
    }
}

void mxfp4_hf_row_from_f32(const float* x, int64_t cols, uint8_t* hf_blocks, uint8_t* hf_scales) {
    const int64_t nb = cols / 32;
    std::vector<uint8_t> gguf(mxfp4_row_bytes(cols));
    kernels::ops().quantize_gguf(GgmlType::kMXFP4, x, gguf.data(), cols);
    for (int64_t b = 0; b < nb; ++b) {
        // GGUF's block: the exponent, then element j in byte j's low nibble and j + 16 in its high
        // one; Hugging Face's: element 2i in byte i's low nibble, 2i + 1 in its high one
        const uint8_t* block = gguf.data() + b * 17;
        hf_scales[b] = block[0];
        const auto element = [&](int j) { return j < 16 ? block[1 + j] & 0x0F : block[1 + j - 16] >> 4; };
        for (int i = 0; i < 16; ++i) {
            hf_blocks[b * 16 + i] = static_cast<uint8_t>(element(2 * i) | (element(2 * i + 1) << 4));
        }
    }
}

}  // namespace moeserve::model
