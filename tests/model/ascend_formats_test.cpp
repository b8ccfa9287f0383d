// The W8A8 checkpoint formats of the Ascend ecosystem on the tiny models (issue #20): Ascend
// ModelSlim (static W8A8 + W8A8_DYNAMIC mix; all-dynamic), OmniInfer's compressed-tensors
// layout and MindSpore golden-stick A8W8 (MindFormers names; its malformed cases are in
// golden_stick_test.cpp), against the float64 reference that implements the formats' arithmetic
// (tests/reference/ref_common.py: static_w8a8, quant_dequant_rows), greedy continuations, the
// load log's counts, and the errors malformed ModelSlim checkpoints give.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <functional>
#include <variant>
#include <unistd.h>
#include <nlohmann/json.hpp>

#include "model/model_test_util.h"
#include "moeserve/core/error.h"
#include "moeserve/io/safetensors_writer.h"
#include "moeserve/io/weight_source.h"
#include "moeserve/model/formats/mindformers_checkpoint.h"
#include "moeserve/model/formats/modelslim.h"
#include "moeserve/model/layers/linear.h"
#include "moeserve/model/quantization.h"
#include "moeserve/model/registry.h"
#include "moeserve/testing/sequence_runner.h"

namespace moeserve::model {
namespace {

namespace fs = std::filesystem;
using testutil::argmax;
using testutil::max_abs;
using testutil::max_abs_diff;
using testutil::parse_ids;
using testutil::read_f32;
using testutil::rows_beyond;

// The W8A8 bound of w8a8_model_test.cpp (engine f32 vs reference float64 can round an
// activation to neighbouring int8 steps at a boundary).
constexpr float kW8A8RelTolerance = 1e-4f;
constexpr int kGreedySteps = 8;

LoadOptions options(int64_t max_model_len, const std::string& quantization = "") {
    LoadOptions o;
    o.max_model_len = max_model_len;
    o.quantization = quantization;
    return o;
}

struct Format {
    const char* name;
    const char* dir;
    const char* prompt;
};

const Format kFormats[] = {
    {"qwen3_moe modelslim-w8a8", MOESERVE_QWEN3_MODELSLIM_DIR, MOESERVE_QWEN3_PROMPT},
    {"deepseek_v3 modelslim-w8a8", MOESERVE_DSV3_MODELSLIM_DIR, MOESERVE_DSV3_PROMPT},
    {"qwen3_moe modelslim-w8a8-dynamic", MOESERVE_QWEN3_MODELSLIM_DYN_DIR, MOESERVE_QWEN3_PROMPT},
    {"deepseek_v3 modelslim-w8a8-dynamic", MOESERVE_DSV3_MODELSLIM_DYN_DIR, MOESERVE_DSV3_PROMPT},
    {"qwen3_moe omniinfer-w8a8", MOESERVE_QWEN3_OMNI_DIR, MOESERVE_QWEN3_PROMPT},
    {"deepseek_v3 omniinfer-w8a8", MOESERVE_DSV3_OMNI_DIR, MOESERVE_DSV3_PROMPT},
    {"deepseek_v3 mindspore-a8w8", MOESERVE_DSV3_MINDSPORE_DIR, MOESERVE_DSV3_PROMPT},
    // the W4A8 mix: W4A8_DYNAMIC routed experts, per-token int8 activations as W8A8_DYNAMIC's
    {"qwen3_moe modelslim-w4a8", MOESERVE_QWEN3_MODELSLIM_W4A8_DIR, MOESERVE_QWEN3_PROMPT},
    {"deepseek_v3 modelslim-w4a8-channel", MOESERVE_DSV3_MODELSLIM_W4A8_DIR, MOESERVE_DSV3_PROMPT},
};

class AscendFormatsTest : public ::testing::Test {
protected:
    static void SetUpTestSuite() { pool_ = new ThreadPool(2); }
    static void TearDownTestSuite() {
        delete pool_;
        pool_ = nullptr;
    }
    static std::unique_ptr<Model> open(const fs::path& dir) { return load_model(dir, *pool_, options(256)); }
    static ThreadPool* pool_;
};
ThreadPool* AscendFormatsTest::pool_ = nullptr;

using testutil::decode_each;
using testutil::greedy;
using testutil::prefill;

TEST_F(AscendFormatsTest, LogitsMatchReference) {
    // NOTE(#20): static activations land on an int8 rounding boundary now and then: the f32 engine
    // and the float64 reference then pick neighbouring steps for that one value. In the tiny
    // DeepSeek (routing amplifies any change) one such flip moves one token's logits by ~0.4 % of
    // the largest (measured: token 14 of the DeepSeek mix, expanded attention path only; the
    // absorbed path matches to 5e-7). So every row must be within the W8A8 bound except at most
    // one, which must stay within 1 % and keep its argmax; a real bug moves every row.
    for (const Format& f : kFormats) {
        SCOPED_TRACE(f.name);
        auto m = open(f.dir);
        std::printf("%s: %s\n", f.name, m->info().quantization.c_str());
        const auto ids = parse_ids(f.prompt);
        const auto ref = read_f32(fs::path(f.dir) / "reference_logits.f32");
        const auto vocab = static_cast<size_t>(m->info().vocab_size);
        ASSERT_EQ(ref.size(), ids.size() * vocab);
        const float bound = kW8A8RelTolerance * max_abs(ref);
        const auto logits = prefill(*m, ids);
        const auto dec = decode_each(*m, ids);
        float diff = 0.0f, ddiff = 0.0f;
        const int bad = rows_beyond(logits, ref, vocab, bound, &diff, "prefill");
        const int dbad = rows_beyond(dec, ref, vocab, bound, &ddiff, "decode");
        std::printf(
            "%s: prefill max |logit - reference| = %.3g, decode %.3g, max |reference| = %.3g; rows beyond "
            "%.3g: %d, %d\n",
            f.name, diff, ddiff, max_abs(ref), bound, bad, dbad);
        EXPECT_LE(bad + dbad, 1);
        EXPECT_LE(std::max(diff, ddiff), 1e-2f * max_abs(ref));
        for (size_t t = 0; t < ids.size(); ++t) {
            EXPECT_EQ(argmax(&logits[t * vocab], int64_t(vocab)), argmax(&ref[t * vocab], int64_t(vocab))) << t;
            EXPECT_EQ(argmax(&dec[t * vocab], int64_t(vocab)), argmax(&ref[t * vocab], int64_t(vocab))) << t;
        }
    }
}

TEST_F(AscendFormatsTest, GreedyContinuationsEqualReference) {
    for (const Format& f : kFormats) {
        SCOPED_TRACE(f.name);
        std::ifstream in(fs::path(f.dir) / "reference_greedy.json");
        ASSERT_TRUE(in) << "reference_greedy.json missing in " << f.dir;
        const auto ref = nlohmann::json::parse(in);
        auto m = open(f.dir);
        const auto seq = greedy(*m, parse_ids(f.prompt), kGreedySteps);
        EXPECT_EQ(seq, ref["sequence"].get<std::vector<int32_t>>());
    }
}

TEST_F(AscendFormatsTest, LogSaysFormatAndCounts) {
    // qwen3_moe tiny: 3 layers (layer 1 dense) -> 12 attention linears, 2 routers + lm_head FLOAT,
    // 3 expert groups (2 routed, 1 dense MLP)
    auto q = open(MOESERVE_QWEN3_MODELSLIM_DIR);
    EXPECT_EQ(q->info().quantization,
              "ModelSlim checkpoint (quant_model_description.json): 12 W8A8 static + 0 W8A8_DYNAMIC + 3 FLOAT "
              "linears, 3 W8A8_DYNAMIC + 0 FLOAT expert groups");
    // deepseek_v3 tiny: 3 layers (layer 0 dense); q_a, q_b, kv_a, o static; kv_b FLOAT
    auto d = open(MOESERVE_DSV3_MODELSLIM_DIR);
    EXPECT_EQ(d->info().quantization,
              "ModelSlim checkpoint (quant_model_description.json): 12 W8A8 static + 0 W8A8_DYNAMIC + 6 FLOAT "
              "linears, 5 W8A8_DYNAMIC + 0 FLOAT expert groups");
    auto w4 = open(MOESERVE_DSV3_MODELSLIM_W4A8_DIR);
    EXPECT_EQ(w4->info().quantization,
              "ModelSlim checkpoint (quant_model_description.json): 12 W8A8 static + 0 W8A8_DYNAMIC + 6 FLOAT "
              "linears, 3 W8A8_DYNAMIC + 2 W4A8_DYNAMIC + 0 FLOAT expert groups");
    auto dd = open(MOESERVE_DSV3_MODELSLIM_DYN_DIR);
    EXPECT_NE(dd->info().quantization.find("0 W8A8 static + 12 W8A8_DYNAMIC"), std::string::npos)
        << dd->info().quantization;
    auto o = open(MOESERVE_DSV3_OMNI_DIR);
    EXPECT_NE(o->info().quantization.find("compressed-tensors"), std::string::npos) << o->info().quantization;
    // golden-stick: attention static, kv_b_proj / routers / lm_head FLOAT, MLPs and experts dynamic
    auto g = open(MOESERVE_DSV3_MINDSPORE_DIR);
    EXPECT_EQ(g->info().quantization,
              "golden-stick A8W8 checkpoint (MindFormers names): 12 static + 0 dynamic + 6 FLOAT linears, 5 dynamic + "
              "0 FLOAT expert groups");
}

// A copy of a ModelSlim fixture in one quant_model_weights.safetensors, with `edit` deciding each
// tensor (write it changed, or leave it to the default copy by returning false), and the
// description changed by `edit_desc`.
using TensorEdit = std::function<bool(const std::string&, const TensorView&, io::SafetensorsWriter&)>;
fs::path malformed_copy(const std::string& tag, const TensorEdit& edit,
                        const std::function<void(nlohmann::json&)>& edit_desc,
                        const fs::path& src = MOESERVE_QWEN3_MODELSLIM_DIR) {
    const fs::path dst = fs::temp_directory_path() / ("moeserve_ascend_" + tag + "_" + std::to_string(::getpid()));
    fs::remove_all(dst);
    fs::create_directories(dst);
    for (const char* f : {"config.json", "tokenizer.json", "tokenizer_config.json"}) fs::copy_file(src / f, dst / f);
    const auto w = io::WeightSource::open(src);
    io::SafetensorsWriter writer;
    for (const auto& name : w->names()) {
        const TensorView t = w->get(name);
        if (!edit(name, t, writer)) writer.add(name, t.dtype, t.shape, t.data);
    }
    writer.write(dst / "quant_model_weights.safetensors");
    std::ifstream in(src / "quant_model_description.json");
    nlohmann::json desc = nlohmann::json::parse(in);
    edit_desc(desc);
    std::ofstream(dst / "quant_model_description.json") << desc.dump();
    return dst;
}

std::string load_error(const fs::path& dir) {
    ThreadPool pool(1);
    try {
        load_model(dir, pool, options(64));
    } catch (const Error& e) {
        fs::remove_all(dir);
        return e.what();
    }
    fs::remove_all(dir);
    return "(loaded without error)";
}

const TensorEdit kKeep = [](const std::string&, const TensorView&, io::SafetensorsWriter&) { return false; };

TEST(AscendMalformedTest, DescriptionMissingALinear) {
    const std::string msg = load_error(
        malformed_copy("missing", kKeep, [](nlohmann::json& d) { d.erase("model.layers.1.self_attn.o_proj.weight"); }));
    EXPECT_NE(msg.find("no entry for 'model.layers.1.self_attn.o_proj.weight'"), std::string::npos) << msg;
    EXPECT_NE(msg.find("quant_model_description.json"), std::string::npos) << msg;
}

TEST(AscendMalformedTest, UnknownType) {
    const std::string msg = load_error(malformed_copy(
        "unknown", kKeep, [](nlohmann::json& d) { d["model.layers.0.mlp.experts.0.gate_proj.weight"] = "W4A4_X"; }));
    EXPECT_NE(msg.find("'model.layers.0.mlp.experts.0.gate_proj.weight' has type 'W4A4_X'"), std::string::npos) << msg;
}

TEST(AscendMalformedTest, FusedShardsWithDifferentScales) {
    const std::string msg = load_error(malformed_copy(
        "fused",
        [](const std::string& name, const TensorView& t, io::SafetensorsWriter& w) {
            if (name != "model.layers.2.self_attn.k_proj.input_scale") return false;
            const float v = 1.5f * *static_cast<const float*>(t.data);
            w.add(name, DType::kF32, t.shape, &v);
            return true;
        },
        [](nlohmann::json&) {}));
    EXPECT_NE(msg.find("'model.layers.2.self_attn.q_proj.input_scale'"), std::string::npos) << msg;
    EXPECT_NE(msg.find("'model.layers.2.self_attn.k_proj.input_scale'"), std::string::npos) << msg;
}

TEST(AscendMalformedTest, WrongDtypeForDeqScale) {
    const std::string msg = load_error(malformed_copy(
        "deq",
        [](const std::string& name, const TensorView& t, io::SafetensorsWriter& w) {
            if (name != "model.layers.0.self_attn.q_proj.deq_scale") return false;
            std::vector<uint16_t> h(static_cast<size_t>(t.numel()), 0x3c00);
            w.add(name, DType::kF16, t.shape, h.data());
            return true;
        },
        [](nlohmann::json&) {}));
    EXPECT_NE(msg.find("'model.layers.0.self_attn.q_proj.deq_scale' in "), std::string::npos) << msg;
    EXPECT_NE(msg.find("has dtype F16"), std::string::npos) << msg;
}

TEST(AscendMalformedTest, NonzeroWeightOffset) {
    const std::string msg = load_error(malformed_copy(
        "offset",
        [](const std::string& name, const TensorView& t, io::SafetensorsWriter& w) {
            if (name != "model.layers.0.mlp.experts.3.up_proj.weight_offset") return false;
            std::vector<float> v(static_cast<size_t>(t.numel()), 0.0f);
            v[1] = 2.0f;
            w.add(name, DType::kF32, t.shape, v.data());
            return true;
        },
        [](nlohmann::json&) {}));
    EXPECT_NE(msg.find("'model.layers.0.mlp.experts.3.up_proj.weight_offset' has a nonzero value"), std::string::npos)
        << msg;
}

// The W4A8 mix's routed experts (W4A8_DYNAMIC, packed rows, per-group second scales).
const TensorEdit replace_tensor(const std::string& target, DType dtype, const Shape& shape, float value) {
    return [=](const std::string& name, const TensorView&, io::SafetensorsWriter& w) {
        if (name != target) return false;
        std::vector<float> f(static_cast<size_t>(shape.numel()), value);
        std::vector<int8_t> b(f.size(), static_cast<int8_t>(value));
        w.add(name, dtype, shape, dtype == DType::kI8 ? static_cast<const void*>(b.data()) : f.data());
        return true;
    };
}

std::string w4a8_error(
    const std::string& tag, const TensorEdit& edit,
    const std::function<void(nlohmann::json&)>& edit_desc = [](nlohmann::json&) {}) {
    return load_error(malformed_copy(tag, edit, edit_desc, MOESERVE_QWEN3_MODELSLIM_W4A8_DIR));
}

TEST(AscendMalformedTest, W4A8WeightOfNeitherLayout) {
    const std::string name = "model.layers.0.mlp.experts.1.gate_proj.weight";
    ThreadPool pool(1);
    const auto w = io::WeightSource::open(MOESERVE_QWEN3_MODELSLIM_W4A8_DIR);
    const Shape packed = w->get(name).shape;  // [rows / 2, cols]
    const std::string msg = w4a8_error("w4a8shape", replace_tensor(name, DType::kI8, {packed[0] / 2, packed[1]}, 1));
    EXPECT_NE(msg.find("'" + name + "'"), std::string::npos) << msg;
    EXPECT_NE(msg.find("a W4A8_DYNAMIC weight is I8"), std::string::npos) << msg;
}

TEST(AscendMalformedTest, W4A8NonzeroSecondOffset) {
    const std::string name = "model.layers.0.mlp.experts.2.down_proj.weight_offset_second";
    const auto w = io::WeightSource::open(MOESERVE_QWEN3_MODELSLIM_W4A8_DIR);
    const std::string msg = w4a8_error("w4a8off", replace_tensor(name, DType::kF32, w->get(name).shape, 1.0f));
    EXPECT_NE(msg.find("'" + name + "' has a nonzero value"), std::string::npos) << msg;
}

TEST(AscendMalformedTest, W4A8SecondScalesThatDoNotSplitTheColumns) {
    const std::string name = "model.layers.0.mlp.experts.0.up_proj.weight_scale_second";
    const auto w = io::WeightSource::open(MOESERVE_QWEN3_MODELSLIM_W4A8_DIR);
    const Shape shape = w->get(name).shape;
    const std::string msg = w4a8_error("w4a8second", replace_tensor(name, DType::kF32, {shape[0], 3}, 0.5f));
    EXPECT_NE(msg.find("'" + name + "'"), std::string::npos) << msg;
    EXPECT_NE(msg.find("per-group scales"), std::string::npos) << msg;
}

TEST(AscendMalformedTest, W4A8ExpertsOfMixedTypes) {
    const std::string msg = w4a8_error("w4a8mixed", kKeep, [](nlohmann::json& d) {
        d["model.layers.0.mlp.experts.5.gate_proj.weight"] = "W8A8_DYNAMIC";
    });
    // the shape check meets it first: an int8 weight must be [rows, cols], the file holds packed int4
    EXPECT_NE(msg.find("'model.layers.0.mlp.experts.5.gate_proj.weight'"), std::string::npos) << msg;
}

TEST(AscendMalformedTest, RequestedQuantizationIsRefused) {
    ThreadPool pool(1);
    try {
        load_model(MOESERVE_QWEN3_MODELSLIM_DIR, pool, options(64, "none"));
        ADD_FAILURE() << "no error";
    } catch (const Error& e) {
        EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
        EXPECT_NE(std::string(e.what()).find("ModelSlim checkpoint"), std::string::npos) << e.what();
    }
}

// The static linear `prefix` split by input columns over 2 TP ranks: the quantization is
// elementwise (per tensor, or per input channel with the divisors sliced with the columns), so
// the partial sums add up; quant_bias is added by the first rank only.
void check_row_parallel_static(const io::WeightSource& w, const Quantization& q, const std::string& prefix) {
    SCOPED_TRACE(prefix);
    const TensorView wv = w.get(prefix + ".weight");
    const int64_t n = wv.dim(0), k = wv.dim(1), rows = 5;
    const Linear full = Linear::load(w, prefix, n, k, false, q);
    ASSERT_TRUE(std::holds_alternative<StaticInt8Weight>(full.weight()));
    const Linear r0 = Linear::load_shard(w, prefix, n, k, {0, -1, 0, k / 2}, false, q);
    const Linear r1 = Linear::load_shard(w, prefix, n, k, {0, -1, k / 2, k / 2}, false, q);
    std::vector<float> x(static_cast<size_t>(rows * k)), x0(static_cast<size_t>(rows * k / 2)),
        x1(static_cast<size_t>(rows * k / 2));
    for (size_t i = 0; i < x.size(); ++i) x[i] = std::sin(0.37f * float(i)) * 2.0f;
    for (int64_t r = 0; r < rows; ++r) {
        for (int64_t c = 0; c < k / 2; ++c) {
            x0[size_t(r * k / 2 + c)] = x[size_t(r * k + c)];
            x1[size_t(r * k / 2 + c)] = x[size_t(r * k + k / 2 + c)];
        }
    }
    ThreadPool pool(1);
    std::vector<float> y(static_cast<size_t>(rows * n)), y0(y.size()), y1(y.size());
    full.forward(pool, x.data(), rows, y.data());
    r0.forward(pool, x0.data(), rows, y0.data());
    r1.forward(pool, x1.data(), rows, y1.data());
    float diff = 0.0f, big = 0.0f;
    for (size_t i = 0; i < y.size(); ++i) {
        diff = std::max(diff, std::fabs(y0[i] + y1[i] - y[i]));
        big = std::max(big, std::fabs(y[i]));
    }
    std::printf("static %s TP=2 partial sums vs full: max diff %.3g of max %.3g\n", prefix.c_str(), diff, big);
    EXPECT_LE(diff, 1e-5f * big);
}

TEST(AscendStaticLinearTest, RowParallelShardsSumToTheFullLinear) {
    const std::string dir = MOESERVE_QWEN3_MODELSLIM_DIR;
    check_row_parallel_static(*io::WeightSource::open(dir),
                              resolve_quantization(io::HfConfig::from_model_dir(dir), "", dir),
                              "model.layers.2.self_attn.o_proj");
    // golden-stick: q_b_proj has per-channel divisors (column-split here only to test the slicing)
    const std::string gdir = MOESERVE_DSV3_MINDSPORE_DIR;
    const io::HfConfig cfg = io::HfConfig::from_model_dir(gdir);
    const auto g = mindformers_deepseek_as_hf(io::WeightSource::open(gdir), DeepseekV3Config::from_json(cfg));
    const Quantization gq = resolve_quantization(cfg, "", gdir);
    check_row_parallel_static(*g, gq, "model.layers.1.self_attn.q_b_proj");
    check_row_parallel_static(*g, gq, "model.layers.1.self_attn.o_proj");
}

TEST(AscendMalformedTest, QuantizationAscendFlag) {
    // vllm-ascend's old --quantization ascend: accepted on a ModelSlim checkpoint only
    ThreadPool pool(1);
    EXPECT_NE(load_model(MOESERVE_QWEN3_MODELSLIM_DIR, pool, options(64, "ascend")), nullptr);
    EXPECT_THROW(load_model(MOESERVE_QWEN3_OMNI_DIR, pool, options(64, "ascend")), Error);
}

TEST(AscendDescriptionTest, SkipsMetaKeysAndNonStrings) {
    const auto m = parse_modelslim_description({{"model_quant_type", "W8A8_DYNAMIC"},
                                                {"version", "1.0.0"},
                                                {"metadata", {{"a", 1}}},
                                                {"group_size", 0},
                                                {"x.weight", "W8A8"},
                                                {"y.weight", "FLOAT"}},
                                               "test");
    EXPECT_EQ(m.size(), 2u);
    EXPECT_EQ(m.at("x.weight"), "W8A8");
}

TEST(AscendDescriptionTest, DetectionOrder) {
    // a description wins over config.json's quantization_config (MindIE writes one without
    // quant_method); the MindIE file name quant_model_description_*.json is accepted too
    const fs::path dir = fs::temp_directory_path() / ("moeserve_ascend_detect_" + std::to_string(::getpid()));
    fs::remove_all(dir);
    fs::create_directories(dir);
    const io::HfConfig mindie(
        {{"model_type", "deepseek_v3"}, {"quantization_config", {{"kv_quant_type", nullptr}, {"group_size", 0}}}},
        "test config.json");
    std::ofstream(dir / "quant_model_description_w8a8_dynamic.json")
        << R"({"model_quant_type": "W8A8_DYNAMIC", "a.weight": "W8A8_DYNAMIC", "b.weight": "W8A8"})";
    const Quantization q = resolve_quantization(mindie, "", dir);
    EXPECT_EQ(q.checkpoint, CheckpointQuant::kModelSlim);
    EXPECT_EQ(q.scheme("a"), LinearScheme::kW8A8Dynamic);
    EXPECT_EQ(q.scheme("b"), LinearScheme::kW8A8Static);
    EXPECT_TRUE(q.int8_module("a"));
    EXPECT_FALSE(q.int8_module("b"));  // static: its own path
    // without a description the same config is an unknown quant_method
    fs::remove(dir / "quant_model_description_w8a8_dynamic.json");
    EXPECT_THROW(resolve_quantization(mindie, "", dir), Error);
    fs::remove_all(dir);
}

TEST(AscendDescriptionTest, OmniInferConfigs) {
    // weights.num_bits as a {module: bits} object (all 8 accepted, 4 refused), npu_w8a8_dynamic
    nlohmann::json ct = {
        {"quant_method", "compressed-tensors"},
        {"format", "int-quantized"},
        {"ignore", {"model.layers.0.self_attn.kv_b_proj"}},
        {"config_groups",
         {{"group_0",
           {{"weights",
             {{"num_bits", {{"self_attn.kv_a_proj_with_mqa", 8}, {"mlp.experts", 8}}},
              {"type", "int"},
              {"symmetric", true},
              {"strategy", "channel"}}},
            {"input_activations",
             {{"num_bits", 8}, {"type", "int"}, {"symmetric", true}, {"strategy", "token"}, {"dynamic", true}}}}}}}};
    const auto cfg = [](const nlohmann::json& q) {
        return io::HfConfig({{"model_type", "deepseek_v3"}, {"quantization_config", q}}, "test config.json");
    };
    EXPECT_EQ(resolve_quantization(cfg(ct), "").checkpoint, CheckpointQuant::kW8A8Int8);
    ct["config_groups"]["group_0"]["weights"]["num_bits"]["mlp.experts"] = 4;
    try {
        resolve_quantization(cfg(ct), "");
        ADD_FAILURE() << "no error";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("'mlp.experts' 4 bits"), std::string::npos) << e.what();
    }
    const Quantization npu = resolve_quantization(
        cfg({{"quant_method", "npu_w8a8_dynamic"}, {"ignored_layers", {"model.layers.0.mlp.gate_proj"}}}), "");
    EXPECT_EQ(npu.checkpoint, CheckpointQuant::kW8A8Int8);
    EXPECT_FALSE(npu.int8_module("model.layers.0.mlp.gate_proj"));
    EXPECT_TRUE(npu.int8_module("model.layers.0.mlp.up_proj"));
}

TEST(AscendDescriptionTest, GoldenStickRunsAsStored) {
    const io::HfConfig c({{"model_type", "deepseek_v3"}, {"quantization_config", {{"quant_method", "osl"}}}},
                         "test config.json");
    const Quantization q = resolve_quantization(c, "");
    EXPECT_EQ(q.checkpoint, CheckpointQuant::kGoldenStick);
    EXPECT_EQ(q.scheme("model.layers.0.self_attn.kv_a_proj_with_mqa"), LinearScheme::kW8A8Static);
    // kv_b_proj and the router are kept high precision by the layers that load them
    EXPECT_EQ(q.scheme("model.layers.0.self_attn.kv_b_proj", LayerPrecision::kDequantized), LinearScheme::kFloat);
    EXPECT_EQ(q.scheme("model.layers.1.mlp.experts.3.down_proj"), LinearScheme::kW8A8Dynamic);
    EXPECT_EQ(q.scheme("model.layers.1.mlp.gate", LayerPrecision::kHigh), LinearScheme::kFloat);
    EXPECT_EQ(q.scheme("lm_head"), LinearScheme::kFloat);
    try {
        resolve_quantization(c, "w8a8");
        ADD_FAILURE() << "no error";
    } catch (const Error& e) {
        EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
        EXPECT_NE(std::string(e.what()).find("golden-stick"), std::string::npos) << e.what();
    }
}

}  // namespace
}  // namespace moeserve::model
