// MindSpore golden-stick A8W8 checkpoints (MindFormers names, issue #20): malformed copies of the
// make-model fixture give errors naming the file and the MindFormers tensor, the rope row order
// matters, and checkpoints moeserve does not load (qwen3_moe in MindFormers names, a flag on a
// checkpoint that runs as stored) are refused. Logits vs the float64 reference:
// ascend_formats_test.cpp; TP=2: w8a8_parallel_test.cpp.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cstring>
#include <fstream>
#include <functional>
#include <span>
#include <unistd.h>

#include "model/model_test_util.h"
#include "moeserve/core/error.h"
#include "moeserve/io/safetensors_writer.h"
#include "moeserve/io/weight_source.h"
#include "moeserve/model/registry.h"

namespace moeserve::model {
namespace {

namespace fs = std::filesystem;

LoadOptions options(const std::string& quantization = "") {
    LoadOptions o;
    o.max_model_len = 64;
    o.quantization = quantization;
    return o;
}

// A copy of the golden-stick fixture in one ms_a8w8.safetensors; `edit` writes a tensor changed
// (returning true) or leaves it to the plain copy; `extra` adds tensors.
using TensorEdit = std::function<bool(const std::string&, const TensorView&, io::SafetensorsWriter&)>;
fs::path edited_copy(const std::string& tag, const TensorEdit& edit,
                     const std::function<void(io::SafetensorsWriter&)>& extra = {}) {
    const fs::path src = MOESERVE_DSV3_MINDSPORE_DIR;
    const fs::path dst = fs::temp_directory_path() / ("moeserve_golden_" + tag + "_" + std::to_string(::getpid()));
    fs::remove_all(dst);
    fs::create_directories(dst);
    for (const char* f : {"config.json", "tokenizer.json", "tokenizer_config.json"}) fs::copy_file(src / f, dst / f);
    const auto w = io::WeightSource::open(src);
    io::SafetensorsWriter writer;
    for (const auto& name : w->names()) {
        const TensorView t = w->get(name);
        if (!edit(name, t, writer)) writer.add(name, t.dtype, t.shape, t.data);
    }
    if (extra) extra(writer);
    writer.write(dst / "ms_a8w8.safetensors");
    return dst;
}

std::string load_error(const fs::path& dir, const std::string& quantization = "") {
    ThreadPool pool(1);
    std::string msg = "(loaded without error)";
    try {
        load_model(dir, pool, options(quantization));
    } catch (const Error& e) {
        msg = e.what();
    }
    fs::remove_all(dir);
    return msg;
}

bool has(const std::string& msg, const std::string& part) { return msg.find(part) != std::string::npos; }

// Replaces tensor `target` by `make(t)`'s bytes (same dtype and shape unless make says otherwise).
TensorEdit replace(const std::string& target, std::function<void(const TensorView&, io::SafetensorsWriter&)> make) {
    return [target, make](const std::string& name, const TensorView& t, io::SafetensorsWriter& w) {
        if (name != target) return false;
        make(t, w);
        return true;
    };
}

TEST(GoldenStickMalformedTest, MissingTensor) {
    const std::string name = "model.layers.1.attention.wo.quant_op.input_zp";
    const std::string msg = load_error(edited_copy(
        "missing", [&](const std::string& n, const TensorView&, io::SafetensorsWriter&) { return n == name; }));
    EXPECT_TRUE(has(msg, "'" + name + "' is missing")) << msg;
}

TEST(GoldenStickMalformedTest, WrongQuantBiasDtype) {
    const std::string name = "model.layers.2.attention.kv2l._layer.matmul.quant_bias";
    const std::string msg = load_error(edited_copy("bias", replace(name, [&](const TensorView& t, auto& w) {
                                                       std::vector<float> f(static_cast<size_t>(t.numel()), 1.0f);
                                                       w.add(name, DType::kF32, t.shape, f.data());
                                                   })));
    EXPECT_TRUE(has(msg, "'" + name + "' in ")) << msg;
    EXPECT_TRUE(has(msg, "ms_a8w8.safetensors")) << msg;
    EXPECT_TRUE(has(msg, "expected I32")) << msg;
}

TEST(GoldenStickMalformedTest, ExpertsNotInMajor) {
    // [E, out, in] (HF order) instead of MindFormers' [E, in, out]
    const std::string name = "model.layers.1.feed_forward.routed_experts.ffn.w1._layer.weight";
    const std::string msg =
        load_error(edited_copy("experts", replace(name, [&](const TensorView& t, auto& w) {
                                   w.add(name, t.dtype, Shape{t.dim(0), t.dim(2), t.dim(1)}, t.data);
                               })));
    EXPECT_TRUE(has(msg, "'" + name + "' in ")) << msg;
    EXPECT_TRUE(has(msg, "expected I8 [16, 128, 64]")) << msg;
}

TEST(GoldenStickMalformedTest, ZeroPointNotTiled) {
    const std::string name = "model.layers.0.attention.q2l_proj.quant_op.input_zp";
    const std::string msg = load_error(edited_copy("zp", replace(name, [&](const TensorView& t, auto& w) {
                                                       std::vector<int8_t> z(static_cast<size_t>(t.numel()));
                                                       std::memcpy(z.data(), t.data, z.size());
                                                       z[5] = static_cast<int8_t>(z[5] + 1);
                                                       w.add(name, DType::kI8, t.shape, z.data());
                                                   })));
    EXPECT_TRUE(has(msg, "'" + name + "' (read as 'model.layers.0.self_attn.q_a_proj.input_offset')")) << msg;
    EXPECT_TRUE(has(msg, "one zero point")) << msg;
}

TEST(GoldenStickMalformedTest, NonPositiveInputScale) {
    const std::string name = "model.layers.2.attention.l2q_proj.quant_op.input_scale";
    const std::string msg = load_error(edited_copy("scale", replace(name, [&](const TensorView& t, auto& w) {
                                                       std::vector<uint16_t> s(static_cast<size_t>(t.numel()));
                                                       std::memcpy(s.data(), t.data, s.size() * 2);
                                                       s[3] = 0;  // bf16 +0
                                                       w.add(name, DType::kBF16, t.shape, s.data());
                                                   })));
    EXPECT_TRUE(has(msg, "'" + name + "'")) << msg;
    EXPECT_TRUE(has(msg, "positive and finite")) << msg;
}

TEST(GoldenStickMalformedTest, UnknownTensorsAreRefused) {
    // OSP's beta would shift the activations: refused, never dropped
    const std::string beta = "model.layers.0.attention.q2l_proj.quant_op.beta";
    std::string msg = load_error(edited_copy(
        "beta", [](const std::string&, const TensorView&, io::SafetensorsWriter&) { return false; },
        [&](io::SafetensorsWriter& w) {
            const std::vector<uint16_t> b(128, 0);
            w.add(beta, DType::kBF16, {128}, b.data());
        }));
    EXPECT_TRUE(has(msg, "'" + beta + "' in ")) << msg;
    EXPECT_TRUE(has(msg, "OSP")) << msg;
    // an unsplit ffn_concat tensor
    const std::string fused = "model.layers.0.feed_forward.w_gate_hidden._layer.weight";
    msg = load_error(edited_copy(
        "fused", [](const std::string&, const TensorView&, io::SafetensorsWriter&) { return false; },
        [&](io::SafetensorsWriter& w) {
            const std::vector<int8_t> b(4, 0);
            w.add(fused, DType::kI8, {2, 2}, b.data());
        }));
    EXPECT_TRUE(has(msg, "'" + fused + "'")) << msg;
    EXPECT_TRUE(has(msg, "keep one")) << msg;  // w1 and w3 are there too
}

// concat of a and b along axis (0 or the last) of [outer, dim, inner] views
std::vector<char> concat(const TensorView& a, const TensorView& b, int axis, Shape* shape) {
    std::vector<int64_t> dims(a.shape.dims().begin(), a.shape.dims().end());
    int64_t outer = 1, inner = 1;
    for (int i = 0; i < a.shape.rank(); ++i) {
        if (i < axis) outer *= dims[size_t(i)];
        if (i > axis) inner *= dims[size_t(i)];
    }
    const size_t es = dtype_size(a.dtype);
    const size_t ra = size_t(a.dim(axis) * inner) * es, rb = size_t(b.dim(axis) * inner) * es;
    std::vector<char> out;
    for (int64_t o = 0; o < outer; ++o) {
        out.insert(out.end(), static_cast<const char*>(a.data) + o * ra,
                   static_cast<const char*>(a.data) + (o + 1) * ra);
        out.insert(out.end(), static_cast<const char*>(b.data) + o * rb,
                   static_cast<const char*>(b.data) + (o + 1) * rb);
    }
    dims[size_t(axis)] = a.dim(axis) + b.dim(axis);
    *shape = Shape(std::span<const int64_t>(dims));
    return out;
}

TEST(GoldenStickTest, FusedNamesAreSplit) {
    // ffn_concat / qkv_concat left in: the dense MLP (layer 0), the shared experts (layer 1), the
    // routed experts (layer 2, last axis) and q2l_proj + kv2l (layer 1) fused; same logits
    const auto src = io::WeightSource::open(MOESERVE_DSV3_MINDSPORE_DIR);
    struct Pair {
        std::string a, b, fused;
        int axis;
    };
    std::vector<Pair> pairs;
    const std::vector<std::pair<std::string, int>> ffns = {{"model.layers.0.feed_forward.", 0},
                                                           {"model.layers.1.feed_forward.shared_experts.", 0},
                                                           {"model.layers.2.feed_forward.routed_experts.ffn.", -1}};
    for (const auto& [f, axis] : ffns) {
        for (const char* t : {"._layer.weight", "._layer.matmul.weight_scale"}) {
            pairs.push_back({f + "w1" + t, f + "w3" + t, f + "w_gate_hidden" + t, axis});
        }
    }
    const std::string a = "model.layers.1.attention.";
    for (const char* t : {"._layer.weight", "._layer.matmul.dequant_scale", "._layer.matmul.quant_bias"}) {
        pairs.push_back({a + "q2l_proj" + t, a + "kv2l" + t, a + "qkv2l" + t, 0});
    }
    const fs::path dir = edited_copy(
        "fused_split",
        [&](const std::string& name, const TensorView&, io::SafetensorsWriter&) {
            if (name.rfind(a + "q2l_proj.quant_op.", 0) == 0 || name.rfind(a + "kv2l.quant_op.", 0) == 0) return true;
            for (const Pair& p : pairs) {
                if (name == p.a || name == p.b) return true;  // written fused below
            }
            return false;
        },
        [&](io::SafetensorsWriter& w) {
            for (const Pair& p : pairs) {
                const TensorView ta = src->get(p.a), tb = src->get(p.b);
                Shape shape;
                const auto bytes = concat(ta, tb, p.axis < 0 ? ta.shape.rank() - 1 : p.axis, &shape);
                w.add(p.fused, ta.dtype, shape, bytes.data());
            }
            for (const char* t : {"quant_op.input_scale", "quant_op.input_zp"}) {
                const TensorView v = src->get(a + "q2l_proj." + t);
                w.add(a + "qkv2l." + t, v.dtype, v.shape, v.data);
            }
        });
    ThreadPool pool(2);
    const auto ids = testutil::parse_ids(MOESERVE_DSV3_PROMPT);
    const auto base = testutil::prefill(*load_model(MOESERVE_DSV3_MINDSPORE_DIR, pool, options()), ids);
    const auto fused = testutil::prefill(*load_model(dir, pool, options()), ids);
    fs::remove_all(dir);
    EXPECT_EQ(testutil::max_abs_diff(base, fused), 0.0f);
}

TEST(GoldenStickTest, RopeRowOrderMatters) {
    // swapping two rope rows of kv2l (weight, dequant_scale, quant_bias alike) must change the
    // logits: the loader really reorders those rows (the reference test then checks the order)
    const std::string p = "model.layers.0.attention.kv2l._layer.";
    const int64_t row = 32;  // kv_lora_rank: the first rope row
    const fs::path dir = edited_copy("rope", [&](const std::string& name, const TensorView& t, auto& w) {
        if (name != p + "weight" && name != p + "matmul.dequant_scale" && name != p + "matmul.quant_bias") return false;
        const size_t bytes = t.nbytes() / static_cast<size_t>(t.dim(0));
        std::vector<char> d(t.nbytes());
        std::memcpy(d.data(), t.data, d.size());
        std::swap_ranges(d.begin() + row * bytes, d.begin() + (row + 1) * bytes, d.begin() + (row + 1) * bytes);
        w.add(name, t.dtype, t.shape, d.data());
        return true;
    });
    ThreadPool pool(2);
    const auto ids = testutil::parse_ids(MOESERVE_DSV3_PROMPT);
    const auto base = testutil::prefill(*load_model(MOESERVE_DSV3_MINDSPORE_DIR, pool, options()), ids);
    const auto swapped = testutil::prefill(*load_model(dir, pool, options()), ids);
    fs::remove_all(dir);
    const float diff = testutil::max_abs_diff(base, swapped);
    std::printf("swapped rope rows: max |logit diff| %.3g of max |logit| %.3g\n", diff, testutil::max_abs(base));
    EXPECT_GT(diff, 1e-2f * testutil::max_abs(base));
}

TEST(GoldenStickTest, RefusedCheckpoints) {
    // a flag other than auto on a golden-stick checkpoint
    std::string msg = load_error(
        edited_copy("flag", [](const std::string&, const TensorView&, io::SafetensorsWriter&) { return false; }),
        "w8a8");
    EXPECT_TRUE(has(msg, "golden-stick")) << msg;
    // MindFormers names in a qwen3_moe directory
    const fs::path dir = fs::temp_directory_path() / ("moeserve_golden_qwen3_" + std::to_string(::getpid()));
    fs::remove_all(dir);
    fs::create_directories(dir);
    for (const char* f : {"config.json", "tokenizer.json", "tokenizer_config.json"}) {
        fs::copy_file(fs::path(MOESERVE_QWEN3_TINY_DIR) / f, dir / f);
    }
    io::SafetensorsWriter w;
    const std::vector<uint16_t> e(16, 0);
    w.add("model.tok_embeddings.embedding_weight", DType::kBF16, {4, 4}, e.data());
    w.write(dir / "ms_a8w8.safetensors");
    msg = load_error(dir);
    EXPECT_TRUE(has(msg, "qwen3_moe")) << msg;
    EXPECT_TRUE(has(msg, "golden-stick")) << msg;
}

TEST(GoldenStickTest, QuantMethodOslWithHfNamesIsRefused) {
    // config.json says golden-stick, the tensors have HF names: the names and the config disagree
    const fs::path dir = fs::temp_directory_path() / ("moeserve_golden_hf_" + std::to_string(::getpid()));
    fs::remove_all(dir);
    fs::copy(MOESERVE_DSV3_TINY_DIR, dir, fs::copy_options::recursive);
    nlohmann::json config = nlohmann::json::parse(std::ifstream(dir / "config.json"));
    config["quantization_config"] = {{"quant_method", "osl"}};
    std::ofstream(dir / "config.json") << config.dump();
    const std::string msg = load_error(dir);
    EXPECT_TRUE(has(msg, "quant_method osl (golden-stick) but the tensors have HF names")) << msg;
    EXPECT_TRUE(has(msg, dir.string())) << msg;
}

}  // namespace
}  // namespace moeserve::model
