// Padded and variable row gathers (see gather.h).
#include "moeserve/parallel/gather.h"

#include <algorithm>
#include <cstring>

#include "moeserve/core/error.h"

namespace moeserve::parallel {

std::vector<int64_t> exchange_counts(Communicator& comm, int64_t count) {
    std::vector<int64_t> counts(static_cast<size_t>(comm.size()));
    comm.all_gather<int64_t>(std::span<const int64_t>(&count, 1), counts);
    return counts;
}

void all_gather_rows_padded(Communicator& comm, std::span<const float> rows, int64_t width, std::vector<float>& out,
                            std::vector<int64_t>& counts, std::vector<float>& padded) {
    MOESERVE_CHECK(width > 0 && static_cast<int64_t>(rows.size()) % width == 0, "rows {} not a multiple of {}",
                   rows.size(), width);
    const int64_t mine = static_cast<int64_t>(rows.size()) / width;
    // 1. counts of every rank, and the block size = the largest count
    counts = exchange_counts(comm, mine);
    const int64_t max_rows = *std::max_element(counts.begin(), counts.end());
    const auto block = static_cast<size_t>(max_rows * width);
    // 2. pad this rank's rows to [max_rows, width]; 3. all-gather [size, max_rows, width]
    std::vector<float> mine_padded(block, 0.0f);
    std::copy(rows.begin(), rows.end(), mine_padded.begin());
    padded.resize(block * static_cast<size_t>(comm.size()));
    comm.all_gather<float>(mine_padded, padded);
    // 4. unpad: rank r's first counts[r] rows, back to back
    int64_t total = 0;
    for (int64_t c : counts) total += c;
    out.resize(static_cast<size_t>(total * width));
    size_t off = 0;
    for (size_t r = 0; r < counts.size(); ++r) {
        const auto n = static_cast<size_t>(counts[r] * width);
        std::memcpy(out.data() + off, padded.data() + r * block, n * sizeof(float));
        off += n;
    }
}

void all_gather_rows_v(Communicator& comm, std::span<const float> rows, int64_t width, std::vector<float>& out,
                       std::vector<int64_t>& counts) {
    MOESERVE_CHECK(width > 0 && static_cast<int64_t>(rows.size()) % width == 0, "rows {} not a multiple of {}",
                   rows.size(), width);
    counts = exchange_counts(comm, static_cast<int64_t>(rows.size()) / width);
    std::vector<int64_t> elems(counts.size());
    int64_t total = 0;
    for (size_t r = 0; r < counts.size(); ++r) {
        elems[r] = counts[r] * width;
        total += elems[r];
    }
    out.resize(static_cast<size_t>(total));
    comm.all_gather_v<float>(rows, elems, out);
}

}  // namespace moeserve::parallel
