// The backend seam (issue #33): a second kernel backend is a folder and a registration. The
// reference backend (kernels/reference/: the CPU kernels' scalar references, no threads)
// registers here and runs whole tiny models through the unchanged model code: GQA and MLA, bf16,
// W8A8 dynamic and static, int4, FP8 blocks and GGUF blocks. Its logits stay within each
// fixture's bound of the float64 reference, and its greedy continuations equal the CPU
// backend's. A counting backend shows that the model's ops, its KV cache and its buffers reach
// the kernels through the seam.
#include <gtest/gtest.h>

#include <atomic>
#include <filesystem>
#include <string>
#include <vector>

#include "model/model_test_util.h"
#include "moeserve/kernels/backend.h"
#include "moeserve/kernels/cpu/backend.h"
#include "moeserve/kernels/reference/backend.h"
#include "moeserve/model/registry.h"

namespace moeserve::model {
namespace {

namespace fs = std::filesystem;
using namespace testutil;

// The counting backend: the CPU backend's table with a few entries wrapped to count their calls.
std::atomic<int> g_allocations{0}, g_norms{0}, g_attentions{0}, g_experts{0};

const kernels::Ops& cpu_ops() { return kernels::cpu::backend().ops; }

Tensor counted_allocate(DType dtype, const Shape& shape) {
    ++g_allocations;
    return kernels::cpu::backend().allocate(dtype, shape);
}
void counted_add_rms_norm(ThreadPool& pool, float* residual, const float* x, const float* weight, int64_t rows,
                          int64_t dim, float eps, float* out) {
    ++g_norms;
    cpu_ops().add_rms_norm(pool, residual, x, weight, rows, dim, eps, out);
}
void counted_paged_attention(ThreadPool& pool, const kernels::PagedKvLayer& kv,
                             const kernels::PagedAttentionArgs& args) {
    ++g_attentions;
    cpu_ops().paged_attention(pool, kv, args);
}
void counted_moe_bf16(ThreadPool& pool, const float* x, int64_t t, const int32_t* ids, const float* w, int k,
                      const kernels::MoeExpertsBf16& e, float* out) {
    ++g_experts;
    cpu_ops().moe_experts_bf16(pool, x, t, ids, w, k, e, out);
}

const kernels::Backend& counting_backend() {
    static const kernels::Backend b = [] {
        kernels::Backend c = kernels::cpu::backend();
        c.name = "counting";
        c.allocate = counted_allocate;
        c.ops.add_rms_norm = counted_add_rms_norm;
        c.ops.paged_attention = counted_paged_attention;
        c.ops.moe_experts_bf16 = counted_moe_bf16;
        return c;
    }();
    return b;
}

void register_test_backends() {
    static const bool registered = [] {
        kernels::register_backend(kernels::reference::backend());
        kernels::register_backend(counting_backend());
        return true;
    }();
    (void)registered;
}

// The backend `name` for the scope's lifetime, then cpu again.
class BackendScope {
public:
    explicit BackendScope(std::string_view name) {
        register_test_backends();
        kernels::use_backend(name);
    }
    ~BackendScope() { kernels::use_backend("cpu"); }
    BackendScope(const BackendScope&) = delete;
    BackendScope& operator=(const BackendScope&) = delete;
};

struct BackendRun {
    std::vector<float> prefill;
    std::vector<int32_t> greedy;
};

// The prompt's prefill logits and its greedy continuation, with the model loaded and run on
// `backend` (its KV cache and buffers allocated there too).
BackendRun run_on(std::string_view backend, const fs::path& path, const std::vector<int32_t>& ids, int steps) {
    const BackendScope scope(backend);
    ThreadPool pool(2);
    LoadOptions o;
    o.max_model_len = 256;
    o.kv_cache_dtype = "fp32";
    const auto m = load_model(path, pool, o);
    return {prefill(*m, ids), greedy(*m, ids, steps)};
}

struct SeamCase {
    const char* name;
    fs::path dir;             // the fixture's folder
    bool gguf;                // load the folder's .gguf file (gguf_in), not the folder
    const char* prompt;       // CSV ids
    float reference_bound;    // of the largest float64 reference logit; 0: no reference file
    bool same_greedy_as_cpu;  // as the CPU backend's, at every ISA level (see the list below)
};

class BackendSeamTest : public ::testing::TestWithParam<SeamCase> {};

TEST_P(BackendSeamTest, ReferenceBackendRunsTheModel) {
    const SeamCase& c = GetParam();
    const auto ids = parse_ids(c.prompt);
    const fs::path path = c.gguf ? gguf_in(c.dir) : c.dir;
    const BackendRun ref = run_on("reference", path, ids, 8);
    if (c.reference_bound > 0) {
        const auto expected = read_f32(c.dir / "reference_logits.f32");
        const float diff = max_abs_diff(ref.prefill, expected);
        std::printf("%s on the reference backend: max |logit - float64 reference| = %.3g of %.3g\n", c.name, diff,
                    max_abs(expected));
        EXPECT_LE(diff, c.reference_bound * max_abs(expected));
    }
    if (c.same_greedy_as_cpu) {
        EXPECT_EQ(ref.greedy, run_on("cpu", path, ids, 8).greedy);
    }
}

INSTANTIATE_TEST_SUITE_P(
    Models, BackendSeamTest,
    ::testing::Values(
        // bounds: those of each fixture's own test (isa_model_test, deepseek_v3_test, w8a8_model_test,
        // int4_model_test, gguf_model_test); the same greedy text where isa_model_test holds the CPU
        // levels to it (bf16, W8A8) or the kernels are bit-exact across levels (static int8)
        SeamCase{"qwen3_moe_bf16", MOESERVE_QWEN3_TINY_DIR, false, MOESERVE_QWEN3_PROMPT, 2e-5f, true},
        SeamCase{"deepseek_v3_bf16", MOESERVE_DSV3_TINY_DIR, false, MOESERVE_DSV3_PROMPT, 2e-5f, true},
        SeamCase{"qwen3_moe_w8a8", MOESERVE_QWEN3_W8A8_DIR, false, MOESERVE_QWEN3_PROMPT, 0.0f, true},
        SeamCase{"qwen3_moe_modelslim", MOESERVE_QWEN3_MODELSLIM_DIR, false, MOESERVE_QWEN3_PROMPT, 0.0f, true},
        SeamCase{"qwen3_moe_w4a16", MOESERVE_QWEN3_W4A16_DIR, false, MOESERVE_QWEN3_PROMPT, 2e-5f, false},
        SeamCase{"deepseek_v3_fp8", MOESERVE_DSV3_FP8_DIR, false, MOESERVE_DSV3_PROMPT, 2e-5f, false},
        SeamCase{"gguf_q4_k", MOESERVE_GGUF_Q4_K_DIR, true, MOESERVE_QWEN3_PROMPT, 3e-2f, false}),
    [](const auto& test) { return std::string(test.param.name); });

TEST(BackendSeamTest, ModelOpsAndStorageGoThroughTheSeam) {
    g_allocations = g_norms = g_attentions = g_experts = 0;
    run_on("counting", MOESERVE_QWEN3_TINY_DIR, parse_ids(MOESERVE_QWEN3_PROMPT), 2);
    EXPECT_GT(g_allocations.load(), 0);  // the KV cache and the step buffers
    EXPECT_GT(g_norms.load(), 0);
    EXPECT_GT(g_attentions.load(), 0);
    EXPECT_GT(g_experts.load(), 0);
}

}  // namespace
}  // namespace moeserve::model
