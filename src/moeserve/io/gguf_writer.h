// GgufWriter: metadata and tensors (already in their ggml block format) written as a GGUF v3
// file or as llama.cpp-style splits. Used by `moeserve make-model` and by tests; quantizing
// floats into blocks is the kernels' job (kernels/cpu/gguf_quantize.h), which cli/ wires in.
// Depends on core only.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <unordered_map>
#include <vector>

#include "moeserve/core/ggml_type.h"
#include "moeserve/core/tensor.h"
#include "moeserve/io/gguf_value.h"

namespace moeserve::io {

// Not thread-safe; one writer per thread. Holds every tensor's bytes until destroyed.
class GgufWriter {
public:
    // `alignment` (a power of two up to 1 MiB, checked) is written as general.alignment when it is not the default 32.
    explicit GgufWriter(uint32_t alignment = 32);

    // Sets a metadata key; a key set again keeps its first position. Throws kInvalidArgument for
    // an empty key or for general.alignment (the constructor owns it).
    void set(const std::string& key, GgufValue value);
    void set_string(const std::string& key, const std::string& value);
    void set_u32(const std::string& key, uint32_t value);
    void set_f32(const std::string& key, float value);
    void set_bool(const std::string& key, bool value);

    // Adds a tensor of `shape` (outermost first) whose ggml blocks are `bytes`. Throws
    // kInvalidArgument for an empty or duplicate name, more than 4 dims, a row that is not a whole
    // number of blocks, or a byte count other than the shape needs.
    void add_tensor(const std::string& name, GgmlType type, const Shape& shape, std::string bytes);
    // Copies an F32 / F16 / BF16 tensor as the same GGUF type (kUnsupported for other dtypes).
    void add_tensor(const std::string& name, const TensorView& tensor);

    // The whole file: header, metadata in insertion order, the tensor table in insertion order
    // with each tensor at the next multiple of the alignment, then the data.
    std::string serialize() const;
    // serialize() to `path` (written to `path`.tmp and renamed). Throws kIo naming the path.
    void write(const std::filesystem::path& path) const;
    // Writes splits PREFIX-0000i-of-0000N.gguf the way llama.cpp's gguf-split does: tensors in
    // insertion order, packed greedily so that a split holds at most `max_split_bytes` of tensor
    // data (a bigger tensor gets a split of its own); split 1 has every metadata key, each split
    // has split.no (UINT16), split.count (UINT16) and split 1 also split.tensors.count (INT32).
    // Returns the paths written, in order.
    std::vector<std::filesystem::path> write_splits(const std::filesystem::path& prefix,
                                                    uint64_t max_split_bytes) const;

private:
    struct Entry {
        std::string name;
        GgmlType type;
        Shape shape;
        std::string bytes;
    };
    using Metadata = std::vector<std::pair<std::string, GgufValue>>;
    // The header (padded to the alignment) and the data of `tensors` as parts of one file; the
    // parts point into this writer and `padding`.
    std::vector<std::string_view> file_parts(const std::vector<const Entry*>& tensors, const Metadata& metadata,
                                             std::string& header) const;

    uint32_t alignment_;
    std::string padding_;  // `alignment_` zero bytes
    Metadata metadata_;
    std::unordered_map<std::string, size_t> key_index_;
    std::vector<Entry> tensors_;
    std::unordered_map<std::string, size_t> tensor_index_;
};

}  // namespace moeserve::io
