// Row gathers over a group: each rank holds a variable number of rows of the same width.
//   all_gather_rows_padded: exchange counts, pad every rank's rows to the maximum, all-gather
//                           fixed-size blocks, unpad (docs/architecture.md "MoE exchange").
// The tests check it against the variable-size gather (testing/gathers.h).
// Buffers are the caller's and grow on demand, so a caller that keeps them allocates nothing
// once they have reached the step's largest size.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "moeserve/parallel/comm.h"

namespace moeserve::parallel {

// counts [size] = every rank's count, in rank order (one all-gather of an int64). Collective.
void exchange_counts(Communicator& comm, int64_t count, std::vector<int64_t>& counts);

// The padded gather's buffers.
struct PaddedGatherScratch {
    std::vector<float> block;   // f32 [max_rows, width]: this rank's rows, zero-padded
    std::vector<float> padded;  // f32 [size, max_rows, width]: every rank's block
};

// rows f32 [num_rows, width] -> out f32 [sum of counts, width] in rank order; counts receives
// every rank's num_rows. Collective.
void all_gather_rows_padded(Communicator& comm, std::span<const float> rows, int64_t width, std::vector<float>& out,
                            std::vector<int64_t>& counts, PaddedGatherScratch& scratch);
// The same with every rank's count already known (counts[rank()] must equal this rank's
// num_rows, and every rank must pass the same counts): no count exchange. Collective.
void all_gather_rows_padded_known(Communicator& comm, std::span<const float> rows, int64_t width,
                                  std::span<const int64_t> counts, std::vector<float>& out,
                                  PaddedGatherScratch& scratch);

}  // namespace moeserve::parallel
