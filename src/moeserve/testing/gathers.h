// The variable row gather: exchange counts, then one variable-size all-gather. No runtime path
// uses it (the MoE exchange gathers padded, parallel/gather.h); the tests check the padded gather
// against it, in one process (tests/parallel/moe_exchange_test.cpp) and over Gloo
// (tests/parallel/rank_helper.cpp).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "moeserve/parallel/comm.h"

namespace moeserve::testing {

// rows f32 [num_rows, width] -> out f32 [sum of counts, width] in rank order; counts receives
// every rank's num_rows. Collective.
void all_gather_rows_v(parallel::Communicator& comm, std::span<const float> rows, int64_t width,
                       std::vector<float>& out, std::vector<int64_t>& counts);

}  // namespace moeserve::testing
