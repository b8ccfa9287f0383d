// The families added on the shared skeleton (issue 35) against their independent numpy references
// (tests/reference/mixtral_ref.py, qwen2_moe_ref.py, glm4_moe_ref.py: float64 from the same bf16
// weights): prefill and token-by-token decode through the paged KV cache; their configs'
// refusals. The tiny models come from make-model: --arch mixtral (Mixtral's names:
// block_sparse_moe.gate, experts' w1 / w3 / w2), --arch qwen2_moe (q/k/v biases, a shared expert
// with its sigmoid gate, a dense layer) and --arch glm4_moe (partial RoPE, q/k norms and biases,
// DeepSeek-V3's router, a shared expert, a dense first layer).
#include <gtest/gtest.h>

#include <cstdio>
#include <nlohmann/json.hpp>

#include "model/model_test_util.h"
#include "test_support.h"
#include "moeserve/core/error.h"
#include "moeserve/kernels/cpu/isa.h"
#include "moeserve/model/gpt_oss/config.h"
#include "moeserve/model/mixtral/config.h"
#include "moeserve/model/registry.h"
#include "moeserve/testing/generator.h"
#include "moeserve/testing/sequence_runner.h"

namespace moeserve::model {
namespace {

using moeserve::testing::SequenceRunner;
using testutil::argmax;
using testutil::max_abs;
using testutil::max_abs_diff;
using testutil::read_f32;

constexpr float kRelTolerance = 2e-5f;  // float32 activations vs the float64 oracle (as Qwen3-MoE's)
// Where the kernels quantize activations (q8_0) as the reference does: gguf_model_test.cpp's bound.
constexpr float kQuantizedActivationTolerance = 3e-2f;

// reference: the reference's logits file (default: DIR/reference_logits.f32).
void expect_reference_logits(const std::filesystem::path& dir, const std::string& model_type,
                             const LoadOptions& options = {}, float tolerance = kRelTolerance,
                             const std::filesystem::path& reference = {}) {
    ThreadPool pool(2);
    LoadOptions o = options;
    o.max_model_len = 256;
    const auto model = load_model(dir, pool, o);
    EXPECT_EQ(model->info().model_type, model_type);
    const int64_t vocab = model->info().vocab_size;
    const auto ids = testutil::parse_ids(MOESERVE_QWEN3_PROMPT);
    const auto ref = read_f32(reference.empty() ? dir / "reference_logits.f32" : reference);
    ASSERT_EQ(ref.size(), ids.size() * static_cast<size_t>(vocab));

    SequenceRunner prefill(*model, 256, 16);
    const auto logits = prefill.append(ids, 0, /*all_logits=*/true);
    std::printf("%s prefill: max |logit - reference| = %.3g, max |reference| = %.3g\n", model_type.c_str(),
                max_abs_diff(logits, ref), max_abs(ref));
    EXPECT_LE(max_abs_diff(logits, ref), tolerance * max_abs(ref));
    for (size_t t = 0; t < ids.size(); ++t) {
        EXPECT_EQ(argmax(&logits[t * size_t(vocab)], vocab), argmax(&ref[t * size_t(vocab)], vocab)) << t;
    }
    SequenceRunner decode(*model, 256, 4);
    std::vector<float> stepped;
    for (int32_t id : ids) {
        const auto row = decode.append(std::span<const int32_t>(&id, 1));
        stepped.insert(stepped.end(), row.begin(), row.end());
    }
    EXPECT_LE(max_abs_diff(stepped, ref), tolerance * max_abs(ref));
}

TEST(MixtralTest, PrefillAndDecodeMatchTheReference) { expect_reference_logits(MOESERVE_MIXTRAL_TINY_DIR, "mixtral"); }

TEST(Qwen2MoeTest, PrefillAndDecodeMatchTheReference) {
    expect_reference_logits(MOESERVE_QWEN2_MOE_TINY_DIR, "qwen2_moe");
}

TEST(Glm4MoeTest, PrefillAndDecodeMatchTheReference) {
    expect_reference_logits(MOESERVE_GLM4_MOE_TINY_DIR, "glm4_moe");
}

// gpt-oss: biases, sinks, a sliding window of 5 on layers 0 and 2 (the 19-token prompt slides),
// YaRN with a fractional correction range, the biased top-k softmax router, and experts with
// biases and the clamped unit (a limit of 2, so the clamps bite).
TEST(GptOssTest, PrefillAndDecodeMatchTheReference) { expect_reference_logits(MOESERVE_GPT_OSS_TINY_DIR, "gpt_oss"); }

// The same logits through the scalar reference ISA level and the AVX2 one (attention with sinks
// and windows runs the group kernel there; experts the f32 widening).
TEST(GptOssTest, EveryIsaLevelMatchesTheReference) {
    namespace kc = kernels::cpu;
    const kc::Isa prev = kc::active_isa();
    for (kc::Isa isa : {kc::Isa::kRef, kc::Isa::kAvx2}) {
        if (!kc::isa_supported(isa)) continue;
        SCOPED_TRACE(kc::isa_name(isa));
        kc::set_active_isa(isa);
        expect_reference_logits(MOESERVE_GPT_OSS_TINY_DIR, "gpt_oss");
    }
    kc::set_active_isa(prev);
}

// gpt-oss as released: MXFP4 experts run as their blocks against q8_0 activations; the
// reference dequantizes the same blocks and quantizes the experts' inputs as q8_0 too. The bound
// is the GGUF files' (gguf_model_test.cpp: one-step flips of a quantized activation).
TEST(GptOssTest, Mxfp4CheckpointMatchesTheReference) {
    expect_reference_logits(MOESERVE_GPT_OSS_MXFP4_TINY_DIR, "gpt_oss", {}, kQuantizedActivationTolerance);
}

// --quantization none widens the MXFP4 experts to bf16 (the same values, f32 activations: the
// tight bound); w8a8 is refused, naming the checkpoint's format.
TEST(GptOssTest, Mxfp4CheckpointWidensOrRefuses) {
    const std::filesystem::path dir = MOESERVE_GPT_OSS_MXFP4_TINY_DIR;
    expect_reference_logits(dir, "gpt_oss", {.quantization = "none"}, kRelTolerance,
                            dir / "widened" / "reference_logits.f32");
    ThreadPool pool(1);
    const std::string error =
        test::error_of([&] { load_model(MOESERVE_GPT_OSS_MXFP4_TINY_DIR, pool, LoadOptions{.quantization = "w8a8"}); });
    EXPECT_NE(error.find("mxfp4 checkpoint"), std::string::npos) << error;
}

TEST(GptOssTest, ConfigRefusalsNameTheField) {
    nlohmann::json j = moeserve::testing::preset_config("gpt_oss", "tiny");
    j["layer_types"] = {"sliding_attention", "chunked_attention", "full_attention"};
    EXPECT_NE(test::error_of([&] { GptOssConfig::from_json(io::HfConfig(j, "config.json")); }).find("layer_types"),
              std::string::npos);
    j.erase("layer_types");
    EXPECT_EQ(GptOssConfig::from_json(io::HfConfig(j, "config.json")).layer_windows(),
              (std::vector<int64_t>{5, 0, 5}));  // HF's default pattern: sliding first
    j["swiglu_limit"] = 0.0;
    EXPECT_NE(test::error_of([&] { GptOssConfig::from_json(io::HfConfig(j, "config.json")); }).find("swiglu_limit"),
              std::string::npos);
}

TEST(MixtralTest, ConfigRefusalsNameTheField) {
    nlohmann::json j = moeserve::testing::preset_config("mixtral", "tiny");
    j["sliding_window"] = 0;
    EXPECT_NE(test::error_of([&] { MixtralConfig::from_json(io::HfConfig(j, "config.json")); }).find("sliding_window"),
              std::string::npos);
    j["sliding_window"] = nullptr;
    j["num_experts_per_tok"] = 9;
    EXPECT_THROW(MixtralConfig::from_json(io::HfConfig(j, "config.json")), Error);
}

// A sliding window of 6 on every layer (make-model --set sliding_window=6): the 19-token prompt
// slides, against the reference's windowed mask.
TEST(MixtralTest, SlidingWindowMatchesTheReference) {
    expect_reference_logits(MOESERVE_MIXTRAL_SWA_TINY_DIR, "mixtral");
}

}  // namespace
}  // namespace moeserve::model
