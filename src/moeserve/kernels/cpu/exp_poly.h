// The constants of the vectorized exp(x) of the attention kernels (simd_avx2.h exp8 and the
// AVX-512 exp16 in paged_attention_avx512.cpp), one place for both: x clamped to
// [kExpMin, kExpMax], Cody-Waite reduction x = n ln2 + r with ln2 = kLn2Hi + kLn2Lo, then the
// polynomial below for e^r (Horner from kC5), times 2^n; relative error ~2e-7. Constants only (no
// code, internal linkage), so the per-ISA files can share them.
#pragma once

namespace moeserve::kernels::cpu::exp_poly {

constexpr float kExpMax = 88.3762626647949f;
constexpr float kExpMin = -87.3365447505531f;
constexpr float kLog2e = 1.44269504088896341f;
constexpr float kLn2Hi = 0.693359375f;
constexpr float kLn2Lo = -2.12194440e-4f;
// e^r = 1 + r + r^2 (c0 + c1 r + c2 r^2 + c3 r^3 + c4 r^4 + c5 r^5)
constexpr float kC0 = 5.0000001201e-1f, kC1 = 1.6666665459e-1f, kC2 = 4.1665795894e-2f, kC3 = 8.3334519073e-3f,
                kC4 = 1.3981999507e-3f, kC5 = 1.9875691500e-4f;

}  // namespace moeserve::kernels::cpu::exp_poly
