// The backend registry and the backend-allocated Buffer (kernels/backend.h, kernels/buffer.h).
// Whole models through a second backend: tests/model/backend_seam_test.cpp.
#include <gtest/gtest.h>

#include <string>

#include "moeserve/core/error.h"
#include "moeserve/kernels/backend.h"
#include "moeserve/kernels/buffer.h"
#include "moeserve/kernels/cpu/backend.h"
#include "test_support.h"

namespace moeserve::kernels {
namespace {

using test::error_of;

TEST(BackendTest, CpuIsBuiltInAndActive) {
    EXPECT_EQ(backend_names().front(), "cpu");
    EXPECT_EQ(&active_backend(), &cpu::backend());
    EXPECT_EQ(&ops(), &cpu::backend().ops);
}

TEST(BackendTest, UnknownNameIsRefusedNamingTheKnownOnes) {
    const std::string e = error_of([] { use_backend("gpu"); });
    EXPECT_NE(e.find("unknown kernel backend 'gpu'"), std::string::npos) << e;
    EXPECT_NE(e.find("registered: cpu"), std::string::npos) << e;
    EXPECT_EQ(&active_backend(), &cpu::backend());
}

TEST(BackendTest, DuplicateOrIncompleteBackendsAreRefused) {
    EXPECT_NE(error_of([] { register_backend(cpu::backend()); }).find("registered already"), std::string::npos);
    static Backend incomplete = [] {
        Backend b = cpu::backend();
        b.name = "incomplete";
        b.ops.mla_attention = nullptr;
        return b;
    }();
    EXPECT_NE(error_of([] { register_backend(incomplete); }).find("leaves an op"), std::string::npos);
    for (const std::string& name : backend_names()) EXPECT_NE(name, "incomplete");
}

TEST(BackendTest, BufferGrowsKeepingValuesAndZeroesWhatItRegrows) {
    Buffer b;
    EXPECT_TRUE(b.empty());
    b.assign(3, 2.0f);
    b.resize(1000);  // a new allocation: the first 3 values move, the rest are zero
    EXPECT_EQ(b.size(), 1000U);
    EXPECT_EQ(b[2], 2.0f);
    EXPECT_EQ(b[3], 0.0f);
    b[500] = 7.0f;
    b.resize(10);  // shrinks within the capacity
    b.resize(600);
    EXPECT_EQ(b[500], 0.0f);  // as a vector's would be
    const float src[] = {1.0f, 2.0f};
    b.assign(src, src + 2);
    EXPECT_EQ(b.size(), 2U);
    EXPECT_EQ(b[1], 2.0f);
}

}  // namespace
}  // namespace moeserve::kernels
