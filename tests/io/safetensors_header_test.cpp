// parse_safetensors_header: every validation rule, with the file and tensor named in the error,
// plus a seeded random/mutation sweep that may only ever produce moeserve::Error.
#include "moeserve/io/safetensors_header.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "io/io_test_util.h"
#include "moeserve/core/rng.h"

namespace moeserve::io {
namespace {

using test::expect_error;

const std::string kFile = "dir/weights.safetensors";

SafetensorsHeader parse(const std::string& json, uint64_t data_size) {
    return parse_safetensors_header(json, data_size, kFile);
}

void expect_invalid(const std::string& json, uint64_t data_size, std::vector<std::string> parts,
                    ErrorCode code = ErrorCode::kInvalidModel) {
    parts.push_back(kFile);
    SCOPED_TRACE(json);
    expect_error([&] { parse(json, data_size); }, code, parts);
}

TEST(SafetensorsHeaderTest, ParsesTensorsInHeaderOrderWithMetadata) {
    const auto h = parse(R"({"b":{"dtype":"BF16","shape":[2,3],"data_offsets":[0,12]},)"
                         R"("__metadata__":{"format":"pt","k":"v"},)"
                         R"("a":{"dtype":"F32","shape":[],"data_offsets":[12,16]}} )",
                         16);
    ASSERT_EQ(h.tensors.size(), 2u);
    EXPECT_EQ(h.tensors[0].name, "b");
    EXPECT_EQ(h.tensors[0].dtype, DType::kBF16);
    EXPECT_EQ(h.tensors[0].shape, (Shape{2, 3}));
    EXPECT_EQ(h.tensors[0].data_begin, 0u);
    EXPECT_EQ(h.tensors[0].data_end, 12u);
    EXPECT_EQ(h.tensors[1].name, "a");
    EXPECT_EQ(h.tensors[1].shape.rank(), 0);
    EXPECT_EQ(h.tensors[1].nbytes(), 4u);
    EXPECT_EQ(h.metadata.at("format"), "pt");
    EXPECT_EQ(h.metadata.at("k"), "v");
    ASSERT_NE(h.find("a"), nullptr);
    EXPECT_EQ(h.find("a")->data_begin, 12u);
    EXPECT_EQ(h.find("c"), nullptr);
}

TEST(SafetensorsHeaderTest, AcceptsEveryDtype) {
    const std::vector<std::pair<std::string, DType>> dtypes = {
        {"F32", DType::kF32},        {"F16", DType::kF16}, {"BF16", DType::kBF16},
        {"F8_E4M3", DType::kF8E4M3}, {"I8", DType::kI8},   {"U8", DType::kU8},
        {"I32", DType::kI32},        {"I64", DType::kI64}, {"BOOL", DType::kBool}};
    for (const auto& [name, dtype] : dtypes) {
        const size_t n = 3 * dtype_size(dtype);
        const auto h =
            parse(R"({"t":{"dtype":")" + name + R"(","shape":[3],"data_offsets":[0,)" + std::to_string(n) + "]}}", n);
        EXPECT_EQ(h.tensors.at(0).dtype, dtype) << name;
    }
}

TEST(SafetensorsHeaderTest, AllowsGapsEmptyTensorsNullMetadataAndExtraFields) {
    const auto h = parse(R"({"__metadata__":null,)"
                         R"("a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
                         R"("e":{"dtype":"F32","shape":[0,5],"data_offsets":[2,2]},)"
                         R"("b":{"dtype":"U8","shape":[2],"data_offsets":[10,12],"extra":1}})",
                         20);
    EXPECT_EQ(h.tensors.size(), 3u);
    EXPECT_TRUE(h.metadata.empty());
    EXPECT_EQ(parse("{}", 0).tensors.size(), 0u);
}

TEST(SafetensorsHeaderTest, RejectsNonJsonAndNonObjects) {
    expect_invalid("", 0, {"not valid JSON"});
    expect_invalid("{", 0, {"not valid JSON"});
    expect_invalid(R"({"a":1} trailing)", 0, {"not valid JSON"});
    expect_invalid("[1,2]", 0, {"must be a JSON object", "array"});
    expect_invalid("\"x\"", 0, {"must be a JSON object", "string"});
    expect_invalid("{\"\xff\":1}", 0, {"not valid JSON"});  // invalid UTF-8
    expect_invalid(R"({"a":{"dtype":"F32","shape":[],"data_offsets":[0,4]},"a":{}})", 4, {"'a'", "more than once"});
}

TEST(SafetensorsHeaderTest, RejectsMalformedTensorEntries) {
    expect_invalid(R"({"w":5})", 0, {"tensor 'w'", "must be an object"});
    expect_invalid(R"({"w":{"shape":[1],"data_offsets":[0,4]}})", 4, {"tensor 'w'", "\"dtype\""});
    expect_invalid(R"({"w":{"dtype":"F32","data_offsets":[0,4]}})", 4, {"tensor 'w'", "\"shape\""});
    expect_invalid(R"({"w":{"dtype":"F32","shape":[1]}})", 4, {"tensor 'w'", "\"data_offsets\""});
    expect_invalid(R"({"w":{"dtype":7,"shape":[1],"data_offsets":[0,4]}})", 4, {"tensor 'w'", "dtype"});
    expect_invalid(R"({"w":{"dtype":"F32","shape":{},"data_offsets":[0,4]}})", 4, {"tensor 'w'", "shape"});
    expect_invalid(R"({"w":{"dtype":"F32","shape":[1],"data_offsets":"0,4"}})", 4, {"tensor 'w'", "data_offsets"});
    expect_invalid(R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[0]}})", 4, {"tensor 'w'"});
    expect_invalid(R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[0,4,8]}})", 8, {"tensor 'w'"});
    expect_invalid(R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[-4,0]}})", 8, {"tensor 'w'"});
    expect_invalid(R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[0.0,4.0]}})", 8, {"tensor 'w'"});
}

TEST(SafetensorsHeaderTest, UnknownDtypeIsUnsupportedAndNamed) {
    expect_invalid(R"({"model.w":{"dtype":"F64","shape":[1],"data_offsets":[0,8]}})", 8,
                   {"tensor 'model.w'", "'F64'", "BF16"}, ErrorCode::kUnsupported);
    expect_invalid(R"({"w":{"dtype":"f32","shape":[1],"data_offsets":[0,4]}})", 4, {"'f32'"}, ErrorCode::kUnsupported);
}

TEST(SafetensorsHeaderTest, RejectsBadShapes) {
    expect_invalid(R"({"w":{"dtype":"F32","shape":[-1],"data_offsets":[0,0]}})", 0, {"tensor 'w'", "non-negative"});
    expect_invalid(R"({"w":{"dtype":"F32","shape":[2.0],"data_offsets":[0,8]}})", 8, {"tensor 'w'"});
    expect_invalid(R"({"w":{"dtype":"F32","shape":["2"],"data_offsets":[0,8]}})", 8, {"tensor 'w'"});
    expect_invalid(R"({"w":{"dtype":"F32","shape":[1e30],"data_offsets":[0,8]}})", 8, {"tensor 'w'"});
    expect_invalid(R"({"w":{"dtype":"F32","shape":[1099511627776,1099511627776],"data_offsets":[0,8]}})", 8,
                   {"tensor 'w'", "63 bits"});
    expect_invalid(R"({"w":{"dtype":"F32","shape":[18446744073709551615],"data_offsets":[0,8]}})", 8,
                   {"tensor 'w'", "63 bits"});
    // numel fits in int64 but numel * 4 bytes does not fit in uint64.
    expect_invalid(R"({"w":{"dtype":"F32","shape":[4611686018427387904],"data_offsets":[0,8]}})", 8,
                   {"tensor 'w'", "64 bits"});
    expect_invalid(R"({"w":{"dtype":"U8","shape":[1,1,1,1,1,1,1],"data_offsets":[0,1]}})", 1, {"tensor 'w'", "7 dims"},
                   ErrorCode::kUnsupported);
}

TEST(SafetensorsHeaderTest, RejectsBadOffsets) {
    expect_invalid(R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[8,4]}})", 8,
                   {"tensor 'w'", "[8, 4]", "end before"});
    expect_invalid(R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", 7,
                   {"tensor 'w'", "past the end", "7 bytes"});
    expect_invalid(R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0,4]}})", 8,
                   {"tensor 'w'", "F32 [2] needs 8 bytes", "hold 4"});
    expect_invalid(R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0,18446744073709551615]}})", 8,
                   {"tensor 'w'", "past the end"});
}

TEST(SafetensorsHeaderTest, RejectsOverlappingTensors) {
    expect_invalid(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                   R"("b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
                   12, {"'a'", "'b'", "overlap"});
    expect_invalid(R"({"a":{"dtype":"U8","shape":[4],"data_offsets":[0,4]},)"
                   R"("b":{"dtype":"U8","shape":[4],"data_offsets":[0,4]}})",
                   4, {"'a'", "'b'", "overlap"});
}

TEST(SafetensorsHeaderTest, RejectsBadMetadata) {
    expect_invalid(R"({"__metadata__":[1]})", 0, {"__metadata__", "array"});
    expect_invalid(R"({"__metadata__":{"format":1}})", 0, {"__metadata__", "'format'", "must be a string"});
}

TEST(SafetensorsHeaderTest, DeepNestingIsRejectedWithoutExhaustingTheStack) {
    const size_t depth = 100000;
    const std::string deep = std::string(depth, '[') + std::string(depth, ']');
    expect_invalid(deep, 0, {"nests deeper than 32 levels"});
    expect_invalid(std::string(depth, '['), 0, {"nests deeper"});
    // The fuzzer's find: a key after a deep value made ordered_json copy it recursively.
    expect_invalid(R"({"w":{"dtype":"F32","shape":)" + deep + R"(,"data_offsets":[0,4]}})", 0, {"nests deeper"});
    expect_invalid(R"({"__metadata__":{"k":)" + deep + "}}", 0, {"nests deeper"});
    // 31 levels inside an ignored extra field are still fine.
    const std::string ok = std::string(29, '[') + std::string(29, ']');
    EXPECT_EQ(parse(R"({"w":{"dtype":"U8","shape":[1],"data_offsets":[0,1],"x":)" + ok + "}}", 1).tensors.size(), 1u);
}

// A valid header of `n` random tensors, packed with random gaps; returns its data size via out.
std::string random_valid_header(Rng& rng, uint64_t* data_size) {
    static constexpr const char* kDtypes[] = {"F32", "F16", "BF16", "F8_E4M3", "I8", "U8", "I32", "I64", "BOOL"};
    static constexpr size_t kSizes[] = {4, 2, 2, 1, 1, 1, 4, 8, 1};
    std::string h = R"({"__metadata__":{"format":"pt"})";
    const int n = static_cast<int>(rng.next_u64() % 5);
    uint64_t offset = 0;
    for (int i = 0; i < n; ++i) {
        const size_t d = rng.next_u64() % 9;
        const int rank = static_cast<int>(rng.next_u64() % 4);
        std::string shape = "[";
        uint64_t numel = 1;
        for (int r = 0; r < rank; ++r) {
            const uint64_t dim = rng.next_u64() % 4;
            numel *= dim;
            if (r > 0) shape += ',';
            shape += std::to_string(dim);
        }
        shape += "]";
        offset += rng.next_u64() % 3;  // gaps are allowed
        const uint64_t end = offset + numel * kSizes[d];
        h += ",\"t" + std::to_string(i) + "\":{\"dtype\":\"" + kDtypes[d] + "\",\"shape\":" + shape +
             ",\"data_offsets\":[" + std::to_string(offset) + "," + std::to_string(end) + "]}";
        offset = end;
    }
    *data_size = offset;
    return h + "}";
}

// Changes a few bytes: flips, deletes, duplicates, or splices in a JSON token.
std::string mutate(Rng& rng, std::string s) {
    static constexpr const char* kTokens[] = {"{",
                                              "}",
                                              "[",
                                              "]",
                                              ",",
                                              ":",
                                              "\"",
                                              "-1",
                                              "1e400",
                                              "0.5",
                                              "null",
                                              "true",
                                              "18446744073709551616",
                                              "\"F64\"",
                                              "\\u0000",
                                              "\"__metadata__\"",
                                              "\"data_offsets\"",
                                              "\"shape\"",
                                              "[[[[",
                                              "\xff"};
    const int edits = 1 + static_cast<int>(rng.next_u64() % 4);
    for (int e = 0; e < edits && !s.empty(); ++e) {
        const size_t pos = rng.next_u64() % s.size();
        switch (rng.next_u64() % 5) {
            case 0:
                s[pos] = static_cast<char>(rng.next_u64() & 0xff);
                break;
            case 1:
                s.erase(pos, 1 + rng.next_u64() % 8);
                break;
            case 2:
                s.insert(pos, s.substr(pos, rng.next_u64() % 16));
                break;
            case 3:
                s.insert(pos, kTokens[rng.next_u64() % (sizeof(kTokens) / sizeof(kTokens[0]))]);
                break;
            case 4:
                s.resize(pos);
                break;
        }
    }
    return s;
}

TEST(SafetensorsHeaderTest, RandomAndMutatedHeadersOnlyEverThrowError) {
    Rng rng(20240611);
    int num_valid = 0, num_errors = 0;
    for (int iter = 0; iter < 4000; ++iter) {
        uint64_t data_size = 0;
        std::string h = random_valid_header(rng, &data_size);
        const bool mutated = iter % 4 != 0;
        if (mutated) h = mutate(rng, h);
        // Sometimes lie about the data size as well.
        if (mutated && rng.next_u64() % 8 == 0) data_size = rng.next_u64() % (data_size + 2);
        try {
            const auto parsed = parse_safetensors_header(h, data_size, kFile);
            ++num_valid;
            for (const TensorInfo& t : parsed.tensors) {
                ASSERT_LE(t.data_begin, t.data_end) << h;
                ASSERT_LE(t.data_end, data_size) << h;
                ASSERT_EQ(t.nbytes(), static_cast<uint64_t>(t.shape.numel()) * dtype_size(t.dtype)) << h;
            }
        } catch (const Error& e) {
            ASSERT_TRUE(mutated) << "a valid header was rejected: " << e.what() << "\n" << h;
            ++num_errors;
            ASSERT_NE(std::string(e.what()).find(kFile), std::string::npos) << e.what();
        } catch (const std::exception& e) {
            FAIL() << "non-moeserve exception '" << e.what() << "' for header: " << h;
        }
    }
    // Both outcomes must be exercised, or the sweep proves nothing.
    EXPECT_GT(num_valid, 1000);  // the 1000 unmutated ones, and more
    EXPECT_GT(num_errors, 1000);
}

}  // namespace
}  // namespace moeserve::io
