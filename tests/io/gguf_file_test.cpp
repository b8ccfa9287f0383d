// GgufWriter -> GgufFile / GgufCheckpoint round trips (metadata of every type, tensors of
// several types and alignments, zero-copy views), split files written like llama.cpp's
// gguf-split, and the file-level refusals: unsupported types, broken split sets.
#include "moeserve/io/gguf_file.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "io/gguf_test_util.h"
#include "moeserve/io/gguf_writer.h"
#include "moeserve/io/weight_source.h"
#include "test_support.h"

namespace moeserve::io {
namespace {

using test::expect_one_line_error;

std::string pattern(size_t n, int seed) {
    std::string s(n, '\0');
    for (size_t i = 0; i < n; ++i) s[i] = static_cast<char>((i * 31 + static_cast<size_t>(seed) * 7) & 0xff);
    return s;
}

GgufWriter sample_writer(uint32_t alignment) {
    GgufWriter w(alignment);
    w.set_string("general.architecture", "qwen3moe");
    w.set_u32("qwen3moe.block_count", 2);
    w.set_f32("qwen3moe.rope.freq_base", 1e6f);
    w.set("flag", GgufValue::of<GgufValueType::kBool>(true));
    w.set("big", GgufValue::of<GgufValueType::kUint64>(uint64_t{1} << 40));
    w.set("neg", GgufValue::of<GgufValueType::kInt8>(int8_t{-3}));
    w.set("pi", GgufValue::of<GgufValueType::kFloat64>(3.25));
    w.set("tokenizer.ggml.tokens", GgufValue::of<GgufValueType::kArray>(GgufArray::of_strings({"<s>", "a", "bc"})));
    w.set("tokenizer.ggml.token_type", GgufValue::of<GgufValueType::kArray>(GgufArray::of_int32({3, 1, 1})));
    w.set("scores", GgufValue::of<GgufValueType::kArray>(GgufArray::of_float32({-1.0f, 0.5f})));
    w.set("nested", GgufValue::of<GgufValueType::kArray>(
                        GgufArray::of_arrays({GgufArray::of_strings({"x"}), GgufArray::of_int32({})})));
    w.add_tensor("blk.0.ffn_down_exps.weight", GgmlType::kQ4_K, Shape{2, 3, 256}, pattern(6 * 144, 1));
    w.add_tensor("output_norm.weight", GgmlType::kF32, Shape{5}, pattern(20, 2));
    w.add_tensor("token_embd.weight", GgmlType::kQ8_0, Shape{4, 64}, pattern(4 * 2 * 34, 3));
    w.add_tensor("blk.0.attn_q.weight", GgmlType::kBF16, Shape{3, 7}, pattern(42, 4));
    return w;
}

void expect_sample(const GgufCheckpoint& c) {
    const GgufHeader& h = c.metadata();
    EXPECT_EQ(h.get_string("general.architecture"), "qwen3moe");
    EXPECT_EQ(h.get_int("qwen3moe.block_count"), 2);
    EXPECT_EQ(h.find("qwen3moe.block_count")->type(), GgufValueType::kUint32);
    EXPECT_EQ(h.get_float("qwen3moe.rope.freq_base"), 1e6);
    EXPECT_TRUE(h.get_bool("flag"));
    EXPECT_EQ(h.get_int("big"), int64_t{1} << 40);
    EXPECT_EQ(h.get_int("neg"), -3);
    EXPECT_EQ(h.get_float("pi"), 3.25);
    EXPECT_EQ(h.get_array("tokenizer.ggml.tokens").string_at(2), "bc");
    EXPECT_EQ(h.get_array("tokenizer.ggml.token_type").int_at(0), 3);
    EXPECT_EQ(h.get_array("scores").float_at(1), 0.5);
    EXPECT_EQ(h.get_array("nested").array_at(0).string_at(0), "x");
    EXPECT_EQ(h.get_array("nested").array_at(1).size(), 0u);
    ASSERT_EQ(c.num_tensors(), 4u);
    EXPECT_EQ(c.tensor_names()[0], "blk.0.ffn_down_exps.weight");
    const GgufTensor q = c.tensor("blk.0.ffn_down_exps.weight");
    EXPECT_EQ(q.info->type, GgmlType::kQ4_K);
    EXPECT_EQ(q.info->shape, (Shape{2, 3, 256}));
    EXPECT_EQ(std::string(reinterpret_cast<const char*>(q.bytes.data()), q.bytes.size()), pattern(6 * 144, 1));
    EXPECT_EQ(reinterpret_cast<uintptr_t>(q.bytes.data()) % c.metadata().alignment, 0u);
    const TensorView v = c.view("blk.0.attn_q.weight");
    EXPECT_EQ(v.dtype, DType::kBF16);
    EXPECT_EQ(v.shape, (Shape{3, 7}));
    EXPECT_EQ(std::string(static_cast<const char*>(v.data), v.nbytes()), pattern(42, 4));
    EXPECT_EQ(c.view("output_norm.weight").dtype, DType::kF32);
    EXPECT_EQ(std::string(reinterpret_cast<const char*>(c.tensor("token_embd.weight").bytes.data()), 272),
              pattern(272, 3));
}

TEST(GgufFileTest, WriterRoundTripsAtEveryAlignment) {
    const auto dir = ::moeserve::test::scratch_dir("GgufFileTest.RoundTrip");
    for (const uint32_t alignment : {32u, 64u, 1u, 4096u}) {
        SCOPED_TRACE(alignment);
        const auto path = dir / ("m" + std::to_string(alignment) + ".gguf");
        sample_writer(alignment).write(path);
        const GgufCheckpoint c(path);
        EXPECT_EQ(c.num_files(), 1u);
        EXPECT_EQ(c.metadata().alignment, alignment);
        EXPECT_EQ(c.metadata().find("general.alignment") != nullptr, alignment != 32u);
        expect_sample(c);
    }
}

// Kilobytes of this process's resident pages in the mapping that holds p (/proc/self/smaps).
int64_t resident_kb_of_mapping(const void* p) {
    std::ifstream smaps("/proc/self/smaps");
    const auto at = reinterpret_cast<uintptr_t>(p);
    std::string line;
    bool inside = false;
    while (std::getline(smaps, line)) {
        uintptr_t lo = 0;
        uintptr_t hi = 0;
        char dash = 0;
        std::istringstream head(line);
        if (head >> std::hex >> lo >> dash >> hi && dash == '-') {
            inside = at >= lo && at < hi;
        } else if (inside && line.rfind("Rss:", 0) == 0) {
            return std::stoll(line.substr(4));
        }
    }
    return -1;
}

// A packed copy replaces a GGUF tensor's blocks (#27): drop_resident takes its pages out of the
// process's resident memory, a stacked expert's slice by itself.
TEST(GgufFileTest, DropResidentReleasesTheBlocksPages) {
    const auto path = ::moeserve::test::scratch_dir("GgufFileTest.DropResident") / "m.gguf";
    const int64_t rows = 4096;  // Q8_0 [2, 4096, 64]: 2 x 272 KiB
    GgufWriter w;
    w.add_tensor("blk.0.ffn_up_exps.weight", GgmlType::kQ8_0, Shape{2, rows, 64}, pattern(2 * rows * 2 * 34, 5));
    w.write(path);
    auto file = std::make_shared<const GgufCheckpoint>(path);
    const auto source = WeightSource::from_gguf(
        file, {{"e0", {"blk.0.ffn_up_exps.weight", 0}}, {"e1", {"blk.0.ffn_up_exps.weight", 1}}});
    const GgufBlocks e0 = *source->gguf("e0");
    const GgufBlocks e1 = *source->gguf("e1");
    volatile uint8_t sum = 0;
    for (const GgufBlocks* b : {&e0, &e1}) {
        for (size_t i = 0; i < b->bytes.size(); i += 512) sum = sum + b->bytes[i];  // fault every page in
    }
    const int64_t before = resident_kb_of_mapping(e0.bytes.data());
    ASSERT_GT(before, 500);
    source->drop_resident("e0");
    const int64_t after_one = resident_kb_of_mapping(e0.bytes.data());
    EXPECT_LT(after_one, before - 250);  // e0's 272 KiB, less its two partial pages
    EXPECT_GT(after_one, 250);           // e1's pages stay
    source->drop_resident("e1");
    EXPECT_LT(resident_kb_of_mapping(e0.bytes.data()), 64);
    EXPECT_EQ(e1.bytes[7], static_cast<uint8_t>(pattern(2 * rows * 2 * 34, 5)[rows * 2 * 34 + 7]));  // read back
}

TEST(GgufFileTest, UnsupportedTypesAreRefusedByNameWhenUsed) {
    const auto path = ::moeserve::test::scratch_dir("GgufFileTest.Unsupported") / "iq.gguf";
    GgufWriter w;
    w.add_tensor("ok", GgmlType::kF16, Shape{2}, std::string(4, '\0'));
    w.add_tensor("blk.3.ffn_up_exps.weight", GgmlType::kIQ2_XXS, Shape{256}, std::string(66, '\0'));
    w.add_tensor("ternary", GgmlType::kTQ1_0, Shape{256}, std::string(54, '\0'));
    w.add_tensor("blk.0.ffn_down_exps.weight", GgmlType::kMXFP4, Shape{2, 64}, std::string(4 * 17, '\0'));
    w.write(path);
    const GgufCheckpoint c(path);  // the header itself is valid
    EXPECT_NO_THROW(c.tensor("ok"));
    EXPECT_EQ(c.tensor("blk.0.ffn_down_exps.weight").bytes.size(), 4u * 17);  // MXFP4 is read (gpt-oss's experts)
    expect_one_line_error([&] { c.tensor("blk.3.ffn_up_exps.weight"); }, ErrorCode::kUnsupported,
                          {path.string(), "'blk.3.ffn_up_exps.weight'", "IQ2_XXS", "supported: F32"});
    expect_one_line_error([&] { c.tensor("ternary"); }, ErrorCode::kUnsupported, {"'ternary'", "TQ1_0"});
    expect_one_line_error([&] { c.check_types_supported(); }, ErrorCode::kUnsupported,
                          {"'blk.3.ffn_up_exps.weight'", "IQ2_XXS", "MXFP4"});
    expect_one_line_error([&] { c.tensor("nope"); }, ErrorCode::kNotFound, {path.string(), "'nope'"});
    GgufWriter q;
    q.add_tensor("q", GgmlType::kQ4_0, Shape{32}, std::string(18, '\0'));
    q.write(path);
    expect_one_line_error([&] { GgufCheckpoint(path).view("q"); }, ErrorCode::kUnsupported, {"'q'", "Q4_0"});
}

TEST(GgufFileTest, WriterRefusesWhatAReaderWouldRefuse) {
    GgufWriter w;
    w.add_tensor("a", GgmlType::kF32, Shape{1}, std::string(4, '\0'));
    expect_one_line_error([&] { w.add_tensor("a", GgmlType::kF32, Shape{1}, std::string(4, '\0')); },
                          ErrorCode::kInvalidArgument, {"'a'", "already"});
    expect_one_line_error([&] { w.add_tensor("b", GgmlType::kQ4_0, Shape{48}, std::string(27, '\0')); },
                          ErrorCode::kInvalidArgument, {"'b'", "Q4_0"});
    expect_one_line_error([&] { w.add_tensor("c", GgmlType::kF32, Shape{2}, std::string(4, '\0')); },
                          ErrorCode::kInvalidArgument, {"'c'", "8 bytes"});
    expect_one_line_error(
        [&] {
            w.add_tensor("d", GgmlType::kF32, Shape{1, 1, 1, 1, 1}, std::string(4, '\0'));
        },
        ErrorCode::kInvalidArgument, {"'d'", "5 dims"});
    expect_one_line_error([&] { w.set_u32("general.alignment", 64); }, ErrorCode::kInvalidArgument,
                          {"general.alignment"});
    expect_one_line_error([] { GgufWriter bad(48); }, ErrorCode::kInvalidArgument, {"48"});
}

TEST(GgufFileTest, SplitsReadAsOneModelFromAnySplit) {
    const auto dir = ::moeserve::test::scratch_dir("GgufFileTest.Splits");
    const auto paths = sample_writer(32).write_splits(dir / "m", 300);
    ASSERT_EQ(paths.size(), 3u);  // 864 bytes of Q4_K alone, then 20 + 272, then 42
    EXPECT_EQ(paths[0].filename(), "m-00001-of-00003.gguf");
    EXPECT_EQ(paths[2].filename(), "m-00003-of-00003.gguf");
    for (const auto& p : paths) {
        SCOPED_TRACE(p.string());
        const GgufCheckpoint c(p);
        EXPECT_EQ(c.num_files(), 3u);
        EXPECT_EQ(c.metadata().get_int("split.tensors.count"), 4);
        expect_sample(c);
    }
    const GgufFile second(paths[1]);
    EXPECT_EQ(second.header().find("general.architecture"), nullptr);
    EXPECT_EQ(second.header().get_int("split.no"), 1);
}

TEST(GgufFileTest, BrokenSplitSetsAreRefused) {
    const auto dir = ::moeserve::test::scratch_dir("GgufFileTest.BrokenSplits");
    const auto paths = sample_writer(32).write_splits(dir / "m", 300);
    std::filesystem::remove(paths[2]);
    expect_one_line_error([&] { GgufCheckpoint c(paths[0]); }, ErrorCode::kNotFound, {paths[2].string()});
    // A split from another set (split.count 2) in the place of split 3.
    const auto other = sample_writer(32).write_splits(dir / "o", 900);
    ASSERT_EQ(other.size(), 2u);
    std::filesystem::copy_file(other[1], paths[2]);
    expect_one_line_error([&] { GgufCheckpoint c(paths[0]); }, ErrorCode::kInvalidModel,
                          {paths[2].string(), "split 2 of 3", "'split.count' = 2"});
    // A split renamed so the name no longer says which split it is.
    std::filesystem::copy_file(paths[0], dir / "renamed.gguf");
    expect_one_line_error([&] { GgufCheckpoint c(dir / "renamed.gguf"); }, ErrorCode::kInvalidModel,
                          {"renamed.gguf", "'split.count' is 3", "-of-00003.gguf"});
    // The same tensor in two splits.
    GgufWriter a;
    a.add_tensor("t", GgmlType::kF32, Shape{1}, std::string(4, '\0'));
    a.add_tensor("u", GgmlType::kF32, Shape{1}, std::string(4, '\0'));
    const auto dup = a.write_splits(dir / "d", 4);
    GgufWriter b;
    b.set("split.no", GgufValue::of<GgufValueType::kUint16>(uint16_t{1}));
    b.set("split.count", GgufValue::of<GgufValueType::kUint16>(uint16_t{2}));
    b.add_tensor("t", GgmlType::kF32, Shape{1}, std::string(4, '\0'));
    b.write(dup[1]);
    expect_one_line_error([&] { GgufCheckpoint c(dup[0]); }, ErrorCode::kInvalidModel,
                          {dup[1].string(), "'t'", "also in", dup[0].string()});
    // split.tensors.count that does not match the tensors found.
    GgufWriter c2;
    c2.set("split.no", GgufValue::of<GgufValueType::kUint16>(uint16_t{1}));
    c2.set("split.count", GgufValue::of<GgufValueType::kUint16>(uint16_t{2}));
    c2.write(dup[1]);
    expect_one_line_error([&] { GgufCheckpoint c(dup[0]); }, ErrorCode::kInvalidModel,
                          {dup[0].string(), "'split.tensors.count' is 2", "hold 1 tensors"});
}

// Files written by llama.cpp's gguf-py GGUFWriter (tools/goldens/gguf_quants.py): one file, and
// the same content as three splits of two, two and one tensors.
void expect_gguf_py_file(const GgufCheckpoint& c) {
    const GgufHeader& h = c.metadata();
    EXPECT_EQ(h.get_string("general.architecture"), "qwen3moe");
    EXPECT_EQ(h.get_int("qwen3moe.block_count"), 2);
    EXPECT_EQ(h.get_int("qwen3moe.context_length"), 4096);
    EXPECT_EQ(h.get_float("qwen3moe.rope.freq_base"), 1e6);
    EXPECT_TRUE(h.get_bool("test.flag"));
    EXPECT_EQ(h.get_int("test.i8"), -8);
    EXPECT_EQ(h.get_int("test.u64"), (int64_t{1} << 40) + 1);
    EXPECT_EQ(h.get_float("test.f64"), -0.125);
    EXPECT_EQ(h.get_array("tokenizer.ggml.tokens").string_at(2), "\xc3\xa9t\xc3\xa9");
    EXPECT_EQ(h.get_array("tokenizer.ggml.token_type").int_at(0), 3);
    EXPECT_EQ(h.get_array("test.floats").float_at(1), -1.5);
    ASSERT_EQ(c.num_tensors(), 5u);
    const TensorView norm = c.view("output_norm.weight");
    ASSERT_EQ(norm.shape, (Shape{3, 5}));
    for (int i = 0; i < 15; ++i) EXPECT_EQ(norm.as<float>()[i], static_cast<float>(i) / 4) << i;
    EXPECT_EQ(c.view("token_embd.weight").dtype, DType::kF16);
    EXPECT_EQ(c.info("blk.0.attn_q.weight").type, GgmlType::kQ8_0);
    EXPECT_EQ(c.info("blk.0.attn_q.weight").shape, (Shape{2, 64}));
    EXPECT_EQ(c.info("blk.0.ffn_up_exps.weight").type, GgmlType::kQ4_0);
    EXPECT_EQ(c.info("blk.0.ffn_up_exps.weight").nbytes, 2u * 18);
    EXPECT_EQ(c.view("blk.0.attn_k.weight").shape, (Shape{1, 64}));
}

TEST(GgufFileTest, ReadsFilesWrittenByGgufPy) {
    const auto dir = ::moeserve::test::data_dir() / "gguf";
    expect_gguf_py_file(GgufCheckpoint(dir / "gguf_py.gguf"));
    const GgufCheckpoint split(dir / "gguf_py_split-00002-of-00003.gguf");
    EXPECT_EQ(split.num_files(), 3u);
    expect_gguf_py_file(split);
}

TEST(GgufFileTest, FileErrorsNameThePath) {
    const auto dir = ::moeserve::test::scratch_dir("GgufFileTest.FileErrors");
    expect_one_line_error([&] { GgufCheckpoint c(dir / "absent.gguf"); }, ErrorCode::kNotFound, {"absent.gguf"});
    const auto path = dir / "cut.gguf";
    std::string bytes = sample_writer(32).serialize();
    bytes.resize(bytes.size() - 100);
    test::write_bytes(path, bytes);
    expect_one_line_error([&] { GgufCheckpoint c(path); }, ErrorCode::kInvalidModel,
                          {path.string(), "'token_embd.weight'", "past the end"});
}

}  // namespace
}  // namespace moeserve::io
