#include "moeserve/testing/gathers.h"

#include "moeserve/core/error.h"
#include "moeserve/parallel/gather.h"

namespace moeserve::testing {

void all_gather_rows_v(parallel::Communicator& comm, std::span<const float> rows, int64_t width,
                       std::vector<float>& out, std::vector<int64_t>& counts) {
    MOESERVE_CHECK(width > 0 && static_cast<int64_t>(rows.size()) % width == 0, "rows {} not a multiple of {}",
                   rows.size(), width);
    parallel::exchange_counts(comm, static_cast<int64_t>(rows.size()) / width, counts);
    std::vector<int64_t> elems(counts.size());
    int64_t total = 0;
    for (size_t r = 0; r < counts.size(); ++r) {
        elems[r] = counts[r] * width;
        total += elems[r];
    }
    out.resize(static_cast<size_t>(total));
    comm.all_gather_v<float>(rows, elems, out);
}

}  // namespace moeserve::testing
