// SafetensorsWriter: collects named tensors and writes them as a .safetensors file (or a sharded
// checkpoint with model.safetensors.index.json), byte-compatible with the reference serializer.
// Used by the tiny-model generator and by tests. Depends on core only.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "moeserve/core/tensor.h"

namespace moeserve::io {

// Not thread-safe; one writer per thread. Holds every added tensor in memory until destroyed.
class SafetensorsWriter {
public:
    // Starts with metadata {"format": "pt"}, as transformers writes it.
    SafetensorsWriter();

    // Copies numel(shape) * dtype_size(dtype) bytes from `data` (may be null when that is 0).
    // Throws Error kInvalidArgument for a duplicate, empty, "__metadata__" or non-UTF-8 name.
    void add(const std::string& name, DType dtype, const Shape& shape, const void* data);
    // Takes ownership of `tensor` without copying its bytes; same name rules as above.
    void add(const std::string& name, Tensor&& tensor);
    // Sets one "__metadata__" entry (overwrites an existing key).
    void set_metadata(const std::string& key, const std::string& value);
    // Removes every "__metadata__" entry, including the default one.
    void clear_metadata() { metadata_.clear(); }

    bool contains(const std::string& name) const { return tensors_.count(name) != 0; }
    size_t num_tensors() const { return tensors_.size(); }
    // Sum of all tensors' bytes.
    uint64_t total_bytes() const;

    // Writes one file: 8-byte LE header length, compact JSON header ("__metadata__" first, then
    // the tensors in data order) padded with spaces to a multiple of 8, then the data.
    // Data order is the reference serializer's: by dtype alignment, widest first, then by name;
    // with a single dtype that is plain name order. Every tensor therefore starts at a multiple
    // of its element size and there are no gaps. Written to `path`.tmp and renamed over `path`.
    // Throws Error kIo naming the path.
    void write(const std::filesystem::path& path) const;

    // Writes a checkpoint into `dir` the way transformers shards one: tensors in name order are
    // packed greedily into shards of at most `max_shard_bytes` (a single bigger tensor gets a shard
    // of its own), named model-00001-of-0000N.safetensors, plus model.safetensors.index.json.
    // When everything fits in one shard it writes model.safetensors and no index.
    // Returns the file names written (shards first, then the index). Creates `dir` if missing.
    std::vector<std::string> write_sharded(const std::filesystem::path& dir, uint64_t max_shard_bytes) const;

    // Writes a model.safetensors.index.json: {"metadata": {"total_size": N}, "weight_map": {...}}
    // with sorted keys and 2-space indentation, as transformers does.
    static void write_index(const std::filesystem::path& path, const std::map<std::string, std::string>& weight_map,
                            uint64_t total_size);

private:
    void check_new_name(const std::string& name) const;

    std::map<std::string, Tensor> tensors_;
    std::map<std::string, std::string> metadata_;
};

// Replaces `path` with the concatenated `parts`: writes `path`.tmp, then renames it over `path`,
// so readers never see a half-written file. Throws Error kIo naming the path.
void write_file_atomically(const std::filesystem::path& path, const std::vector<std::string_view>& parts);

}  // namespace moeserve::io
