// The GGUF header: magic, version, metadata key/values and the tensor table, parsed and
// validated from a file's bytes without touching the file system, so it can be unit-tested and
// fuzzed on its own. Depends on core only.
//
//   | "GGUF" | version u32 | n_tensors u64 | n_kv u64 | n_kv x (key, type u32, value) |
//   | n_tensors x (name, n_dims u32, n_dims x u64 (ggml order: innermost first), type u32,
//   |              offset u64) | padding to `general.alignment` | data section ...          |
//
// All integers little-endian; a string is a u64 byte count and the bytes (no terminator).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "moeserve/core/ggml_type.h"
#include "moeserve/core/tensor.h"
#include "moeserve/io/gguf_value.h"

namespace moeserve::io {

inline constexpr uint32_t kGgufDefaultAlignment = 32;
inline constexpr int kGgufMaxDims = 4;  // ggml's GGML_MAX_DIMS
// NOTE(#27): caps far above real files (DeepSeek-R1 has ~1.1k tensors and ~50 keys) that bound
// what a hostile header can make us allocate, on top of "every entry needs its bytes in the file".
inline constexpr uint64_t kGgufMaxTensors = uint64_t{1} << 20;
inline constexpr uint64_t kGgufMaxKeys = uint64_t{1} << 20;
inline constexpr uint64_t kGgufMaxNestedArrays = uint64_t{1} << 20;
inline constexpr int kGgufMaxArrayDepth = 8;

// One tensor of a GGUF file.
struct GgufTensorInfo {
    std::string name;
    GgmlType type = GgmlType::kF32;
    Shape shape;          // outermost first (PyTorch order): ggml's ne[0] is shape[rank - 1]
    uint64_t offset = 0;  // from the start of the data section, a multiple of the alignment
    uint64_t nbytes = 0;

    int64_t numel() const { return shape.numel(); }
};

struct GgufKeyValue {
    std::string key;
    GgufValue value;
};

// A parsed, validated header. Lists keep the file's order.
struct GgufHeader {
    std::string file;  // the label errors name (usually the path)
    uint32_t version = 3;
    std::vector<GgufKeyValue> metadata;
    std::unordered_map<std::string, size_t> key_index;  // key -> position in `metadata`
    std::vector<GgufTensorInfo> tensors;
    std::unordered_map<std::string, size_t> tensor_index;  // name -> position in `tensors`
    uint32_t alignment = kGgufDefaultAlignment;
    uint64_t data_offset = 0;  // file offset of the data section (a multiple of `alignment`)

    // The value of `key` / the tensor called `name`, or nullptr.
    const GgufValue* find(const std::string& key) const;
    const GgufTensorInfo* find_tensor(const std::string& name) const;

    // Typed metadata access for loaders. Each throws Error kInvalidModel naming the file and the
    // key when the key is missing or has another type: get_int takes any integer type whose value
    // fits in int64, get_float any float or integer type, get_string / get_bool / get_array only
    // their own type.
    int64_t get_int(const std::string& key) const;
    double get_float(const std::string& key) const;
    bool get_bool(const std::string& key) const;
    const std::string& get_string(const std::string& key) const;
    const GgufArray& get_array(const std::string& key) const;
};

// Parses the GGUF file whose whole content is `file` (the data section included: every tensor's
// bytes must lie inside it). Every error is one line naming `file_label` and the key or tensor:
//   kInvalidModel: truncated anywhere, wrong magic, a count that the remaining bytes cannot hold
//     or above the caps above, a string longer than the rest of the file, an empty or duplicate
//     key or tensor name, an unknown value type, a BOOL other than 0/1, arrays nested deeper than
//     kGgufMaxArrayDepth, `general.alignment` not a UINT32 power of two, more than kGgufMaxDims
//     dims, an element count that overflows, a row not a whole number of blocks, an offset not a
//     multiple of the alignment, data past the end of the file, two tensors sharing bytes;
//   kUnsupported: version other than 2 or 3 (a byte-swapped one is called big-endian), a ggml
//     type number that ggml does not define (named by its number).
// Types that are known but not supported (I-quants, ternary, ...) are accepted here; GgufFile
// refuses them when a tensor is used. Never crashes, whatever the input. Thread-safe.
GgufHeader parse_gguf_header(std::span<const uint8_t> file, const std::string& file_label);

}  // namespace moeserve::io
