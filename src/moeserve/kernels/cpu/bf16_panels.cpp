// bf16 panels (bf16_panels.h): packing, the portable tile and the split over threads.
#include "moeserve/kernels/cpu/bf16_panels.h"

#include <algorithm>
#include <atomic>

#include "moeserve/core/dtype.h"
#include "moeserve/kernels/cpu/isa.h"

namespace moeserve::kernels::cpu {

namespace {

// The element of group p that holds panel row r (r < 32).
int64_t slot_of(int64_t r) { return r < 16 ? 2 * r : 2 * (r - 16) + 1; }

// Below this many multiply-adds the fork/join costs more than it saves.
constexpr int64_t kMinParallelMacs = 1 << 15;

}  // namespace

int64_t bf16_panel_count(int64_t rows) { return (rows + kBf16PanelRows - 1) / kBf16PanelRows; }

void detail::bf16_panels_tile(const float* x, int64_t ldx, int64_t m, int64_t k, const uint16_t* panels, int64_t q0,
                              int64_t q1, int64_t n, float* out, int64_t ldo) {
    if (active_isa() >= Isa::kAvx512) {
        bf16_panels_tile_avx512(x, ldx, m, k, panels, q0, q1, n, out, ldo);
    } else {
        bf16_panels_tile_portable(x, ldx, m, k, panels, q0, q1, n, out, ldo);
    }
}

size_t bf16_panel_bytes(int64_t n, int64_t k) {
    return static_cast<size_t>(bf16_panel_count(n) * k * kBf16PanelRows * 2);
}

void pack_bf16_panels(ThreadPool& pool, const uint16_t* w, int64_t ldw, int64_t n, int64_t k, uint16_t* dst) {
    pool.parallel_for(bf16_panel_count(n), [&](int64_t q0, int64_t q1) {
        for (int64_t q = q0; q < q1; ++q) {
            uint16_t* panel = dst + q * k * kBf16PanelRows;
            const int64_t rows = std::min(kBf16PanelRows, n - q * kBf16PanelRows);
            const uint16_t* src[kBf16PanelRows];
            for (int64_t r = 0; r < kBf16PanelRows; ++r) {
                src[r] = r < rows ? w + (q * kBf16PanelRows + r) * ldw : nullptr;
            }
            // Column by column: the writes are sequential, and each of the 32 source rows is read
            // sequentially (a cache line of it serves 32 columns).
            for (int64_t p = 0; p < k; ++p) {
                uint16_t* group = panel + p * kBf16PanelRows;
                for (int64_t r = 0; r < kBf16PanelRows; ++r) group[slot_of(r)] = src[r] != nullptr ? src[r][p] : 0;
            }
        }
    });
}

uint16_t bf16_panel_at(const uint16_t* panels, int64_t k, int64_t row, int64_t col) {
    const int64_t q = row / kBf16PanelRows;
    return panels[(q * k + col) * kBf16PanelRows + slot_of(row % kBf16PanelRows)];
}

void unpack_bf16_panels(const uint16_t* panels, int64_t n, int64_t k, uint16_t* w) {
    for (int64_t r = 0; r < n; ++r) {
        for (int64_t p = 0; p < k; ++p) w[r * k + p] = bf16_panel_at(panels, k, r, p);
    }
}

void detail::bf16_panels_tile_portable(const float* x, int64_t ldx, int64_t m, int64_t k, const uint16_t* panels,
                                       int64_t q0, int64_t q1, int64_t n, float* out, int64_t ldo) {
    for (int64_t q = q0; q < q1; ++q) {
        const uint16_t* panel = panels + q * k * kBf16PanelRows;
        const int64_t rows = std::min(kBf16PanelRows, n - q * kBf16PanelRows);
        for (int64_t i = 0; i < m; ++i) {
            float acc[kBf16PanelRows] = {};
            const float* xi = x + i * ldx;
            for (int64_t p = 0; p < k; ++p) {
                const uint16_t* group = panel + p * kBf16PanelRows;
                for (int64_t s = 0; s < kBf16PanelRows; ++s) acc[s] += bf16_to_f32(group[s]) * xi[p];
            }
            for (int64_t r = 0; r < rows; ++r) out[i * ldo + (q - q0) * kBf16PanelRows + r] = acc[slot_of(r)];
        }
    }
}

void linear_bf16_panels(ThreadPool& pool, const float* x, int64_t m, int64_t k, const uint16_t* panels, int64_t n,
                        float* out) {
    if (m <= 0) return;
    const int64_t total = bf16_panel_count(n);
    if (pool.num_threads() == 1 || m * n * k < kMinParallelMacs || total < 2) {
        detail::bf16_panels_tile(x, k, m, k, panels, 0, total, n, out, n);
        return;
    }
    // Chunks of panels pulled dynamically (about 8 per thread for few rows, 4 for many, whose
    // chunks each re-stream x): a thread that starts late or runs slower (another process on its
    // core) takes fewer, instead of the others waiting for it.
    const int64_t parts = (m > kBf16PanelGemvRows ? 4 : 8) * int64_t{pool.num_threads()};
    const int64_t chunk = std::max<int64_t>(1, (total + parts - 1) / parts);
    const int64_t num_chunks = (total + chunk - 1) / chunk;
    std::atomic<int64_t> next{0};
    pool.run([&](int) {
        for (int64_t c = next.fetch_add(1, std::memory_order_relaxed); c < num_chunks;
             c = next.fetch_add(1, std::memory_order_relaxed)) {
            const int64_t q0 = c * chunk;
            detail::bf16_panels_tile(x, k, m, k, panels, q0, std::min(total, q0 + chunk), n, out + q0 * kBf16PanelRows,
                                     n);
        }
    });
}

}  // namespace moeserve::kernels::cpu
