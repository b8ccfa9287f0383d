// Helpers shared by the model tests: token-id lists from CMake, reference logits files, the
// error measures the tests state their bounds in, and whole-sequence runs of a model.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <span>
#include <vector>

#include "moeserve/testing/sequence_runner.h"

namespace moeserve::model::testutil {

// "1,2,3" -> {1, 2, 3} (prompts are passed from tests/model/CMakeLists.txt as CSV).
inline std::vector<int32_t> parse_ids(const char* csv) {
    std::vector<int32_t> ids;
    std::stringstream ss(csv);
    for (std::string item; std::getline(ss, item, ',');) ids.push_back(std::stoi(item));
    return ids;
}

// Rows of `got` [rows, vocab] further than bound from `ref`; prints them.
inline int rows_beyond(const std::vector<float>& got, const std::vector<float>& ref, size_t vocab, float bound,
                       float* worst, const char* what) {
    int n = 0;
    *worst = 0.0f;
    for (size_t t = 0; t * vocab < ref.size(); ++t) {
        float d = 0.0f;
        for (size_t j = 0; j < vocab; ++j) d = std::max(d, std::fabs(got[t * vocab + j] - ref[t * vocab + j]));
        *worst = std::max(*worst, d);
        if (d > bound) {
            ++n;
            std::printf("  %s token %zu: max |logit - reference| %.3g\n", what, t, d);
        }
    }
    return n;
}

// A raw little-endian float32 file, as the numpy reference writes logits.
inline std::vector<float> read_f32(const std::filesystem::path& path) {
    std::ifstream in(path, std::ios::binary);
    EXPECT_TRUE(in) << path;
    in.seekg(0, std::ios::end);
    std::vector<float> out(static_cast<size_t>(in.tellg()) / sizeof(float));
    in.seekg(0);
    in.read(reinterpret_cast<char*>(out.data()), static_cast<std::streamsize>(out.size() * sizeof(float)));
    return out;
}

// The model file of a fixture directory: model-TYPE.gguf, or split 1 of a split set.
inline std::filesystem::path gguf_in(const std::filesystem::path& dir) {
    for (const auto& e : std::filesystem::directory_iterator(dir)) {
        const std::string n = e.path().filename().string();
        if (n.size() > 5 && n.substr(n.size() - 5) == ".gguf" &&
            (n.find("-of-") == std::string::npos || n.find("-00001-of-") != std::string::npos)) {
            return e.path();
        }
    }
    ADD_FAILURE() << "no .gguf in " << dir;
    return {};
}

// Largest |a - b| over all entries (sizes must match).
inline float max_abs_diff(const std::vector<float>& a, const std::vector<float>& b) {
    EXPECT_EQ(a.size(), b.size());
    float m = 0;
    for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) m = std::max(m, std::fabs(a[i] - b[i]));
    return m;
}

inline float max_abs(const std::vector<float>& a) {
    float m = 0;
    for (float v : a) m = std::max(m, std::fabs(v));
    return m;
}

// Index of the largest logit; the lowest id on ties (the reference's greedy rule).
inline int32_t argmax(const float* row, int64_t n) {
    return static_cast<int32_t>(std::max_element(row, row + n) - row);
}

// Logits [ids.size(), vocab] of one prefill (in chunks of `chunk` tokens; 0 = one chunk).
inline std::vector<float> prefill(Model& m, const std::vector<int32_t>& ids, int64_t chunk = 0) {
    moeserve::testing::SequenceRunner runner(m, 256, 16);
    return runner.append(ids, chunk, /*all_logits=*/true);
}

// The same logits, one decode step per token.
inline std::vector<float> decode_each(Model& m, const std::vector<int32_t>& ids) {
    moeserve::testing::SequenceRunner runner(m, 256, 16);
    std::vector<float> logits;
    for (int32_t id : ids) {
        const auto row = runner.append(std::span<const int32_t>(&id, 1));
        logits.insert(logits.end(), row.begin(), row.end());
    }
    return logits;
}

// seq followed by `steps` greedy tokens.
inline std::vector<int32_t> greedy(Model& m, std::vector<int32_t> seq, int steps) {
    moeserve::testing::SequenceRunner runner(m, 256, 16);
    std::vector<float> row = runner.append(seq);
    for (int i = 0; i < steps; ++i) {
        const int32_t next = argmax(row.data(), m.info().vocab_size);
        seq.push_back(next);
        row = runner.append(std::span<const int32_t>(&next, 1));
    }
    return seq;
}

}  // namespace moeserve::model::testutil
