// The reference fixture of a GGUF file made outside moeserve (tests/data/gguf/llama_quantize_*.gguf,
// written by llama.cpp's llama-quantize): OUT_DIR/dequantized gets its weights dequantized to F32
// with gguf_types.json, which tests/reference/qwen3_moe_ref.py --gguf-act-quant reads.
// Usage: gguf_dequantize_helper FILE.gguf OUT_DIR. Exit code 1 with the error on stderr.
#include <cstdio>
#include <filesystem>

#include "moeserve/core/error.h"
#include "moeserve/model/formats/gguf_convert.h"

int main(int argc, char** argv) {
    if (argc != 3) {
        std::fprintf(stderr, "usage: %s FILE.gguf OUT_DIR\n", argv[0]);
        return 1;
    }
    try {
        std::filesystem::create_directories(argv[2]);
        moeserve::model::write_dequantized_checkpoint(argv[1], std::filesystem::path(argv[2]) / "dequantized");
    } catch (const moeserve::Error& e) {
        std::fprintf(stderr, "%s\n", e.what());
        return 1;
    }
    return 0;
}
