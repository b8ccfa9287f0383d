/* A STREAM-style read probe for the side-by-side scripts (gguf_ab.sh): the memory bandwidth a
 * decode step could at best use on this machine, measured in the same round as the engines so a
 * noisy neighbour shows up in it too. Every OpenMP thread sums its own slice of a 1 GiB float
 * array (far past any L3) with eight independent AVX2 accumulators, so the loop is bound by loads,
 * not by the add latency. Prints the best and the median of 10 passes in GB/s (1e9 bytes).
 * Build: gcc -O3 -mavx2 -fopenmp stream_read.c -o stream_read; run with OMP_NUM_THREADS=N. */
#include <immintrin.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

enum { kPasses = 10, kLanes = 8, kUnroll = 8 };

static double seconds(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* Sum of a[lo, hi) (hi - lo a multiple of kLanes * kUnroll), eight vector accumulators. */
static float sum_slice(const float* a, size_t lo, size_t hi) {
    __m256 acc[kUnroll];
    for (int u = 0; u < kUnroll; ++u) acc[u] = _mm256_setzero_ps();
    for (size_t i = lo; i < hi; i += kLanes * kUnroll) {
        for (int u = 0; u < kUnroll; ++u) acc[u] = _mm256_add_ps(acc[u], _mm256_load_ps(a + i + kLanes * u));
    }
    for (int u = 1; u < kUnroll; ++u) acc[0] = _mm256_add_ps(acc[0], acc[u]);
    float lanes[kLanes];
    _mm256_storeu_ps(lanes, acc[0]);
    float s = 0.0f;
    for (int l = 0; l < kLanes; ++l) s += lanes[l];
    return s;
}

static int by_value(const void* x, const void* y) {
    const double a = *(const double*)x, b = *(const double*)y;
    return (a > b) - (a < b);
}

int main(void) {
    const size_t n = (size_t)1 << 28; /* 1 GiB of floats */
    float* a = aligned_alloc(64, n * sizeof(float));
    if (a == NULL) return 1;
#pragma omp parallel for /* first touch by the thread that reads it later */
    for (size_t i = 0; i < n; ++i) a[i] = 1.0f;
    double gbs[kPasses];
    float total = 0.0f;
    for (int p = 0; p < kPasses; ++p) {
        const double t0 = seconds();
#pragma omp parallel reduction(+ : total)
        {
            const size_t nt = (size_t)omp_get_num_threads(), id = (size_t)omp_get_thread_num();
            const size_t step = kLanes * kUnroll, blocks = n / step;
            total += sum_slice(a, blocks * id / nt * step, blocks * (id + 1) / nt * step);
        }
        gbs[p] = (double)(n * sizeof(float)) / (seconds() - t0) / 1e9;
    }
    qsort(gbs, kPasses, sizeof(double), by_value);
    /* the sum is printed so that the reads cannot be optimized away */
    printf("stream read GB/s, %d threads: best %.1f median %.1f (checksum %.0f)\n", omp_get_max_threads(),
           gbs[kPasses - 1], (gbs[kPasses / 2 - 1] + gbs[kPasses / 2]) / 2, (double)total);
    free(a);
    return 0;
}
