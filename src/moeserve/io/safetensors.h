// SafetensorsFile: one .safetensors checkpoint file, mmap'd read-only, its header validated,
// tensors handed out as zero-copy views. Depends on core only.
//
//   byte 0        8                 8 + N                                   file end
//        | N (u64 LE) | JSON header, N bytes | data section: tensor bytes at data_offsets |
#pragma once

#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "moeserve/core/tensor.h"
#include "moeserve/io/mapped_file.h"
#include "moeserve/io/safetensors_header.h"

namespace moeserve::io {

// Immutable after construction: every const method is safe to call from many threads.
class SafetensorsFile {
public:
    // Maps and validates the file (see parse_safetensors_header for the header checks).
    // Throws Error naming the file: kNotFound (no file), kIo (cannot read), kInvalidModel (shorter
    // than 8 bytes, header length past the end, malformed header), kUnsupported (unknown dtype).
    explicit SafetensorsFile(const std::filesystem::path& path);

    const std::filesystem::path& path() const { return mapping_->path(); }
    // Tensor names in the order the header lists them.
    const std::vector<std::string>& names() const { return names_; }
    size_t num_tensors() const { return names_.size(); }
    bool contains(const std::string& name) const { return header_.find(name) != nullptr; }
    // Dtype, shape and byte range (relative to data_offset()); throws kNotFound naming the file.
    const TensorInfo& info(const std::string& name) const;
    // A zero-copy view of the tensor's bytes in the mapping; throws kNotFound naming the file.
    // The view's memory is read-only and valid while this object or a copy of mapping() lives.
    TensorView view(const std::string& name) const;
    // The "__metadata__" table (empty when the file has none).
    const std::map<std::string, std::string>& metadata() const { return header_.metadata; }
    // File offset of the data section: 8 + header length.
    uint64_t data_offset() const { return data_offset_; }
    // The mapping that backs every view; keep a copy to keep views alive past this object.
    const std::shared_ptr<const MappedFile>& mapping() const { return mapping_; }

private:
    std::shared_ptr<const MappedFile> mapping_;
    SafetensorsHeader header_;
    std::vector<std::string> names_;
    uint64_t data_offset_ = 0;
};

}  // namespace moeserve::io
