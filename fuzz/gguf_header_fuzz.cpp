// libFuzzer target for parse_gguf_header: the input is a whole GGUF file. Any input may be
// rejected with moeserve::Error, nothing else may escape, and an accepted header must satisfy
// the parser's own contract (tensors inside the file, aligned, sizes that match their type).
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <span>

#include "moeserve/core/error.h"
#include "moeserve/io/gguf_header.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    try {
        const auto h = moeserve::io::parse_gguf_header(std::span<const uint8_t>(data, size), "fuzz.gguf");
        if (h.alignment == 0 || (h.alignment & (h.alignment - 1)) != 0 || h.data_offset % h.alignment != 0) {
            std::abort();
        }
        for (const auto& t : h.tensors) {
            const auto want = moeserve::ggml_nbytes(t.type, static_cast<uint64_t>(t.numel()));
            if (!want || *want != t.nbytes || t.offset % h.alignment != 0) std::abort();
            if (h.data_offset + t.offset + t.nbytes > size) std::abort();
            if (h.find_tensor(t.name) != &t) std::abort();
        }
        for (const auto& kv : h.metadata) {
            if (h.find(kv.key) != &kv.value) std::abort();
            (void)kv.value.brief();
        }
    } catch (const moeserve::Error&) {
        // Rejected with a message: the expected outcome for most inputs.
    }
    return 0;
}
