// Row gathers over a group: each rank holds a variable number of rows of the same width.
// Two algorithms that must give identical results (tested):
//   all_gather_rows_padded: exchange counts, pad every rank's rows to the maximum, all-gather
//                           fixed-size blocks, unpad (docs/architecture.md "MoE exchange");
//   all_gather_rows_v:      exchange counts, then one variable-size all-gather.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "moeserve/parallel/comm.h"

namespace moeserve::parallel {

// Every rank's count, in rank order (one all-gather of an int64).
std::vector<int64_t> exchange_counts(Communicator& comm, int64_t count);

// rows f32 [num_rows, width] -> out f32 [sum of counts, width] in rank order; counts receives
// every rank's num_rows. `padded` is scratch for the fixed blocks. Collective.
void all_gather_rows_padded(Communicator& comm, std::span<const float> rows, int64_t width, std::vector<float>& out,
                            std::vector<int64_t>& counts, std::vector<float>& padded);
void all_gather_rows_v(Communicator& comm, std::span<const float> rows, int64_t width, std::vector<float>& out,
                       std::vector<int64_t>& counts);

}  // namespace moeserve::parallel
