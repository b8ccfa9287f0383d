// The safetensors header: the JSON table that follows the 8-byte length, parsed and validated
// without touching any file, so it can be unit-tested and fuzzed on its own. Depends on core only.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "moeserve/core/dtype.h"
#include "moeserve/core/tensor.h"

namespace moeserve::io {

// The largest header accepted, in bytes (the reference implementation's limit).
inline constexpr uint64_t kMaxSafetensorsHeaderBytes = 100'000'000;

// One tensor of a safetensors file. The byte range [data_begin, data_end) is relative to the
// start of the data section (the first byte after the header), as the file states it.
struct TensorInfo {
    std::string name;
    DType dtype = DType::kF32;
    Shape shape;
    uint64_t data_begin = 0;
    uint64_t data_end = 0;

    uint64_t nbytes() const { return data_end - data_begin; }
};

// A parsed, validated header. `tensors` keeps the order in which the header lists them.
struct SafetensorsHeader {
    std::vector<TensorInfo> tensors;
    std::unordered_map<std::string, size_t> index_of;  // name -> position in `tensors`
    std::map<std::string, std::string> metadata;       // "__metadata__", string -> string

    // The tensor called `name`, or nullptr.
    const TensorInfo* find(const std::string& name) const;
};

// Parses the JSON header of a safetensors file whose data section is `data_size` bytes long.
// Every check names `file_label` (usually the file's path) and the tensor concerned:
//   - the header is valid UTF-8 JSON, an object, at most kMaxSafetensorsHeaderBytes long, and
//     no top-level key appears twice;
//   - "__metadata__" (optional, may be null) is an object of string -> string;
//   - every other key is a tensor: {"dtype": string, "shape": [int >= 0, ...],
//     "data_offsets": [begin, end]} (other fields are ignored);
//   - shape has at most Shape::kMaxDims dims and numel * dtype size does not overflow;
//   - begin <= end <= data_size and end - begin == numel * dtype size;
//   - no two tensors share a byte (gaps between tensors are allowed).
// Throws Error kInvalidModel for a malformed header and kUnsupported for a dtype other than
// F32, F16, BF16, F8_E4M3, I8, U8, I32, I64, BOOL or a shape of too many dims. Never crashes,
// whatever the input. Thread-safe (pure function).
SafetensorsHeader parse_safetensors_header(std::string_view header_json, uint64_t data_size,
                                           const std::string& file_label);

}  // namespace moeserve::io
