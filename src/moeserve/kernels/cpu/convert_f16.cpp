#include "moeserve/kernels/cpu/convert_f16.h"

#include <cstring>

#include "moeserve/core/dtype.h"

#if defined(__F16C__)
#include <immintrin.h>
#endif

namespace moeserve::kernels::cpu {

void f16_to_f32_array(const uint8_t* src, size_t n, float* dst) {
    size_t i = 0;
#if defined(__F16C__)
    // The hardware conversion is exact, like f16_to_f32.
    for (; i + 8 <= n; i += 8) {
        const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + 2 * i));
        _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(h));
    }
#endif
    for (; i < n; ++i) {
        uint16_t h;
        std::memcpy(&h, src + 2 * i, sizeof(h));
        dst[i] = f16_to_f32(h);
    }
}

}  // namespace moeserve::kernels::cpu
