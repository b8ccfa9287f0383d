// The registry's list and its factory cannot drift apart: a tiny random checkpoint of every type
// supported_model_types() names is generated and loaded through load_model, which must report
// that type. The runtime table and the generator's name the same types, in the same order.
#include "moeserve/model/registry.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "moeserve/core/thread_pool.h"
#include "moeserve/model/architecture.h"
#include "moeserve/testing/generator.h"
#include "moeserve/testing/generator_architecture.h"
#include "test_support.h"

namespace moeserve::model {
namespace {

using moeserve::testing::find_generator_architecture;
using moeserve::testing::generator_architectures;
using moeserve::testing::GeneratorArchitecture;

TEST(ModelRegistryTest, EverySupportedTypeLoads) {
    ThreadPool pool(1);
    const auto types = supported_model_types();
    ASSERT_FALSE(types.empty());
    for (const auto& type : types) {
        moeserve::testing::GeneratorOptions o;
        o.arch = type;
        o.size = "tiny";
        o.seed = 1;
        o.out_dir = test::scratch_dir("registry_" + type);
        o.tokenizer_dir =
            std::filesystem::path(MOESERVE_CACHE_DIR) / "tokenizers" / find_generator_architecture(type)->tokenizer;
        moeserve::testing::generate_random_model(o);
        const auto m = load_model(o.out_dir, pool);
        EXPECT_EQ(m->info().model_type, type);
        EXPECT_GT(m->info().num_parameters, 0) << type;
        std::filesystem::remove_all(o.out_dir);
    }
    EXPECT_TRUE(config_only_model_types().empty());
}

TEST(ModelRegistryTest, EveryRuntimeRowHasAGeneratorRowAndViceVersa) {
    std::vector<std::string> runtime, generator;
    for (const Architecture& a : architectures()) runtime.push_back(a.model_type);
    for (const GeneratorArchitecture& g : generator_architectures()) {
        generator.push_back(g.model_type);
        EXPECT_NE(g.preset, nullptr) << g.model_type;
        EXPECT_FALSE(g.tokenizer.empty()) << g.model_type;
    }
    EXPECT_EQ(runtime, generator);
}

}  // namespace
}  // namespace moeserve::model
