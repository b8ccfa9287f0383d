// SafetensorsWriter: byte-exact output against files hand-built from the format spec, data order
// and alignment, name rules, atomic writes and sharded checkpoints.
#include "moeserve/io/safetensors_writer.h"

#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "io/io_test_util.h"
#include "moeserve/io/safetensors.h"
#include "moeserve/io/safetensors_index.h"
#include "test_support.h"

namespace moeserve::io {
namespace {

using test::expect_error;
using test::le64;
using test::read_bytes;

template <typename T>
std::string bytes_of(const std::vector<T>& v) {
    return std::string(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(T));
}

// The reference serializer's own example: one F32 [1, 2, 3] tensor, no metadata. Its header is
// exactly 64 bytes, so no padding.
TEST(SafetensorsWriterTest, MatchesReferenceBytesWithoutMetadata) {
    const auto dir = moeserve::test::scratch_dir("writer_golden_plain");
    const std::vector<float> values = {0, 1, 2, 3, 4, 5};
    SafetensorsWriter w;
    w.clear_metadata();
    w.add("attn.0", DType::kF32, {1, 2, 3}, values.data());
    w.write(dir / "a.safetensors");
    const std::string header = R"({"attn.0":{"dtype":"F32","shape":[1,2,3],"data_offsets":[0,24]}})";
    ASSERT_EQ(header.size(), 64u);
    EXPECT_EQ(read_bytes(dir / "a.safetensors"), le64(64) + header + bytes_of(values));

    // A 65-byte header gets 7 spaces of padding, so the data starts 8-aligned.
    SafetensorsWriter w2;
    w2.clear_metadata();
    w2.add("attn0", DType::kF32, {1, 1, 2, 3}, values.data());
    w2.write(dir / "b.safetensors");
    const std::string header2 = R"({"attn0":{"dtype":"F32","shape":[1,1,2,3],"data_offsets":[0,24]}})";
    ASSERT_EQ(header2.size(), 65u);
    EXPECT_EQ(read_bytes(dir / "b.safetensors"), le64(72) + header2 + std::string(7, ' ') + bytes_of(values));
}

// Mixed dtypes, with metadata: "__metadata__" first, then data widest dtype first, then by name.
TEST(SafetensorsWriterTest, MatchesHandBuiltBytesForMixedDtypes) {
    const auto dir = moeserve::test::scratch_dir("writer_golden_mixed");
    const std::vector<uint8_t> b = {1, 2, 3};
    const std::vector<float> a = {1.5f};
    const std::vector<uint16_t> c = {0x3f80, 0xc000};
    const std::vector<int64_t> d = {-7};
    const std::vector<uint16_t> e = {0x3c00};
    SafetensorsWriter w;
    w.set_metadata("z", "last");
    w.add("b", DType::kU8, {3}, b.data());
    w.add("a", DType::kF32, {1}, a.data());
    w.add("c", DType::kBF16, {2}, c.data());
    w.add("d", DType::kI64, {1, 1}, d.data());
    w.add("e", DType::kF16, {1}, e.data());
    w.write(dir / "m.safetensors");
    std::string header = R"({"__metadata__":{"format":"pt","z":"last"},)"
                         R"("d":{"dtype":"I64","shape":[1,1],"data_offsets":[0,8]},)"
                         R"("a":{"dtype":"F32","shape":[1],"data_offsets":[8,12]},)"
                         R"("c":{"dtype":"BF16","shape":[2],"data_offsets":[12,16]},)"
                         R"("e":{"dtype":"F16","shape":[1],"data_offsets":[16,18]},)"
                         R"("b":{"dtype":"U8","shape":[3],"data_offsets":[18,21]}})";
    header.append((8 - header.size() % 8) % 8, ' ');
    const std::string expected =
        le64(header.size()) + header + bytes_of(d) + bytes_of(a) + bytes_of(c) + bytes_of(e) + bytes_of(b);
    EXPECT_EQ(read_bytes(dir / "m.safetensors"), expected);
    EXPECT_FALSE(std::filesystem::exists(dir / "m.safetensors.tmp"));
}

TEST(SafetensorsWriterTest, EveryTensorIsAlignedToItsElementSize) {
    const auto dir = moeserve::test::scratch_dir("writer_alignment");
    SafetensorsWriter w;
    w.add("a.bool", Tensor(DType::kBool, {3}));
    w.add("b.f16", Tensor(DType::kF16, {3}));
    w.add("c.f32", Tensor(DType::kF32, {5}));
    w.add("d.i64", Tensor(DType::kI64, {1}));
    w.add("e.u8", Tensor(DType::kU8, {1}));
    w.write(dir / "x.safetensors");
    SafetensorsFile f(dir / "x.safetensors");
    EXPECT_EQ(f.data_offset() % 8, 0u);
    for (const std::string& name : f.names()) {
        const TensorView v = f.view(name);
        EXPECT_EQ(reinterpret_cast<uintptr_t>(v.data) % dtype_size(v.dtype), 0u) << name;
    }
    EXPECT_EQ(f.names(), (std::vector<std::string>{"d.i64", "c.f32", "b.f16", "e.u8", "a.bool"}));
}

TEST(SafetensorsWriterTest, RejectsBadAndDuplicateNames) {
    SafetensorsWriter w;
    const float x = 1;
    w.add("w", DType::kF32, {1}, &x);
    expect_error([&] { w.add("w", DType::kF32, {1}, &x); }, ErrorCode::kInvalidArgument, {"'w'", "already"});
    expect_error([&] { w.add("w", Tensor(DType::kF32, {1})); }, ErrorCode::kInvalidArgument, {"'w'"});
    expect_error([&] { w.add("", DType::kF32, {1}, &x); }, ErrorCode::kInvalidArgument, {"empty"});
    expect_error([&] { w.add("__metadata__", DType::kF32, {1}, &x); }, ErrorCode::kInvalidArgument, {"__metadata__"});
    expect_error([&] { w.add("bad\xff", DType::kF32, {1}, &x); }, ErrorCode::kInvalidArgument, {"UTF-8"});
    EXPECT_EQ(w.num_tensors(), 1u);
    EXPECT_EQ(w.total_bytes(), 4u);
}

TEST(SafetensorsWriterTest, OverwritesAnExistingFile) {
    const auto dir = moeserve::test::scratch_dir("writer_overwrite");
    test::write_bytes(dir / "m.safetensors", std::string(1000, 'x'));
    SafetensorsWriter w;
    w.add("t", Tensor(DType::kU8, {2}));
    w.write(dir / "m.safetensors");
    EXPECT_EQ(SafetensorsFile(dir / "m.safetensors").names(), std::vector<std::string>{"t"});
}

TEST(SafetensorsWriterTest, WriteFailureNamesThePath) {
    SafetensorsWriter w;
    expect_error([&] { w.write("/nonexistent_dir_moeserve/x.safetensors"); }, ErrorCode::kIo,
                 {"/nonexistent_dir_moeserve/x.safetensors"});
}

TEST(SafetensorsWriterTest, WritesShardsAndIndexLikeTransformers) {
    const auto dir = moeserve::test::scratch_dir("writer_sharded");
    SafetensorsWriter w;
    w.add("a", Tensor(DType::kF32, {4}));   // 16 bytes
    w.add("b", Tensor(DType::kF32, {2}));   // 8
    w.add("c", Tensor(DType::kF32, {10}));  // 40, bigger than a shard: alone
    w.add("d", Tensor(DType::kU8, {3}));    // 3
    const auto written = w.write_sharded(dir, 24);
    EXPECT_EQ(written, (std::vector<std::string>{"model-00001-of-00003.safetensors", "model-00002-of-00003.safetensors",
                                                 "model-00003-of-00003.safetensors", "model.safetensors.index.json"}));
    const std::string index_text = read_bytes(dir / "model.safetensors.index.json");
    EXPECT_EQ(index_text,
              "{\n"
              "  \"metadata\": {\n"
              "    \"total_size\": 67\n"
              "  },\n"
              "  \"weight_map\": {\n"
              "    \"a\": \"model-00001-of-00003.safetensors\",\n"
              "    \"b\": \"model-00001-of-00003.safetensors\",\n"
              "    \"c\": \"model-00002-of-00003.safetensors\",\n"
              "    \"d\": \"model-00003-of-00003.safetensors\"\n"
              "  }\n"
              "}\n");
    const auto index = read_safetensors_index(dir / "model.safetensors.index.json");
    EXPECT_EQ(index.total_size, 67u);
    EXPECT_EQ(SafetensorsFile(dir / "model-00001-of-00003.safetensors").names(), (std::vector<std::string>{"a", "b"}));

    const auto single_dir = moeserve::test::scratch_dir("writer_sharded_single");
    EXPECT_EQ(w.write_sharded(single_dir, 1000), std::vector<std::string>{"model.safetensors"});
    EXPECT_FALSE(std::filesystem::exists(single_dir / "model.safetensors.index.json"));
}

}  // namespace
}  // namespace moeserve::io
