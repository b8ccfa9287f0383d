// libFuzzer target for parse_safetensors_header: any input may be rejected with moeserve::Error,
// nothing else may escape, and an accepted table must satisfy the parser's own contract.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "moeserve/core/error.h"
#include "moeserve/io/safetensors_header.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    // The first 2 bytes pick the data-section size, so offsets near the end get exercised.
    uint64_t data_size = 64;
    if (size >= 2) {
        data_size = static_cast<uint64_t>(data[0]) | (static_cast<uint64_t>(data[1]) << 8);
        data += 2;
        size -= 2;
    }
    const std::string_view header(reinterpret_cast<const char*>(data), size);
    try {
        const auto parsed = moeserve::io::parse_safetensors_header(header, data_size, "fuzz.safetensors");
        for (const auto& t : parsed.tensors) {
            const uint64_t want = static_cast<uint64_t>(t.shape.numel()) * moeserve::dtype_size(t.dtype);
            if (t.data_begin > t.data_end || t.data_end > data_size || t.nbytes() != want) std::abort();
            if (parsed.find(t.name) != &t) std::abort();
        }
    } catch (const moeserve::Error&) {
        // Rejected with a message: the expected outcome for most inputs.
    }
    return 0;
}
