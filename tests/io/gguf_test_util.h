// Helpers for the GGUF tests: raw GGUF bytes built field by field (for files the writer refuses
// to make), and the check that an error is one line naming what it should.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "io/io_test_util.h"
#include "moeserve/io/gguf_header.h"

namespace moeserve::io::test {

// Appends little-endian fields: GgufBytes().magic().u32(3).u64(0).u64(1).str("key")...
struct GgufBytes {
    std::string s;

    GgufBytes& raw(std::string_view v) {
        s.append(v);
        return *this;
    }
    template <typename T>
    GgufBytes& put(T v) {
        char b[sizeof(T)];
        std::memcpy(b, &v, sizeof(T));
        s.append(b, sizeof(T));
        return *this;
    }
    GgufBytes& u8(uint8_t v) { return put(v); }
    GgufBytes& u32(uint32_t v) { return put(v); }
    GgufBytes& u64(uint64_t v) { return put(v); }
    GgufBytes& str(std::string_view v) { return u64(v.size()).raw(v); }
    // "GGUF", version, tensor and key counts.
    GgufBytes& header(uint64_t n_tensors, uint64_t n_kv, uint32_t version = 3) {
        return raw("GGUF").u32(version).u64(n_tensors).u64(n_kv);
    }
    // A tensor entry: name, dims in ggml order (innermost first), type, offset.
    GgufBytes& tensor(std::string_view name, std::vector<uint64_t> ne, uint32_t type, uint64_t offset) {
        str(name).u32(static_cast<uint32_t>(ne.size()));
        for (uint64_t d : ne) u64(d);
        return u32(type).u64(offset);
    }
    // Zero bytes up to the next multiple of `alignment`.
    GgufBytes& pad(size_t alignment = 32) {
        s.append((alignment - s.size() % alignment) % alignment, '\0');
        return *this;
    }
    GgufBytes& zeros(size_t n) {
        s.append(n, '\0');
        return *this;
    }
};

inline std::span<const uint8_t> as_span(const std::string& s) {
    return {reinterpret_cast<const uint8_t*>(s.data()), s.size()};
}

// Runs fn, expects an Error with `code`, one line, containing every part.
inline void expect_one_line_error(const std::function<void()>& fn, ErrorCode code,
                                  const std::vector<std::string>& parts) {
    expect_error(fn, code, parts);
    try {
        fn();
    } catch (const Error& e) {
        EXPECT_EQ(std::string(e.what()).find('\n'), std::string::npos) << e.what();
    }
}

}  // namespace moeserve::io::test
