// The registry's list and its factory cannot drift apart: a tiny random checkpoint of every type
// supported_model_types() names is generated and loaded through load_model, which must report
// that type.
#include "moeserve/model/registry.h"

#include <gtest/gtest.h>

#include "moeserve/core/thread_pool.h"
#include "moeserve/model/architecture.h"
#include "moeserve/model/generator.h"
#include "test_support.h"

namespace moeserve::model {
namespace {

TEST(ModelRegistryTest, EverySupportedTypeLoads) {
    ThreadPool pool(1);
    const auto types = supported_model_types();
    ASSERT_FALSE(types.empty());
    for (const auto& type : types) {
        GeneratorOptions o;
        o.arch = type;
        o.size = "tiny";
        o.seed = 1;
        o.out_dir = test::scratch_dir("registry_" + type);
        o.tokenizer_dir = std::filesystem::path(MOESERVE_CACHE_DIR) / "tokenizers" / find_architecture(type)->tokenizer;
        generate_random_model(o);
        const auto m = load_model(o.out_dir, pool);
        EXPECT_EQ(m->info().model_type, type);
        EXPECT_GT(m->info().num_parameters, 0) << type;
        std::filesystem::remove_all(o.out_dir);
    }
    EXPECT_TRUE(config_only_model_types().empty());
}

}  // namespace
}  // namespace moeserve::model
