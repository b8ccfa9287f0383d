// WeightSource: single-file, sharded (index) and loose-file checkpoints, the errors for missing
// tensors, shards and directories, dtype/shape checks, and f32 conversion of every dtype.
#include "moeserve/io/weight_source.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "io/io_test_util.h"
#include "moeserve/io/safetensors_index.h"
#include "moeserve/io/safetensors_writer.h"
#include "test_support.h"

namespace moeserve::io {
namespace {

using test::expect_error;

const std::string kExpert = "model.layers.3.mlp.experts.7.up_proj.weight";

// Three tensors with known f32 values: value(i) = i * 0.5 - 1.
SafetensorsWriter make_writer() {
    SafetensorsWriter w;
    std::vector<float> v(12);
    for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(i) * 0.5f - 1.0f;
    w.add("model.embed_tokens.weight", DType::kF32, {3, 4}, v.data());
    w.add(kExpert, DType::kF32, {2, 6}, v.data());
    w.add("lm_head.weight", DType::kF32, {4, 3}, v.data());
    return w;
}

TEST(WeightSourceTest, OpensASingleModelSafetensors) {
    const auto dir = moeserve::test::scratch_dir("ws_single");
    make_writer().write(dir / "model.safetensors");
    const auto src = WeightSource::open(dir);
    EXPECT_EQ(src->names(), (std::vector<std::string>{"lm_head.weight", "model.embed_tokens.weight", kExpert}));
    EXPECT_TRUE(src->contains(kExpert));
    EXPECT_FALSE(src->contains("nope"));
    const TensorView v = src->get(kExpert, DType::kF32, {2, 6});
    EXPECT_EQ(v.as<float>()[3], 0.5f);
    EXPECT_EQ(src->files().size(), 1u);
    expect_error([&] { src->get("model.norm.weight"); }, ErrorCode::kNotFound,
                 {"'model.norm.weight'", "model.safetensors", dir.string()});
}

TEST(WeightSourceTest, OpensAShardedCheckpointThroughItsIndex) {
    const auto dir = moeserve::test::scratch_dir("ws_sharded");
    const auto written = make_writer().write_sharded(dir, 48);
    ASSERT_EQ(written.size(), 4u);  // three shards + index
    const auto src = WeightSource::open(dir);
    EXPECT_EQ(src->files().size(), 3u);
    EXPECT_EQ(src->num_tensors(), 3u);
    EXPECT_EQ(src->file_of(kExpert).path().filename(), "model-00003-of-00003.safetensors");
    const Tensor lm = src->load_f32("lm_head.weight");
    EXPECT_EQ(lm.shape(), (Shape{4, 3}));
    EXPECT_EQ(lm.as<float>()[11], 4.5f);
    // The views stay valid through the mappings after the source is gone.
    const TensorView v = src->get(kExpert);
    const auto keep = src->mappings();
    EXPECT_EQ(keep.size(), 3u);
    const_cast<std::unique_ptr<WeightSource>&>(src).reset();
    EXPECT_EQ(v.as<float>()[11], 4.5f);
}

TEST(WeightSourceTest, IndexPointingAtTheWrongShardNamesBoth) {
    const auto dir = moeserve::test::scratch_dir("ws_wrong_shard");
    make_writer().write_sharded(dir, 48);
    std::map<std::string, std::string> wm = {{"lm_head.weight", "model-00001-of-00003.safetensors"},
                                             {kExpert, "model-00001-of-00003.safetensors"},
                                             {"model.embed_tokens.weight", "model-00003-of-00003.safetensors"}};
    SafetensorsWriter::write_index(dir / kSafetensorsIndexFile, wm, 0);
    const auto src = WeightSource::open(dir);
    EXPECT_TRUE(src->contains(kExpert));
    expect_error([&] { src->get(kExpert); }, ErrorCode::kNotFound,
                 {"model.safetensors.index.json: '" + kExpert +
                  "' is mapped to 'model-00001-of-00003.safetensors', which does not contain it"});
    // Tensors the index does not list are not part of the checkpoint, even if a shard has them.
    expect_error([&] { src->get("missing.weight"); }, ErrorCode::kNotFound,
                 {"'missing.weight'", "model.safetensors.index.json"});
}

TEST(WeightSourceTest, MissingShardIsNamed) {
    const auto dir = moeserve::test::scratch_dir("ws_missing_shard");
    make_writer().write_sharded(dir, 48);
    std::filesystem::remove(dir / "model-00002-of-00003.safetensors");
    expect_error([&] { WeightSource::open(dir); }, ErrorCode::kNotFound,
                 {"model.safetensors.index.json", "'model-00002-of-00003.safetensors'", "'model.embed_tokens.weight'",
                  dir.string()});
}

TEST(WeightSourceTest, MalformedIndexIsRejected) {
    const auto dir = moeserve::test::scratch_dir("ws_bad_index");
    test::write_bytes(dir / kSafetensorsIndexFile, R"({"metadata": {}})");
    expect_error([&] { WeightSource::open(dir); }, ErrorCode::kInvalidModel,
                 {"model.safetensors.index.json", "weight_map"});
    test::write_bytes(dir / kSafetensorsIndexFile, R"({"weight_map": {"w": "../escape.safetensors"}})");
    expect_error([&] { WeightSource::open(dir); }, ErrorCode::kInvalidModel, {"weight_map['w']", "../escape"});
    test::write_bytes(dir / kSafetensorsIndexFile, R"({"weight_map": {"w": 3}})");
    expect_error([&] { WeightSource::open(dir); }, ErrorCode::kInvalidModel, {"weight_map['w']"});
    test::write_bytes(dir / kSafetensorsIndexFile, R"({"weight_map": )");
    expect_error([&] { WeightSource::open(dir); }, ErrorCode::kInvalidModel, {"model.safetensors.index.json"});
}

TEST(WeightSourceTest, FallsBackToEverySafetensorsFileInTheDirectory) {
    const auto dir = moeserve::test::scratch_dir("ws_loose");
    const float x = 2.0f;
    SafetensorsWriter a, b;
    a.add("a.weight", DType::kF32, {1}, &x);
    b.add("b.weight", DType::kF32, {1}, &x);
    a.write(dir / "part_a.safetensors");
    b.write(dir / "part_b.safetensors");
    const auto src = WeightSource::open(dir);
    EXPECT_EQ(src->names(), (std::vector<std::string>{"a.weight", "b.weight"}));
    expect_error([&] { src->get("c.weight"); }, ErrorCode::kNotFound, {"'c.weight'", "2 *.safetensors files"});

    b.write(dir / "part_c.safetensors");  // b.weight now in two files
    expect_error([&] { WeightSource::open(dir); }, ErrorCode::kInvalidModel,
                 {"'b.weight'", "part_b.safetensors", "part_c.safetensors"});
}

TEST(WeightSourceTest, MissingDirectoryOrCheckpointIsNamed) {
    const auto dir = moeserve::test::scratch_dir("ws_empty");
    expect_error([&] { WeightSource::open(dir); }, ErrorCode::kNotFound,
                 {"no model.safetensors or model.safetensors.index.json in " + dir.string()});
    expect_error([&] { WeightSource::open(dir / "absent"); }, ErrorCode::kNotFound,
                 {(dir / "absent").string(), "does not exist"});
    test::write_bytes(dir / "model.safetensors", "junk");
    expect_error([&] { WeightSource::open(dir); }, ErrorCode::kInvalidModel, {"model.safetensors", "4 bytes"});
}

TEST(WeightSourceTest, DtypeAndShapeMismatchSayExpectedAndGot) {
    const auto dir = moeserve::test::scratch_dir("ws_mismatch");
    make_writer().write(dir / "model.safetensors");
    const auto src = WeightSource::open(dir);
    expect_error(
        [&] {
            src->get(kExpert, DType::kBF16, {2, 6});
        },
        ErrorCode::kInvalidModel, {"'" + kExpert + "'", "should be BF16 [2, 6]", "has F32 [2, 6]"});
    expect_error(
        [&] {
            src->get(kExpert, DType::kF32, {6, 2});
        },
        ErrorCode::kInvalidModel, {"should be F32 [6, 2]", "has F32 [2, 6]"});
}

TEST(WeightSourceTest, RenamedShowsAliasesAndOwnedTensorsOnly) {
    const auto dir = moeserve::test::scratch_dir("ws_renamed");
    make_writer().write(dir / "model.safetensors");
    Tensor owned(DType::kF32, {2});
    owned.as<float>()[0] = 7.0f;
    owned.as<float>()[1] = 8.0f;
    std::map<std::string, Tensor> made;
    made.emplace("made.weight", std::move(owned));
    const auto src = WeightSource::renamed(WeightSource::open(dir), {{"new.weight", kExpert}}, std::move(made));
    EXPECT_EQ(src->names(), (std::vector<std::string>{"made.weight", "new.weight"}));
    EXPECT_EQ(src->num_tensors(), 2u);
    EXPECT_FALSE(src->contains(kExpert));  // the old name is gone
    EXPECT_EQ(src->get("new.weight", DType::kF32, {2, 6}).as<float>()[3], 0.5f);
    EXPECT_EQ(src->load_f32("made.weight").as<float>()[1], 8.0f);
    EXPECT_EQ(src->stored_name("new.weight"), kExpert);
    EXPECT_EQ(src->file_of("new.weight").path().filename(), "model.safetensors");
    EXPECT_NE(src->describe("new.weight").find("'" + kExpert + "' (read as 'new.weight') in "), std::string::npos);
    EXPECT_NE(src->describe("made.weight").find("converted in memory"), std::string::npos);
    // a mismatch names the tensor in the file
    expect_error(
        [&] {
            src->get("new.weight", DType::kBF16, {2, 6});
        },
        ErrorCode::kInvalidModel, {"'" + kExpert + "'", "model.safetensors", "should be BF16 [2, 6]"});
    expect_error([&] { src->file_of("made.weight"); }, ErrorCode::kNotFound, {"'made.weight'", "in no file"});
    // renamed twice: names still resolve to the tensor in the file
    const auto again =
        WeightSource::renamed(WeightSource::renamed(WeightSource::open(dir), {{"a", kExpert}}, {}), {{"b", "a"}}, {});
    EXPECT_EQ(again->stored_name("b"), kExpert);
    EXPECT_EQ(again->get("b").as<float>()[3], 0.5f);
}

TEST(WeightSourceTest, LoadF32ConvertsEveryDtype) {
    const auto dir = moeserve::test::scratch_dir("ws_convert");
    // Values every dtype holds exactly.
    const std::vector<float> ref = {0.0f, 1.0f, -2.0f, 0.5f, 3.0f, -0.25f, 96.0f, 1.5f};
    SafetensorsWriter w;
    std::vector<uint16_t> bf16, f16;
    std::vector<uint8_t> f8;
    for (float v : ref) {
        bf16.push_back(f32_to_bf16(v));
        f16.push_back(f32_to_f16(v));
        f8.push_back(f32_to_f8e4m3(v));
    }
    w.add("f32", DType::kF32, {2, 4}, ref.data());
    w.add("bf16", DType::kBF16, {2, 4}, bf16.data());
    w.add("f16", DType::kF16, {2, 4}, f16.data());
    w.add("f8", DType::kF8E4M3, {2, 4}, f8.data());
    const std::vector<int8_t> i8 = {-128, -1, 0, 1, 2, 3, 4, 127};
    const std::vector<uint8_t> u8 = {0, 1, 2, 3, 4, 5, 200, 255};
    const std::vector<int32_t> i32 = {-5, 0, 5, 1 << 20, -(1 << 24), 7, 8, 9};
    const std::vector<int64_t> i64 = {-5, 0, 5, int64_t{1} << 40, 1, 2, 3, 4};
    const std::vector<uint8_t> b = {0, 1, 0, 1, 1, 0, 0, 1};
    w.add("i8", DType::kI8, {8}, i8.data());
    w.add("u8", DType::kU8, {8}, u8.data());
    w.add("i32", DType::kI32, {8}, i32.data());
    w.add("i64", DType::kI64, {8}, i64.data());
    w.add("bool", DType::kBool, {8}, b.data());
    w.write(dir / "model.safetensors");
    const auto src = WeightSource::open(dir);
    for (const char* name : {"f32", "bf16", "f16", "f8"}) {
        const Tensor t = src->load_f32(name);
        EXPECT_EQ(t.shape(), (Shape{2, 4})) << name;
        for (size_t i = 0; i < ref.size(); ++i) EXPECT_EQ(t.as<float>()[i], ref[i]) << name << " " << i;
    }
    for (size_t i = 0; i < 8; ++i) {
        EXPECT_EQ(src->load_f32("i8").as<float>()[i], static_cast<float>(i8[i]));
        EXPECT_EQ(src->load_f32("u8").as<float>()[i], static_cast<float>(u8[i]));
        EXPECT_EQ(src->load_f32("i32").as<float>()[i], static_cast<float>(i32[i]));
        EXPECT_EQ(src->load_f32("i64").as<float>()[i], static_cast<float>(i64[i]));
        EXPECT_EQ(src->load_f32("bool").as<float>()[i], static_cast<float>(b[i]));
    }
}

// Every f16, bf16 and f8 bit pattern, from a misaligned source, against the scalar conversions.
TEST(WeightSourceTest, ConvertToF32MatchesScalarConversionsForEveryBitPattern) {
    std::vector<uint8_t> storage(2 * 65536 + 1);
    for (uint32_t i = 0; i < 65536; ++i) {
        const auto h = static_cast<uint16_t>(i);
        std::memcpy(storage.data() + 1 + 2 * i, &h, 2);
    }
    std::vector<float> out(65536);
    for (DType dtype : {DType::kF16, DType::kBF16}) {
        convert_to_f32(TensorView{storage.data() + 1, dtype, {65536}}, out.data());
        for (uint32_t i = 0; i < 65536; ++i) {
            const auto h = static_cast<uint16_t>(i);
            const float want = dtype == DType::kF16 ? f16_to_f32(h) : bf16_to_f32(h);
            if (std::isnan(want)) {
                ASSERT_TRUE(std::isnan(out[i])) << i;
            } else {
                ASSERT_EQ(f32_bits(out[i]), f32_bits(want)) << dtype_name(dtype) << " " << i;
            }
        }
    }
    std::vector<uint8_t> f8(256);
    for (int i = 0; i < 256; ++i) f8[static_cast<size_t>(i)] = static_cast<uint8_t>(i);
    convert_to_f32(TensorView{f8.data(), DType::kF8E4M3, {16, 16}}, out.data());
    for (int i = 0; i < 256; ++i) {
        const float want = f8e4m3_to_f32(static_cast<uint8_t>(i));
        if (std::isnan(want)) {
            EXPECT_TRUE(std::isnan(out[static_cast<size_t>(i)]));
        } else {
            EXPECT_EQ(out[static_cast<size_t>(i)], want) << i;
        }
    }
    EXPECT_EQ(out[0x7e], 448.0f);
}

}  // namespace
}  // namespace moeserve::io
