// The ISA choice: names round-trip, unsupported levels are refused with
// moeserve::Error, avx2 and ref are always available (the tree is built for
// x86-64-v3), forcing a level sticks, and the decode GEMV walk follows the CPU vendor.
#include "moeserve/kernels/cpu/isa.h"

#include <gtest/gtest.h>

#include <cstdlib>

#include "kernel_test_util.h"
#include "moeserve/core/error.h"

namespace moeserve::kernels::cpu {
namespace {

TEST(IsaTest, NamesRoundTrip) {
    for (Isa isa : {Isa::kRef, Isa::kAvx2, Isa::kAvx512, Isa::kAmx}) EXPECT_EQ(parse_isa(isa_name(isa)), isa);
    EXPECT_THROW(parse_isa("sse2"), Error);
    EXPECT_THROW(parse_isa(""), Error);
}

TEST(IsaTest, BaselineAlwaysSupported) {
    EXPECT_TRUE(isa_supported(Isa::kRef));
    EXPECT_TRUE(isa_supported(Isa::kAvx2)) << isa_missing(Isa::kAvx2);
    const Isa best = best_isa();
    EXPECT_TRUE(best == Isa::kAvx2 || best == Isa::kAvx512);
    std::printf("[ isa      ] %s\n", isa_summary().c_str());
}

TEST(IsaTest, ForcingSticksAndUnsupportedIsRefused) {
    const Isa prev = active_isa();
    test::for_each_isa([](Isa isa) { EXPECT_EQ(active_isa(), isa); });
    EXPECT_EQ(active_isa(), prev);
    for (Isa isa : {Isa::kAvx512, Isa::kAmx}) {
        if (isa_supported(isa)) continue;
        EXPECT_FALSE(isa_missing(isa).empty());
        try {
            set_active_isa(isa);
            ADD_FAILURE() << "set_active_isa(" << isa_name(isa) << ") was accepted";
        } catch (const Error& e) {
            EXPECT_NE(std::string(e.what()).find(isa_name(isa)), std::string::npos) << e.what();
        }
        EXPECT_EQ(active_isa(), prev);
    }
}

TEST(IsaTest, GemvWalkFollowsTheCpuAndCanBeForced) {
    const bool row_blocks = gemv_row_blocks();
    if (std::getenv("MOESERVE_GEMV_ROW_BLOCKS") == nullptr) {
        // One weight row at a time on AMD Zen3/Zen4 (family 25, measured best on Zen4), row blocks
        // elsewhere (Intel; Zen5, family 26).
        const bool amd_row_by_row = cpu_features().vendor == "AuthenticAMD" && cpu_features().family <= 25;
        EXPECT_EQ(row_blocks, !amd_row_by_row)
            << "vendor " << cpu_features().vendor << " family " << cpu_features().family;
    }
    EXPECT_GT(cpu_features().family, 0);
    EXPECT_FALSE(cpu_features().vendor.empty());
    set_gemv_row_blocks(!row_blocks);
    EXPECT_EQ(gemv_row_blocks(), !row_blocks);
    set_gemv_row_blocks(row_blocks);
    EXPECT_EQ(gemv_row_blocks(), row_blocks);
}

}  // namespace
}  // namespace moeserve::kernels::cpu
