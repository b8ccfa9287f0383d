// Quantization of f32 rows into GGUF blocks: for writing GGUF files (`moeserve make-model`,
// tests) and for the activations of the quantized dot products (Q8_0, Q8_K, bit-exact with
// llama.cpp's reference quantize_row_q8_0 / quantize_row_q8_K; MXFP4 byte for byte as gguf-py's
// MXFP4.quantize_blocks, which llama.cpp's converter uses). The other weight quantizers choose
// their scales more simply than llama-quantize does: the blocks are valid and round-trip within
// the type's step, but are not the blocks llama-quantize would write. Depends on core only.
#pragma once

#include <cstdint>

#include "moeserve/core/ggml_type.h"

namespace moeserve::kernels::cpu {

// x f32 [n] -> n / block_size blocks of `type` at dst. `type` is any supported type
// (ggml_traits(type).supported); n a multiple of its block size (both checked). Finite inputs
// only (an inf or NaN makes the block's scales meaningless). Single-threaded.
void quantize_gguf(GgmlType type, const float* x, void* dst, int64_t n);

}  // namespace moeserve::kernels::cpu
