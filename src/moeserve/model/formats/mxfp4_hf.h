// gpt-oss's MXFP4 expert weights (issue #35) as GGUF MXFP4 rows (GgmlType::kMXFP4, issue #27),
// which the GGUF dot products and gguf_moe_experts run in place. Only bits move: both layouts
// hold the same 4-bit e2m1 codes and the same e8m0 exponents, and
// HF's lut_e2m1[q] * 2^(e - 127) equals GGUF's kvalues[q] * 2^(e - 128) for every code and
// exponent (kvalues are the e2m1 values doubled).
//
// Hugging Face stores a weight [rows, cols] as two uint8 tensors:
//   `<name>_blocks` [..., rows, cols / 32, 16]: byte i of a 32-element block holds element 2 i in
//                   its low nibble and element 2 i + 1 in its high nibble
//   `<name>_scales` [..., rows, cols / 32]: each block's e8m0 exponent (bias 127)
// A GGUF MXFP4 row is cols / 32 blocks of 17 bytes: the exponent, then 16 bytes where byte j holds
// element j in its low nibble and element j + 16 in its high nibble (Q4_0's order).
// Depends on core (and the kernels' quantizer, for the writer's direction).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>

namespace moeserve::model {

// Bytes of one GGUF MXFP4 row of `cols` elements (cols a multiple of 32: cols / 32 * 17).
size_t mxfp4_row_bytes(int64_t cols);

// One row, unchecked: hf_blocks cols / 2 bytes, hf_scales cols / 32 bytes, dst mxfp4_row_bytes(cols)
// bytes; cols a multiple of 32. Any alignment; dst must not overlap the sources.
void mxfp4_row_from_hf(const uint8_t* hf_blocks, const uint8_t* hf_scales, int64_t cols, uint8_t* dst);

// Rows first_row, first_row + row_step, ... (`rows` of them) of an HF `_blocks` / `_scales` pair,
// whole tensors flattened to [total_rows, ...] (an expert stack [E, R, ...] is E * R rows), into
// dst as `rows` consecutive GGUF rows. row_step 2 takes gpt-oss's interleaved gate_up_proj apart:
// first_row 0 the gate rows, 1 the up rows (as llama.cpp's converter splits them).
// Checked, kInvalidModel naming `tensor`: cols a positive multiple of 32, blocks a whole number
// of rows (total_rows = blocks.size() / (cols / 2)), scales total_rows * cols / 32 bytes, the rows
// inside the tensor, dst rows * mxfp4_row_bytes(cols) bytes (kInvalidArgument for the last two).
void mxfp4_rows_from_hf(std::string_view tensor, std::span<const uint8_t> blocks, std::span<const uint8_t> scales,
                        int64_t cols, int64_t first_row, int64_t row_step, int64_t rows, std::span<uint8_t> dst);

// The writer's direction (make-model --quantization mxfp4): f32 row x of `cols` elements (a
// multiple of 32) quantized as gguf-py's MXFP4.quantize_blocks does, in Hugging Face's layout:
// hf_blocks cols / 2 bytes, hf_scales cols / 32 bytes.
void mxfp4_hf_row_from_f32(const float* x, int64_t cols, uint8_t* hf_blocks, uint8_t* hf_scales);

}  // namespace moeserve::model
