// Helpers for the io tests: raw safetensors bytes built by hand, and error assertions.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include "moeserve/core/error.h"

namespace moeserve::io::test {

// The 8-byte little-endian length prefix.
inline std::string le64(uint64_t n) {
    std::string s(8, '\0');
    for (int i = 0; i < 8; ++i) s[static_cast<size_t>(i)] = static_cast<char>((n >> (8 * i)) & 0xff);
    return s;
}

// A safetensors file's bytes: length prefix, `header` verbatim, `data`.
inline std::string raw_safetensors(const std::string& header, const std::string& data = "") {
    return le64(header.size()) + header + data;
}

inline void write_bytes(const std::filesystem::path& path, const std::string& bytes) {
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

inline std::string read_bytes(const std::filesystem::path& path) {
    std::ifstream in(path, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// Runs `fn`, expects a moeserve::Error with `code` whose message contains every `parts` entry.
inline void expect_error(const std::function<void()>& fn, ErrorCode code, const std::vector<std::string>& parts) {
    try {
        fn();
    } catch (const Error& e) {
        EXPECT_EQ(error_code_name(e.code()), std::string(error_code_name(code))) << e.what();
        for (const std::string& p : parts) {
            EXPECT_NE(std::string(e.what()).find(p), std::string::npos) << "message lacks '" << p << "': " << e.what();
        }
        return;
    }
    ADD_FAILURE() << "no moeserve::Error thrown";
}

}  // namespace moeserve::io::test
