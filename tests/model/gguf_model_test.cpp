// GGUF checkpoints (issue #27): tiny qwen3moe files written by `moeserve make-model --format gguf`
// (Q8_0, Q4_0 as a split set, Q4_K) run on their stored blocks, against the float64 numpy
// reference on the same weights dequantized, with the activations quantized as the dot products
// quantize them (reference/ref_common.py: q8_0_act, q8_k_act). Bad files: one-line errors.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include "model/model_test_util.h"
#include "moeserve/core/error.h"
#include "moeserve/io/gguf_file.h"
#include "moeserve/io/gguf_writer.h"
#include "moeserve/kernels/cpu/isa.h"
#include "moeserve/model/formats/gguf.h"
#include "moeserve/model/registry.h"
#include "moeserve/testing/generator.h"
#include "test_support.h"

namespace moeserve::model {
namespace {

namespace fs = std::filesystem;
using namespace testutil;

std::unique_ptr<Model> open(const fs::path& path, ThreadPool& pool) {
    LoadOptions o;
    o.kv_cache_dtype = "fp32";
    return load_model(path, pool, o);
}

// NOTE(#27): the bound. Weights are exact on both sides (the reference reads the same blocks
// dequantized), and each product's activations are quantized the same way, so what is left is
// f32 against f64 arithmetic: the block sums (exact integers) scaled in f32, f32 residuals and
// attention. Where those move an activation across a rounding boundary of its quantization, that
// element changes by one step (1/127 of its block's absmax for q8_0 and q8_K), which then
// propagates. Measured on this prompt with the AVX2 attention: Q8_0 9e-8, Q4_0 1e-7, Q4_K 4e-7 of the largest logit;
// the bound, 1e-3 of the largest logit, allows a handful of such one-step flips.
constexpr float kTolerance = 1e-3f;

class GgufModelTest : public ::testing::TestWithParam<const char*> {};

// The model at `path` against DIR/reference_logits.f32 on `ids`: prefill and token-by-token
// decode within the bound, and the same argmax at every position.
void expect_matches_reference(const fs::path& path, const fs::path& dir, const std::vector<int32_t>& ids,
                              float tolerance = kTolerance, bool same_argmax = true) {
    ThreadPool pool(2);
    const auto m = open(path, pool);
    const auto ref = read_f32(dir / "reference_logits.f32");
    const auto got = prefill(*m, ids);
    ASSERT_EQ(got.size(), ref.size());
    const float diff = max_abs_diff(got, ref);
    EXPECT_LE(diff, tolerance * max_abs(ref)) << dir << ": max |logit diff| " << diff << " of " << max_abs(ref);
    std::printf("%s: max |logit diff| %.3g = %.3g of the largest logit\n", dir.filename().c_str(), diff,
                diff / max_abs(ref));
    // one token at a time through the KV cache gives the same logits
    const auto dec = decode_each(*m, ids);
    EXPECT_LE(max_abs_diff(dec, ref), tolerance * max_abs(ref));
    const int64_t vocab = m->info().vocab_size;
    for (size_t t = 0; same_argmax && t < ids.size(); ++t) {
        EXPECT_EQ(argmax(got.data() + t * vocab, vocab), argmax(ref.data() + t * vocab, vocab)) << "position " << t;
    }
}

// With the AVX-512 attention (2026-12-05, Zen5; its outputs within 6e-7 of the AVX2 kernel's)
// that bound did not hold for one-step flips: dumping every q8_K / q8_0 activation row of both
// runs of the mixed file showed exactly one element one step apart (layer 0's attention output,
// token 2, as o_proj's Q5_K reads it), the routing identical, and the prefill logits 1.7% of the
// largest apart from the reference; the Q8_0 file moved by 0.23% (prefill and decode). Decode
// and the argmax at every position still agree. So these fixtures are held to 3% with the
// argmax: a wrong tensor, type or layout moves logits far more, and the dot products' bits are
// held exactly by the kernel tests (gguf_dot_test).
constexpr float kFlipTolerance = 3e-2f;

TEST_P(GgufModelTest, LogitsMatchReferenceOnDequantizedWeights) {
    const fs::path dir = GetParam();
    expect_matches_reference(gguf_in(dir), dir, parse_ids(MOESERVE_QWEN3_PROMPT), kFlipTolerance);
}

INSTANTIATE_TEST_SUITE_P(Types, GgufModelTest,
                         ::testing::Values(MOESERVE_GGUF_Q8_0_DIR, MOESERVE_GGUF_Q4_0_DIR, MOESERVE_GGUF_Q4_K_DIR,
                                           MOESERVE_GGUF_MIXED_DIR, MOESERVE_GGUF_MXFP4_DIR, MOESERVE_GGUF_K23_DIR,
                                           MOESERVE_GGUF_QWEN2_MOE_Q8_0_DIR));

// deepseek2 files (make-model --arch deepseek_v3 --format gguf): MLA, the correction-biased
// grouped router, shared experts, a dense first layer, YaRN, from the file's metadata alone.
//
// NOTE(#27): the bound for the quantized files. The tiny random DeepSeek is far more sensitive to
// its activations than the Qwen3 one: scaling its norm weights by 1 + 1e-7 noise moves the
// reference's own logits by 2% of the largest (17% with top-k routing, where a nudge switches an
// expert). So wherever f32 and f64 arithmetic put an activation on the other side of a q8_0 / q8_K
// rounding step, the logits move by about that much, and whether that happens depends on the
// kernels' summation order (the ISA). The quantized fixtures therefore run every expert (no
// switch possible) and are held to 5% of the largest logit, without the argmax; the F32 file, with
// no activation quantization, is held to the tight bound with the preset's grouped routing. The
// bit-level work of the dot products is the Qwen3 tests' (1e-3, argmax equal).
constexpr float kDeepseekQuantizedTolerance = 5e-2f;

struct DeepseekFile {
    const char* dir;
    bool quantized;
};

class GgufDeepseekTest : public ::testing::TestWithParam<DeepseekFile> {};

TEST_P(GgufDeepseekTest, LogitsMatchReferenceOnDequantizedWeights) {
    const fs::path dir = GetParam().dir;
    const bool q = GetParam().quantized;
    expect_matches_reference(gguf_in(dir), dir, parse_ids(MOESERVE_DSV3_PROMPT),
                             q ? kDeepseekQuantizedTolerance : kTolerance, !q);
}

TEST_P(GgufDeepseekTest, OnlyKvBIsHeldOutsideTheFilesBlocks) {
    // kv_b_proj, stored per head as attn_k_b + attn_v_b, is joined in f32 (decode absorbs it in
    // f32); every other tensor stays in the file's blocks
    ThreadPool pool(1);
    const fs::path path = gguf_in(GetParam().dir);
    const io::GgufCheckpoint file(path);
    uint64_t expected = 0;
    for (const auto& name : file.tensor_names()) {
        const bool kv_b = name.find("attn_k_b") != std::string::npos || name.find("attn_v_b") != std::string::npos;
        expected += kv_b ? 4 * static_cast<uint64_t>(file.info(name).shape.numel()) : file.info(name).nbytes;
    }
    const auto m = open(path, pool);
    EXPECT_EQ(static_cast<uint64_t>(m->info().weight_bytes), expected);
    EXPECT_NE(m->info().quantization.find("GGUF deepseek2"), std::string::npos) << m->info().quantization;
}

INSTANTIATE_TEST_SUITE_P(Types, GgufDeepseekTest,
                         ::testing::Values(DeepseekFile{MOESERVE_GGUF_DSV3_F32_DIR, false},
                                           DeepseekFile{MOESERVE_GGUF_DSV3_Q8_0_DIR, true},
                                           DeepseekFile{MOESERVE_GGUF_DSV3_Q4_K_DIR, true}));

// gpt-oss as llama.cpp writes it: split experts with their biases, sinks, the sliding layers and
// YaRN from the metadata. F32: the mapping, at the tight bound (measured 2e-6 of the largest
// logit). Q8_0: the activations quantized as the reference does. Each quantized family alone
// (experts, attention, output, embedding) measured within 2e-6; all of them together 2.3%, the
// one-step flips the bound above describes compounding through the layers (the same with every
// expert active, so no routing switch), so Q8_0 is held to kFlipTolerance with the argmax.
TEST(GgufModel, GptOssLogitsMatchReferenceOnDequantizedWeights) {
    const fs::path f32 = MOESERVE_GGUF_GPT_OSS_F32_DIR;
    expect_matches_reference(gguf_in(f32), f32, parse_ids(MOESERVE_QWEN3_PROMPT));
    const fs::path q8 = MOESERVE_GGUF_GPT_OSS_Q8_0_DIR;
    expect_matches_reference(gguf_in(q8), q8, parse_ids(MOESERVE_QWEN3_PROMPT), kFlipTolerance);
}

// Mixtral as a llama GGUF: q/k rows in llama.cpp's adjacent-pair order, run with adjacent-pair
// RoPE; F32, held to the tight bound (the reference runs the same permuted rows the same way, and
// equals the Hugging Face checkpoint's reference within 3e-8).
TEST(GgufModel, MixtralLlamaFileMatchesReference) {
    const fs::path dir = MOESERVE_GGUF_MIXTRAL_F32_DIR;
    expect_matches_reference(gguf_in(dir), dir, parse_ids(MOESERVE_QWEN3_PROMPT));
    const GgufModel g = open_gguf_model(gguf_in(dir));
    EXPECT_EQ(g.config.json().at("model_type"), "mixtral");
    EXPECT_EQ(g.config.json().at("rope_interleave"), true);
}

// GLM-4.5 as a glm4moe GGUF: the dense first layer, shared expert, correction bias, partial RoPE
// and q/k norms from the metadata and the tensor table; F32 at the tight bound.
TEST(GgufModel, Glm4MoeFileMatchesReference) {
    const fs::path dir = MOESERVE_GGUF_GLM4_MOE_F32_DIR;
    expect_matches_reference(gguf_in(dir), dir, parse_ids(MOESERVE_QWEN3_PROMPT));
    const GgufModel g = open_gguf_model(gguf_in(dir));
    const nlohmann::json& c = g.config.json();
    EXPECT_EQ(c.at("first_k_dense_replace"), 1);
    EXPECT_EQ(c.at("partial_rotary_factor"), 0.5);
    EXPECT_EQ(c.at("use_qk_norm"), true);
}

// Kimi-K2 as llama.cpp files it: a deepseek2 GGUF with the tokenizer under "kimi-k2", which the
// file alone serves (gguf_tokenizer_test.cpp holds its encoding to the tiktoken folder's).
TEST(GgufModel, KimiK2FileMatchesReferenceAndCarriesItsTokenizer) {
    const fs::path dir = MOESERVE_GGUF_KIMI_K2_F32_DIR;
    expect_matches_reference(gguf_in(dir), dir, parse_ids(MOESERVE_KIMI_K2_PROMPT));
    const io::GgufCheckpoint f(gguf_in(dir));
    EXPECT_EQ(f.metadata().get_string("general.architecture"), "deepseek2");
    EXPECT_EQ(f.metadata().get_string("tokenizer.ggml.pre"), "kimi-k2");
    EXPECT_EQ(f.metadata().get_int("tokenizer.ggml.bos_token_id"), 128000);
    EXPECT_EQ(f.metadata().get_int("tokenizer.ggml.eos_token_id"), 128002);
}

TEST(GgufModel, GptOssMetadataGivesTheCheckpointsConfig) {
    const GgufModel g = open_gguf_model(gguf_in(MOESERVE_GGUF_GPT_OSS_Q8_0_DIR));
    const nlohmann::json& c = g.config.json();
    const nlohmann::json preset = moeserve::testing::preset_config("gpt_oss", "tiny");
    for (const char* key :
         {"hidden_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads", "head_dim",
          "num_local_experts", "num_experts_per_tok", "intermediate_size", "sliding_window", "layer_types"}) {
        EXPECT_EQ(c.at(key), preset.at(key)) << key;
    }
    EXPECT_EQ(c.at("rope_scaling").at("factor"), 32.0);
    EXPECT_EQ(c.at("rope_scaling").at("truncate"), false);
}

TEST(GgufModel, Deepseek2MetadataGivesTheCheckpointsConfig) {
    // the config the file's metadata makes equals the preset it was written from, field by field
    const GgufModel g = open_gguf_model(gguf_in(MOESERVE_GGUF_DSV3_F32_DIR));
    const io::HfConfig written(moeserve::testing::preset_config("deepseek_v3", "tiny"), "preset");
    for (const char* key : {"hidden_size", "num_hidden_layers", "num_attention_heads", "q_lora_rank", "kv_lora_rank",
                            "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim", "n_routed_experts",
                            "n_shared_experts", "num_experts_per_tok", "first_k_dense_replace", "n_group", "topk_group",
                            "topk_method", "scoring_func", "norm_topk_prob", "routed_scaling_factor", "vocab_size"}) {
        EXPECT_EQ(g.config.json().at(key), written.json().at(key)) << key;
    }
    const auto& rope = g.config.json().at("rope_scaling");
    EXPECT_EQ(rope.at("rope_type"), "yarn");
    EXPECT_EQ(rope.at("factor"), 4.0);
    EXPECT_EQ(rope.at("original_max_position_embeddings"), 4096);
    EXPECT_NEAR(rope.at("mscale_all_dim").get<double>(), 1.0, 1e-6);
}

// Rows packed in groups of 8 at load (kernels/cpu/gguf_packed.h; the avx2 level's default),
// forced on whatever the CPU, so an AVX-512 machine runs the loaders' packing, the dropped
// mappings and the packed products too: the same reference and bound as above.
TEST(GgufModel, PackedRowsMatchReference) {
    const bool packed_before = kernels::cpu::gguf_packed_rows();
    kernels::cpu::set_gguf_packed_rows(true);
    for (const char* dir :
         {MOESERVE_GGUF_Q4_0_DIR, MOESERVE_GGUF_Q4_K_DIR, MOESERVE_GGUF_MIXED_DIR, MOESERVE_GGUF_Q8_0_DIR}) {
        SCOPED_TRACE(dir);
        {
            ThreadPool pool(1);
            EXPECT_NE(open(gguf_in(dir), pool)->info().quantization.find("repacked in groups of 8 rows"),
                      std::string::npos);
        }
        expect_matches_reference(gguf_in(dir), dir, parse_ids(MOESERVE_QWEN3_PROMPT), kFlipTolerance);
    }
    kernels::cpu::set_gguf_packed_rows(packed_before);
}

TEST(GgufModel, MixedFileHoldsTheTypesLlamaQuantizeMixes) {
    // the fixture really has the mix the parametrized test runs on (make-model --gguf-tensor-type)
    const io::GgufCheckpoint file(gguf_in(MOESERVE_GGUF_MIXED_DIR));
    EXPECT_EQ(file.info("blk.0.ffn_down_exps.weight").type, GgmlType::kQ5_0);
    EXPECT_EQ(file.info("blk.1.ffn_down_exps.weight").type, GgmlType::kQ5_1);
    EXPECT_EQ(file.info("blk.2.ffn_down_exps.weight").type, GgmlType::kQ8_0);  // 64 wide: no K-quant
    EXPECT_EQ(file.info("blk.2.ffn_up_exps.weight").type, GgmlType::kQ4_1);
    EXPECT_EQ(file.info("blk.2.ffn_gate_exps.weight").type, GgmlType::kQ4_K);
    EXPECT_EQ(file.info("blk.0.attn_v.weight").type, GgmlType::kQ6_K);
    EXPECT_EQ(file.info("output.weight").type, GgmlType::kQ6_K);
    EXPECT_EQ(file.info("token_embd.weight").type, GgmlType::kQ4_K);
}

TEST(GgufModel, Mxfp4FileHoldsMxfp4Experts) {
    // make-model --gguf-tensor-type _exps=MXFP4: the stacked experts in MXFP4, the rest Q8_0
    const io::GgufCheckpoint file(gguf_in(MOESERVE_GGUF_MXFP4_DIR));
    for (const char* part : {"gate", "up", "down"}) {
        EXPECT_EQ(file.info(std::string("blk.1.ffn_") + part + "_exps.weight").type, GgmlType::kMXFP4) << part;
    }
    EXPECT_EQ(file.info("blk.1.attn_q.weight").type, GgmlType::kQ8_0);
}

TEST(GgufModel, SplitSetLoadsFromAnySplit) {
    ThreadPool pool(1);
    const fs::path first = gguf_in(MOESERVE_GGUF_Q4_0_DIR);
    ASSERT_NE(first.filename().string().find("-00001-of-"), std::string::npos) << first;
    std::string second = first.string();
    second.replace(second.find("-00001-of-"), 10, "-00002-of-");
    const auto ids = parse_ids(MOESERVE_QWEN3_PROMPT);
    EXPECT_EQ(prefill(*open(first, pool), ids), prefill(*open(second, pool), ids));
}

// A copy of `src` with one change, for the bad-file tests.
struct Change {
    std::string architecture{};      // replaces general.architecture
    std::string drop{};              // leaves this tensor out
    std::string halve_rows{};        // writes this tensor with half its rows
    std::string retype_as_iq4_nl{};  // writes this tensor as IQ4_NL (a type moeserve refuses)
    std::string drop_key{};          // leaves this metadata key out
};

// Each test its own `scratch` folder: scratch_dir() empties it, and ctest runs tests in parallel.
fs::path rewrite(const fs::path& src, const Change& c, const std::string& name, const std::string& scratch) {
    const io::GgufCheckpoint in(src);
    io::GgufWriter w;
    for (const auto& kv : in.metadata().metadata) {
        if (kv.key == c.drop_key || kv.key.rfind("split.", 0) == 0) continue;
        if (kv.key == "general.architecture" && !c.architecture.empty()) {
            w.set_string(kv.key, c.architecture);
        } else {
            w.set(kv.key, kv.value);
        }
    }
    for (const auto& t : in.tensor_names()) {
        if (t == c.drop) continue;
        const io::GgufTensor g = in.tensor(t);
        std::string bytes(reinterpret_cast<const char*>(g.bytes.data()), g.bytes.size());
        Shape shape = g.info->shape;
        GgmlType type = g.info->type;
        if (t == c.halve_rows) {
            shape[0] /= 2;
            bytes.resize(bytes.size() / 2);
        }
        if (t == c.retype_as_iq4_nl) {
            type = GgmlType::kIQ4_NL;
            bytes.assign(*ggml_nbytes(type, static_cast<uint64_t>(shape.numel())), '\0');
        }
        w.add_tensor(t, type, shape, std::move(bytes));
    }
    const fs::path out = test::scratch_dir(scratch) / (name + ".gguf");
    w.write(out);
    return out;
}

// Loading `path` throws one line that names the file and `what`.
void expect_one_line_error(const fs::path& path, const std::string& what, ErrorCode code) {
    ThreadPool pool(1);
    try {
        open(path, pool);
        ADD_FAILURE() << path << " loaded";
    } catch (const Error& e) {
        const std::string msg = e.what();
        EXPECT_EQ(e.code(), code) << msg;
        EXPECT_NE(msg.find(path.string()), std::string::npos) << msg;
        EXPECT_NE(msg.find(what), std::string::npos) << msg;
        EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
    }
}

TEST(GgufModel, BadFilesGiveOneLineErrors) {
    const fs::path src = gguf_in(MOESERVE_GGUF_Q8_0_DIR);
    expect_one_line_error(rewrite(src, {.architecture = "falcon"}, "arch", "gguf_bad"), "general.architecture 'falcon'",
                          ErrorCode::kUnsupported);
    // llama is read for Mixtral: a file without llama.expert_count is a dense model
    expect_one_line_error(rewrite(src, {.architecture = "llama"}, "dense", "gguf_bad"),
                          "a llama GGUF without experts is a dense model", ErrorCode::kUnsupported);
    expect_one_line_error(rewrite(src, {.drop = "blk.1.ffn_up_exps.weight"}, "missing", "gguf_bad"),
                          "'blk.1.ffn_up_exps.weight' is missing", ErrorCode::kInvalidModel);
    expect_one_line_error(rewrite(src, {.halve_rows = "blk.0.attn_q.weight"}, "shape", "gguf_bad"),
                          "'blk.0.attn_q.weight'", ErrorCode::kInvalidModel);
    expect_one_line_error(rewrite(src, {.halve_rows = "blk.2.ffn_down_exps.weight"}, "stacked", "gguf_bad"),
                          "'blk.2.ffn_down_exps.weight' has shape [4, 128, 64]", ErrorCode::kInvalidModel);
    expect_one_line_error(rewrite(src, {.retype_as_iq4_nl = "blk.0.attn_k.weight"}, "type", "gguf_bad"), "IQ4_NL",
                          ErrorCode::kUnsupported);
    expect_one_line_error(rewrite(src, {.drop_key = "qwen3moe.expert_count"}, "key", "gguf_bad"),
                          "qwen3moe.expert_count", ErrorCode::kInvalidModel);
}

TEST(GgufModel, BadDeepseek2FilesGiveOneLineErrors) {
    const fs::path src = gguf_in(MOESERVE_GGUF_DSV3_F32_DIR);
    expect_one_line_error(rewrite(src, {.drop = "blk.1.attn_k_b.weight"}, "no_k_b", "gguf_bad_deepseek2"),
                          "'blk.1.attn_k_b.weight' and 'blk.1.attn_v_b.weight' (or the older 'blk.1.attn_kv_b.weight') "
                          "are missing",
                          ErrorCode::kInvalidModel);
    expect_one_line_error(rewrite(src, {.halve_rows = "blk.0.attn_v_b.weight"}, "v_b_shape", "gguf_bad_deepseek2"),
                          "blk.0.attn_k_b.weight / blk.0.attn_v_b.weight", ErrorCode::kInvalidModel);
    expect_one_line_error(
        rewrite(src, {.drop_key = "deepseek2.attention.kv_lora_rank"}, "kv_lora", "gguf_bad_deepseek2"),
        "deepseek2.attention.kv_lora_rank", ErrorCode::kInvalidModel);
    expect_one_line_error(rewrite(src, {.drop = "blk.2.exp_probs_b.bias"}, "layer_bias", "gguf_bad_deepseek2"),
                          "'blk.2.exp_probs_b.bias' is missing", ErrorCode::kInvalidModel);
}

}  // namespace
}  // namespace moeserve::model
