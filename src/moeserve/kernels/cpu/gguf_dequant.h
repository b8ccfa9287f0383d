// Dequantization of GGUF tensors to f32, bit-exact with llama.cpp's gguf-py (`gguf.quants`,
// numpy float32 arithmetic, no fused multiply-add): checked against its output in
// tests/kernels/gguf_dequant_test.cpp (moeserve's own kF8E4M3x128, which gguf-py does not know:
// d * e4m3(q) in f32, as the safetensors loader dequantizes FP8). Scalar code; a layer's weights are dequantized only
// for references and for tensors that stay float. Depends on core only.
#pragma once

#include <cstdint>

#include "moeserve/core/ggml_type.h"

namespace moeserve::kernels::cpu {

// src: n / block_size blocks of `type` (any address) -> dst f32 [n]. n must be a multiple of
// the type's block size and `type` supported (ggml_traits(type).supported): both checked, a
// violation is a bug (the GGUF reader refuses such tensors first). Single-threaded.
void dequantize_gguf(GgmlType type, const void* src, float* dst, int64_t n);

}  // namespace moeserve::kernels::cpu
