// SafetensorsFile: write -> read round trips for every dtype, zero-copy views, mapping lifetime,
// and malformed files built byte by byte.
#include "moeserve/io/safetensors.h"

#include <gtest/gtest.h>

#include <cstring>

#include "io/io_test_util.h"
#include "moeserve/core/rng.h"
#include "moeserve/io/safetensors_writer.h"
#include "test_support.h"

namespace moeserve::io {
namespace {

using test::expect_error;
using test::le64;
using test::raw_safetensors;
using test::write_bytes;

constexpr DType kAllDtypes[] = {DType::kF32, DType::kF16, DType::kBF16, DType::kF8E4M3, DType::kI8,
                                DType::kU8,  DType::kI32, DType::kI64,  DType::kBool};

Tensor random_tensor(DType dtype, const Shape& shape, Rng& rng) {
    Tensor t(dtype, shape);
    auto* p = static_cast<uint8_t*>(t.data());
    for (size_t i = 0; i < t.nbytes(); ++i) {
        p[i] = dtype == DType::kBool ? static_cast<uint8_t>(rng.next_u64() & 1) : static_cast<uint8_t>(rng.next_u64());
    }
    return t;
}

TEST(SafetensorsFileTest, RoundTripsEveryDtypeByteForByte) {
    const auto dir = moeserve::test::scratch_dir("st_roundtrip");
    Rng rng(7);
    SafetensorsWriter w;
    w.set_metadata("purpose", "round trip");
    std::vector<std::pair<std::string, Tensor>> expected;
    for (DType dtype : kAllDtypes) {
        const std::string name = "t." + std::string(dtype_name(dtype));
        expected.emplace_back(name, random_tensor(dtype, {3, 5, 2}, rng));
        w.add(name, expected.back().second.clone());
    }
    w.add("empty", Tensor(DType::kBF16, {0, 4}));
    w.add("scalar", Tensor(DType::kF32, Shape{}));
    w.write(dir / "all.safetensors");

    SafetensorsFile f(dir / "all.safetensors");
    EXPECT_EQ(f.num_tensors(), expected.size() + 2);
    EXPECT_EQ(f.metadata().at("format"), "pt");
    EXPECT_EQ(f.metadata().at("purpose"), "round trip");
    for (const auto& [name, t] : expected) {
        ASSERT_TRUE(f.contains(name));
        const TensorView v = f.view(name);
        EXPECT_EQ(v.dtype, t.dtype()) << name;
        EXPECT_EQ(v.shape, t.shape()) << name;
        ASSERT_EQ(v.nbytes(), t.nbytes());
        EXPECT_EQ(std::memcmp(v.data, t.data(), t.nbytes()), 0) << name;
        EXPECT_EQ(f.info(name).nbytes(), t.nbytes());
    }
    EXPECT_EQ(f.view("empty").numel(), 0);
    EXPECT_EQ(f.view("scalar").shape.rank(), 0);
    EXPECT_EQ(f.view("scalar").numel(), 1);
}

TEST(SafetensorsFileTest, ViewsPointIntoTheMappingAndOutliveTheFileObject) {
    const auto dir = moeserve::test::scratch_dir("st_zero_copy");
    const std::vector<int32_t> values = {10, -20, 30, 40};
    SafetensorsWriter w;
    w.add("x", DType::kI32, {2, 2}, values.data());
    w.write(dir / "x.safetensors");
    const std::string file_bytes = test::read_bytes(dir / "x.safetensors");

    std::shared_ptr<const MappedFile> keep;
    TensorView v;
    {
        SafetensorsFile f(dir / "x.safetensors");
        v = f.view("x");
        keep = f.mapping();
        const auto* base = keep->data();
        const auto* p = static_cast<const uint8_t*>(v.data);
        ASSERT_GE(p, base);
        ASSERT_LE(p + v.nbytes(), base + keep->size());
        EXPECT_EQ(static_cast<uint64_t>(p - base), f.data_offset() + f.info("x").data_begin);
        EXPECT_EQ(std::memcmp(p, file_bytes.data() + (p - base), v.nbytes()), 0);
        EXPECT_EQ(f.view("x").data, v.data);  // the same bytes every time, never a copy
    }
    // The SafetensorsFile is gone; the mapping it shared still backs the view.
    EXPECT_EQ(v.as<int32_t>()[1], -20);
    EXPECT_EQ(v.as<int32_t>()[3], 40);
}

TEST(SafetensorsFileTest, NamesKeepTheHeaderOrderOfForeignFiles) {
    const auto dir = moeserve::test::scratch_dir("st_order");
    const std::string header = R"({"z":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},)"
                               R"("a":{"dtype":"U8","shape":[1],"data_offsets":[1,2]}})";
    write_bytes(dir / "o.safetensors", raw_safetensors(header, "\x05\x06"));
    SafetensorsFile f(dir / "o.safetensors");
    EXPECT_EQ(f.names(), (std::vector<std::string>{"z", "a"}));
    EXPECT_TRUE(f.metadata().empty());
    EXPECT_EQ(*static_cast<const uint8_t*>(f.view("a").data), 6);
    expect_error([&] { f.view("b"); }, ErrorCode::kNotFound, {"o.safetensors", "'b'"});
}

TEST(SafetensorsFileTest, RejectsFilesTooShortOrWithABadHeaderLength) {
    const auto dir = moeserve::test::scratch_dir("st_bad_framing");
    const auto open = [&](const std::string& name, const std::string& bytes) {
        write_bytes(dir / name, bytes);
        return [path = dir / name] { SafetensorsFile f(path); };
    };
    expect_error(open("empty.safetensors", ""), ErrorCode::kInvalidModel,
                 {"empty.safetensors", "0 bytes", "shorter than"});
    expect_error(open("five.safetensors", std::string("\x02\0\0\0\0", 5)), ErrorCode::kInvalidModel,
                 {"five.safetensors", "5 bytes"});
    expect_error(open("long.safetensors", le64(100) + "{}"), ErrorCode::kInvalidModel,
                 {"long.safetensors", "header length 100", "10 bytes"});
    expect_error(open("huge.safetensors", le64(~uint64_t{0}) + "{}"), ErrorCode::kInvalidModel,
                 {"huge.safetensors", "header length 18446744073709551615"});
    expect_error(open("zero.safetensors", le64(0)), ErrorCode::kInvalidModel, {"zero.safetensors", "not valid JSON"});
    expect_error(open("text.safetensors", "this is not a checkpoint at all"), ErrorCode::kInvalidModel,
                 {"text.safetensors"});
}

TEST(SafetensorsFileTest, RejectsTruncatedDataAndBadHeadersNamingTheFile) {
    const auto dir = moeserve::test::scratch_dir("st_bad_header");
    const std::string good = R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})";
    write_bytes(dir / "trunc.safetensors", raw_safetensors(good, std::string(7, '\0')));
    expect_error([&] { SafetensorsFile f(dir / "trunc.safetensors"); }, ErrorCode::kInvalidModel,
                 {"trunc.safetensors", "tensor 'w'", "past the end"});
    write_bytes(dir / "f64.safetensors",
                raw_safetensors(R"({"w":{"dtype":"F64","shape":[1],"data_offsets":[0,8]}})", std::string(8, '\0')));
    expect_error([&] { SafetensorsFile f(dir / "f64.safetensors"); }, ErrorCode::kUnsupported,
                 {"f64.safetensors", "'w'", "F64"});
    // Trailing bytes after the last tensor are tolerated (gaps are allowed).
    write_bytes(dir / "tail.safetensors", raw_safetensors(good, std::string(12, '\0')));
    EXPECT_EQ(SafetensorsFile(dir / "tail.safetensors").num_tensors(), 1u);
}

TEST(SafetensorsFileTest, MissingFileAndDirectoryAreReported) {
    const auto dir = moeserve::test::scratch_dir("st_missing");
    expect_error([&] { SafetensorsFile f(dir / "nope.safetensors"); }, ErrorCode::kNotFound,
                 {"nope.safetensors", "no such file"});
    expect_error([&] { SafetensorsFile f(dir); }, ErrorCode::kIo, {"not a regular file"});
}

}  // namespace
}  // namespace moeserve::io
