// Helpers for the kernel tests: seeded random buffers, deliberately misaligned storage (one float
// past a 32-byte boundary) and the relative max-error check used against the scalar references.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <random>
#include <vector>

#include "moeserve/core/dtype.h"
#include "moeserve/kernels/cpu/isa.h"

namespace moeserve::kernels::test {

// Every ISA level this CPU can run (ref and avx2 always: the tree is built for x86-64-v3); the
// others are skipped with the reason printed once per process.
inline std::vector<cpu::Isa> test_isas() {
    static const std::vector<cpu::Isa> isas = [] {
        std::vector<cpu::Isa> v;
        for (cpu::Isa isa : {cpu::Isa::kRef, cpu::Isa::kAvx2, cpu::Isa::kAvx512, cpu::Isa::kAmx}) {
            if (cpu::isa_supported(isa)) {
                v.push_back(isa);
            } else {
                std::printf("[ isa skip ] %s: %s\n", cpu::isa_name(isa), cpu::isa_missing(isa).c_str());
            }
        }
        return v;
    }();
    return isas;
}

// Runs fn(isa) with each level of test_isas() forced, restoring the previous level after.
template <typename F>
void for_each_isa(F&& fn) {
    const cpu::Isa prev = cpu::active_isa();
    for (cpu::Isa isa : test_isas()) {
        cpu::set_active_isa(isa);
        SCOPED_TRACE(testing::Message() << "isa=" << cpu::isa_name(isa));
        fn(isa);
    }
    cpu::set_active_isa(prev);
}

// for_each_isa, and at the avx512 levels fn(isa) once more with the other weight walk of the
// decode GEMVs than this CPU's default (isa.h gemv_row_blocks()).
template <typename F>
void for_each_isa_and_gemv_walk(F&& fn) {
    for_each_isa([&](cpu::Isa isa) {
        fn(isa);
        if (isa < cpu::Isa::kAvx512) return;
        const bool row_blocks = cpu::gemv_row_blocks();
        SCOPED_TRACE(row_blocks ? "GEMV row by row" : "GEMV in row blocks");
        cpu::set_gemv_row_blocks(!row_blocks);
        fn(isa);
        cpu::set_gemv_row_blocks(row_blocks);
    });
}

// A float buffer whose data() is offset by one float from an aligned base, so kernels see
// unaligned pointers.
class Floats {
public:
    explicit Floats(int64_t n) : storage_(static_cast<size_t>(n) + 8, 0.0f) {}
    float* data() { return storage_.data() + 1; }
    const float* data() const { return storage_.data() + 1; }
    float& operator[](int64_t i) { return data()[i]; }
    float operator[](int64_t i) const { return data()[i]; }

private:
    std::vector<float> storage_;
};

inline void fill_uniform(float* p, int64_t n, std::mt19937& rng, float lo = -1.0f, float hi = 1.0f) {
    std::uniform_real_distribution<float> d(lo, hi);
    for (int64_t i = 0; i < n; ++i) p[i] = d(rng);
}

inline std::vector<uint16_t> random_bf16(int64_t n, std::mt19937& rng, float scale = 1.0f) {
    std::uniform_real_distribution<float> d(-scale, scale);
    std::vector<uint16_t> v(static_cast<size_t>(n) + 1);  // +1: callers may offset by one element
    for (auto& h : v) h = f32_to_bf16(d(rng));
    return v;
}

// Asserts max|a - b| <= tol * (1 + max|ref|) over n values.
inline void expect_close(const float* got, const float* ref, int64_t n, float tol, const char* what) {
    float max_ref = 0.0f, max_err = 0.0f;
    int64_t worst = 0;
    for (int64_t i = 0; i < n; ++i) {
        max_ref = std::max(max_ref, std::fabs(ref[i]));
        const float e = std::fabs(got[i] - ref[i]);
        if (!(e <= max_err)) {
            max_err = e;
            worst = i;
        }
    }
    EXPECT_LE(max_err, tol * (1.0f + max_ref)) << what << ": worst index " << worst << " got "
                                               << (n ? got[worst] : 0.0f) << " ref " << (n ? ref[worst] : 0.0f);
}

}  // namespace moeserve::kernels::test
