// parse_gguf_header: what it reads (every value type, nested arrays, the tensor table, the
// alignment) and every refusal, each one line naming the file and the key or tensor; plus a
// seeded truncation and mutation sweep that may only ever produce moeserve::Error.
#include "moeserve/io/gguf_header.h"

#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "io/gguf_test_util.h"
#include "moeserve/io/gguf_writer.h"

namespace moeserve::io {
namespace {

using test::GgufBytes;

const std::string kFile = "dir/model.gguf";

GgufHeader parse(const std::string& bytes) { return parse_gguf_header(test::as_span(bytes), kFile); }

void expect_refused(const std::string& bytes, std::vector<std::string> parts,
                    ErrorCode code = ErrorCode::kInvalidModel) {
    parts.push_back(kFile);
    test::expect_one_line_error([&] { parse(bytes); }, code, parts);
}

// A file with one key "k" of `type` whose value bytes are `value`, and no tensors.
std::string one_key(uint32_t type, const std::string& value) {
    return GgufBytes().header(0, 1).str("k").u32(type).raw(value).s;
}

TEST(GgufHeaderTest, ReadsEveryScalarType) {
    GgufBytes b;
    b.header(0, 13);
    b.str("u8").u32(0).u8(200);
    b.str("i8").u32(1).put<int8_t>(-5);
    b.str("u16").u32(2).put<uint16_t>(60000);
    b.str("i16").u32(3).put<int16_t>(-30000);
    b.str("u32").u32(4).u32(4000000000u);
    b.str("i32").u32(5).put<int32_t>(-7);
    b.str("f32").u32(6).put<float>(1.5f);
    b.str("bool").u32(7).u8(1);
    b.str("str").u32(8).str("qwen3moe");
    b.str("u64").u32(10).u64(~0ull);
    b.str("i64").u32(11).put<int64_t>(-1);
    b.str("f64").u32(12).put<double>(-2.25);
    b.str("general.alignment").u32(4).u32(64);
    const GgufHeader h = parse(b.s);
    EXPECT_EQ(h.version, 3u);
    ASSERT_EQ(h.metadata.size(), 13u);
    EXPECT_EQ(h.metadata[0].key, "u8");
    EXPECT_EQ(h.get_int("u8"), 200);
    EXPECT_EQ(h.get_int("i8"), -5);
    EXPECT_EQ(h.get_int("u16"), 60000);
    EXPECT_EQ(h.get_int("i16"), -30000);
    EXPECT_EQ(h.get_int("u32"), 4000000000ll);
    EXPECT_EQ(h.get_int("i32"), -7);
    EXPECT_EQ(h.get_float("f32"), 1.5);
    EXPECT_EQ(h.get_bool("bool"), true);
    EXPECT_EQ(h.get_string("str"), "qwen3moe");
    EXPECT_EQ(std::get<uint64_t>(h.find("u64")->storage()), ~0ull);
    EXPECT_EQ(h.get_int("i64"), -1);
    EXPECT_EQ(h.get_float("f64"), -2.25);
    EXPECT_EQ(h.alignment, 64u);
    EXPECT_EQ(h.find("u64")->type(), GgufValueType::kUint64);
    test::expect_one_line_error([&] { h.get_int("u64"); }, ErrorCode::kInvalidModel, {kFile, "'u64'", "an integer"});
    test::expect_one_line_error([&] { h.get_string("u8"); }, ErrorCode::kInvalidModel, {kFile, "'u8'", "UINT8 200"});
    test::expect_one_line_error([&] { h.get_int("missing"); }, ErrorCode::kInvalidModel,
                                {kFile, "'missing'", "missing"});
}

TEST(GgufHeaderTest, ReadsArraysOfEveryTypeAndNestedArrays) {
    GgufBytes b;
    b.header(0, 4);
    b.str("ints").u32(9).u32(5).u64(3).put<int32_t>(-1).put<int32_t>(0).put<int32_t>(7);
    b.str("strs").u32(9).u32(8).u64(3).str("a").str("").str("<|im_end|>");
    b.str("bools").u32(9).u32(7).u64(2).u8(0).u8(1);
    // [[1.5], [[]]]: arrays of arrays, the second holding an empty array of strings.
    b.str("nested").u32(9).u32(9).u64(2);
    b.u32(6).u64(1).put<float>(1.5f);
    b.u32(9).u64(1).u32(8).u64(0);
    const GgufHeader h = parse(b.s);
    const GgufArray& ints = h.get_array("ints");
    ASSERT_EQ(ints.type(), GgufValueType::kInt32);
    ASSERT_EQ(ints.size(), 3u);
    EXPECT_EQ(ints.int_at(0), -1);
    EXPECT_EQ(ints.int_at(2), 7);
    const GgufArray& strs = h.get_array("strs");
    ASSERT_EQ(strs.size(), 3u);
    EXPECT_EQ(strs.string_at(0), "a");
    EXPECT_EQ(strs.string_at(1), "");
    EXPECT_EQ(strs.string_at(2), "<|im_end|>");
    EXPECT_EQ(h.get_array("bools").int_at(1), 1);
    const GgufArray& nested = h.get_array("nested");
    ASSERT_EQ(nested.type(), GgufValueType::kArray);
    ASSERT_EQ(nested.size(), 2u);
    EXPECT_EQ(nested.array_at(0).float_at(0), 1.5);
    EXPECT_EQ(nested.array_at(1).array_at(0).type(), GgufValueType::kString);
    EXPECT_EQ(nested.array_at(1).array_at(0).size(), 0u);
}

TEST(GgufHeaderTest, ReadsTheTensorTableInGgmlOrder) {
    GgufBytes b;
    b.header(2, 0, 2);
    b.tensor("blk.0.ffn_gate_exps.weight", {256, 3, 2}, 12, 0);  // Q4_K, 2 experts x 3 rows
    b.tensor("token_embd.weight", {4}, 0, 6 * 144 + 32 - (6 * 144) % 32);
    b.pad();
    const uint64_t data = b.s.size();
    b.zeros(6 * 144 + 32 - (6 * 144) % 32 + 16);
    const GgufHeader h = parse(b.s);
    EXPECT_EQ(h.version, 2u);
    EXPECT_EQ(h.data_offset, data);
    ASSERT_EQ(h.tensors.size(), 2u);
    const GgufTensorInfo& t = h.tensors[0];
    EXPECT_EQ(t.type, GgmlType::kQ4_K);
    EXPECT_EQ(t.shape, (Shape{2, 3, 256}));
    EXPECT_EQ(t.nbytes, 6u * 144);
    EXPECT_EQ(h.find_tensor("token_embd.weight")->nbytes, 16u);
    EXPECT_EQ(h.find_tensor("nope"), nullptr);
}

TEST(GgufHeaderTest, RefusesWrongMagicAndVersions) {
    expect_refused("GGU", {"truncated", "the header"});
    expect_refused(GgufBytes().raw("GGML").u32(3).u64(0).u64(0).s, {"not a GGUF file", "47 47 4d 4c"});
    expect_refused(GgufBytes().header(0, 0, 1).s, {"version 1"}, ErrorCode::kUnsupported);
    expect_refused(GgufBytes().header(0, 0, 4).s, {"version 4"}, ErrorCode::kUnsupported);
    expect_refused(GgufBytes().header(0, 0, 0x03000000).s, {"big-endian"}, ErrorCode::kUnsupported);
}

TEST(GgufHeaderTest, RefusesAbsurdCountsBeforeAllocating) {
    expect_refused(GgufBytes().header(1ull << 40, 0).s, {"1099511627776 tensors"});
    expect_refused(GgufBytes().header(1000, 0).s, {"tensor count", "1000 entries"});
    expect_refused(GgufBytes().header(0, 1ull << 19).s, {"metadata key count"});
    // An array claiming 2^61 uint64 elements, and 2^40 strings.
    expect_refused(one_key(9, GgufBytes().u32(10).u64(1ull << 61).s), {"'k'", "2305843009213693952 entries"});
    expect_refused(one_key(9, GgufBytes().u32(8).u64(1ull << 40).s), {"'k'"});
}

TEST(GgufHeaderTest, RefusesAStringLongerThanTheFile) {
    expect_refused(one_key(8, GgufBytes().u64(1000).raw("short").s), {"'k'", "string of 1000 bytes", "longer than"});
    expect_refused(GgufBytes().header(0, 1).u64(~0ull).zeros(16).s, {"metadata key 0 of 1", "longer than"});
    std::string cut = GgufBytes().header(1, 0).tensor("t", {32}, 0, 0).s;
    cut.resize(cut.size() - 3);
    expect_refused(cut, {"truncated", "tensor 't'"});
}

TEST(GgufHeaderTest, RefusesBadMetadata) {
    expect_refused(one_key(13, ""), {"'k'", "value type 13"});
    expect_refused(one_key(7, GgufBytes().u8(2).s), {"'k'", "BOOL value 2"});
    expect_refused(one_key(9, GgufBytes().u32(77).u64(0).s), {"'k'", "value type 77"});
    expect_refused(GgufBytes().header(0, 2).str("k").u32(0).u8(1).str("k").u32(0).u8(2).s, {"'k'", "more than once"});
    expect_refused(GgufBytes().header(0, 1).str("").u32(0).u8(1).s, {"empty name"});
    expect_refused(one_key(4, "\x01"), {"truncated", "'k'"});
    GgufBytes deep;
    deep.header(0, 1).str("deep").u32(9);
    for (int i = 0; i < kGgufMaxArrayDepth + 1; ++i) deep.u32(9).u64(1);
    expect_refused(deep.s, {"'deep'", "nests arrays deeper"});
    expect_refused(GgufBytes().header(0, 1).str("general.alignment").u32(4).u32(24).s,
                   {"'general.alignment'", "power of two", "UINT32 24"});
    expect_refused(GgufBytes().header(0, 1).str("general.alignment").u32(10).u64(32).s,
                   {"'general.alignment'", "UINT64 32"});
}

TEST(GgufHeaderTest, RefusesBadTensorEntries) {
    const auto file = [](const std::string& name, std::vector<uint64_t> ne, uint32_t type, uint64_t offset,
                         size_t data = 4096) {
        return GgufBytes().header(1, 0).tensor(name, std::move(ne), type, offset).pad().zeros(data).s;
    };
    expect_refused(file("w", {32}, 99, 0), {"'w'", "ggml type 99", "unknown"}, ErrorCode::kUnsupported);
    expect_refused(file("w", {32}, 4, 0), {"'w'", "ggml type 4"}, ErrorCode::kUnsupported);  // removed Q4_2
    expect_refused(file("w", {1, 1, 1, 1, 1}, 0, 0), {"'w'", "5 dims"});
    expect_refused(file("w", {1ull << 62, 4}, 0, 0), {"'w'", "63 bits"});
    expect_refused(file("w", {1ull << 40, 0, 1ull << 40}, 0, 0), {"'w'", "63 bits"});  // even around a 0
    expect_refused(file("w", {48, 2}, 2, 0), {"'w'", "Q4_0", "rows of 48", "block size 32"});
    expect_refused(file("w", {32}, 0, 16), {"'w'", "offset 16", "alignment 32"});
    expect_refused(file("w", {2048}, 0, 0), {"'w'", "8192 bytes", "past the end"});
    expect_refused(file("w", {32}, 0, 1ull << 63), {"'w'", "past the end"});
    expect_refused(file("", {32}, 0, 0), {"tensor 0 of 1", "empty name"});
    expect_refused(GgufBytes().header(1, 0).tensor("e", {0}, 0, 0).s, {"truncated", "data section would start"});
    expect_refused(GgufBytes().header(2, 0).tensor("w", {8}, 0, 0).tensor("w", {8}, 0, 32).pad().zeros(64).s,
                   {"'w'", "more than once"});
    expect_refused(GgufBytes().header(2, 0).tensor("a", {16}, 0, 0).tensor("b", {8}, 0, 32).pad().zeros(96).s,
                   {"'a'", "'b'", "overlap"});
}

TEST(GgufHeaderTest, NamesInErrorsStayOnOneLine) {
    const std::string bytes = GgufBytes().header(1, 0).tensor("evil\nname", {32}, 99, 0).pad().zeros(128).s;
    expect_refused(bytes, {"evil\\nname"}, ErrorCode::kUnsupported);
}

TEST(GgufHeaderTest, AcceptsKnownUnsupportedTypesAndEmptyTensors) {
    // IQ2_XXS: a real type with a known size, refused only when used (GgufCheckpoint::tensor).
    const GgufHeader h =
        parse(GgufBytes().header(2, 0).tensor("iq", {256}, 16, 0).tensor("e", {0, 4}, 0, 96).pad().zeros(96).s);
    EXPECT_EQ(h.tensors[0].type, GgmlType::kIQ2_XXS);
    EXPECT_EQ(h.tensors[0].nbytes, 66u);
    EXPECT_EQ(h.tensors[1].nbytes, 0u);
}

// Every prefix of a valid file and thousands of byte mutations: Error or success, nothing else.
TEST(GgufHeaderTest, TruncationsAndMutationsOnlyEverRaiseError) {
    GgufWriter w;
    w.set_string("general.architecture", "qwen3moe");
    w.set("tokenizer.ggml.tokens", GgufValue::of<GgufValueType::kArray>(GgufArray::of_strings({"a", "bc", "<s>"})));
    w.set("nested", GgufValue::of<GgufValueType::kArray>(GgufArray::of_arrays({GgufArray::of_int32({1, 2})})));
    w.add_tensor("w", GgmlType::kQ8_0, Shape{2, 32}, std::string(68, '\x01'));
    w.add_tensor("b", GgmlType::kF32, Shape{3}, std::string(12, '\0'));
    const std::string good = w.serialize();
    const GgufHeader h = parse(good);
    // The trailing padding after the last tensor may go; any shorter prefix must be refused.
    const uint64_t needed = h.data_offset + h.tensors.back().offset + h.tensors.back().nbytes;
    for (size_t n = 0; n < good.size(); ++n) {
        if (n < needed) {
            EXPECT_THROW(parse(good.substr(0, n)), Error) << "prefix " << n;
        } else {
            EXPECT_NO_THROW(parse(good.substr(0, n))) << "prefix " << n;
        }
    }
    std::mt19937 rng(27);
    for (int iter = 0; iter < 20000; ++iter) {
        std::string bad = good;
        const int flips = 1 + static_cast<int>(rng() % 4);
        for (int f = 0; f < flips; ++f) bad[rng() % bad.size()] = static_cast<char>(rng());
        try {
            (void)parse(bad);
        } catch (const Error&) {
        }
    }
}

}  // namespace
}  // namespace moeserve::io
