// The kernels' ISA levels on the tiny models: with every level this CPU has (ref, avx2 always;
// avx512 where present, else skipped with the reason), the Qwen3-MoE logits stay within the
// existing bound of the float64 reference, and greedy continuations (bf16 and W8A8, DeepSeek-V3
// bf16) are the same token for token across levels.
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>

#include "model/model_test_util.h"
#include "moeserve/kernels/cpu/isa.h"
#include "moeserve/model/registry.h"
#include "moeserve/testing/sequence_runner.h"

namespace moeserve::model {
namespace {

namespace kc = kernels::cpu;
using moeserve::testing::SequenceRunner;
using testutil::argmax;
using testutil::max_abs;
using testutil::max_abs_diff;

std::vector<kc::Isa> levels() {
    std::vector<kc::Isa> v;
    for (kc::Isa isa : {kc::Isa::kRef, kc::Isa::kAvx2, kc::Isa::kAvx512}) {
        if (kc::isa_supported(isa)) {
            v.push_back(isa);
        } else {
            std::printf("[ isa skip ] %s: %s\n", kc::isa_name(isa), kc::isa_missing(isa).c_str());
        }
    }
    return v;
}

// Prefill logits of the prompt and a greedy continuation of `steps` tokens at each level.
struct Run {
    std::vector<float> prefill;
    std::vector<int32_t> greedy;
};

Run run(Model& model, const std::vector<int32_t>& ids, int steps) {
    Run r;
    SequenceRunner runner(model, 256, 16);
    r.prefill = runner.append(ids, 0, /*all_logits=*/true);
    const int64_t vocab = model.info().vocab_size;
    std::vector<float> logits(r.prefill.end() - vocab, r.prefill.end());
    for (int s = 0; s < steps; ++s) {
        const int32_t next = argmax(logits.data(), vocab);
        r.greedy.push_back(next);
        logits = runner.append(std::span<const int32_t>(&next, 1));
    }
    return r;
}

void check_levels(const std::filesystem::path& dir, const std::string& quantization, const char* prompt, int steps,
                  const std::vector<float>* reference) {
    ThreadPool pool(2);
    auto model = load_model(dir, pool, LoadOptions{.max_model_len = 256, .quantization = quantization});
    const auto ids = testutil::parse_ids(prompt);
    const kc::Isa prev = kc::active_isa();
    std::vector<Run> runs;
    const auto isas = levels();
    for (kc::Isa isa : isas) {
        kc::set_active_isa(isa);
        runs.push_back(run(*model, ids, steps));
    }
    kc::set_active_isa(prev);
    for (size_t i = 0; i < runs.size(); ++i) {
        SCOPED_TRACE(::testing::Message() << "isa=" << kc::isa_name(isas[i]));
        if (reference != nullptr) {
            const float diff = max_abs_diff(runs[i].prefill, *reference);
            std::printf("%s %s: prefill max |logit - reference| = %.3g (max |reference| %.3g)\n",
                        dir.filename().c_str(), kc::isa_name(isas[i]), diff, max_abs(*reference));
            EXPECT_LE(diff, 2e-5f * max_abs(*reference));  // qwen3_moe_test.cpp's kRelTolerance
        }
        EXPECT_EQ(runs[i].greedy, runs[0].greedy) << "vs " << kc::isa_name(isas[0]);
    }
}

TEST(IsaModelTest, Qwen3Bf16SameAcrossIsas) {
    const std::filesystem::path dir = MOESERVE_QWEN3_TINY_DIR;
    const auto ref = testutil::read_f32(dir / "reference_logits.f32");
    check_levels(dir, "", MOESERVE_QWEN3_PROMPT, MOESERVE_QWEN3_GREEDY_STEPS, &ref);
}

TEST(IsaModelTest, Qwen3W8A8GreedySameAcrossIsas) {
    // int8 arithmetic is exact at every level; only SwiGLU's vectorized exp differs from ref.
    check_levels(MOESERVE_QWEN3_W8A8_DIR, "", MOESERVE_QWEN3_PROMPT, MOESERVE_QWEN3_GREEDY_STEPS, nullptr);
}

TEST(IsaModelTest, DeepseekV3GreedySameAcrossIsas) {
    check_levels(MOESERVE_DSV3_TINY_DIR, "", MOESERVE_DSV3_PROMPT, MOESERVE_DSV3_GREEDY_STEPS, nullptr);
}

}  // namespace
}  // namespace moeserve::model
