// The padded row gather (see gather.h).
#include "moeserve/parallel/gather.h"

#include <algorithm>
#include <cstring>

#include "moeserve/core/error.h"

namespace moeserve::parallel {

void exchange_counts(Communicator& comm, int64_t count, std::vector<int64_t>& counts) {
    counts.resize(static_cast<size_t>(comm.size()));
    comm.all_gather<int64_t>(std::span<const int64_t>(&count, 1), counts);
}

void all_gather_rows_padded(Communicator& comm, std::span<const float> rows, int64_t width, std::vector<float>& out,
                            std::vector<int64_t>& counts, PaddedGatherScratch& scratch) {
    MOESERVE_CHECK(width > 0 && static_cast<int64_t>(rows.size()) % width == 0, "rows {} not a multiple of {}",
                   rows.size(), width);
    // 1. counts of every rank
    exchange_counts(comm, static_cast<int64_t>(rows.size()) / width, counts);
    all_gather_rows_padded_known(comm, rows, width, counts, out, scratch);
}

void all_gather_rows_padded_known(Communicator& comm, std::span<const float> rows, int64_t width,
                                  std::span<const int64_t> counts, std::vector<float>& out,
                                  PaddedGatherScratch& scratch) {
    MOESERVE_CHECK(width > 0 && static_cast<int64_t>(counts.size()) == comm.size() &&
                       static_cast<int64_t>(rows.size()) == counts[static_cast<size_t>(comm.rank())] * width,
                   "padded gather: {} floats of width {} for count {} of {} counts", rows.size(), width,
                   counts.empty() ? -1 : counts[static_cast<size_t>(comm.rank())], counts.size());
    // 2. pad this rank's rows to [max_rows, width] (the block size = the largest count)
    const int64_t max_rows = *std::max_element(counts.begin(), counts.end());
    const auto block = static_cast<size_t>(max_rows * width);
    scratch.block.resize(block);
    std::copy(rows.begin(), rows.end(), scratch.block.begin());
    std::fill(scratch.block.begin() + static_cast<std::ptrdiff_t>(rows.size()), scratch.block.end(), 0.0f);
    // 3. all-gather [size, max_rows, width]
    scratch.padded.resize(block * static_cast<size_t>(comm.size()));
    comm.all_gather<float>(scratch.block, scratch.padded);
    // 4. unpad: rank r's first counts[r] rows, back to back
    int64_t total = 0;
    for (int64_t c : counts) total += c;
    out.resize(static_cast<size_t>(total * width));
    size_t off = 0;
    for (size_t r = 0; r < counts.size(); ++r) {
        const auto n = static_cast<size_t>(counts[r] * width);
        if (n > 0) std::memcpy(out.data() + off, scratch.padded.data() + r * block, n * sizeof(float));
        off += n;
    }
}

}  // namespace moeserve::parallel
