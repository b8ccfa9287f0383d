// GGUF files on disk: GgufFile is one file, mmap'd read-only with its header validated;
// GgufCheckpoint is a model, either one file or the splits `NAME-00001-of-0000N.gguf` that
// llama.cpp's gguf-split writes, and hands out every tensor of every split. Depends on core only.
//
//   split 1: | header: all metadata + split.no=0, split.count=N | its tensors |
//   split k: | header: split.no=k-1, split.count=N (+ whatever)   | its tensors |
#pragma once

#include <filesystem>
#include <memory>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "moeserve/core/tensor.h"
#include "moeserve/io/gguf_header.h"
#include "moeserve/io/mapped_file.h"

namespace moeserve::io {

// A tensor's blocks in a mapping (read-only memory), kept alive by `owner`.
struct GgufTensor {
    const GgufTensorInfo* info = nullptr;
    std::span<const uint8_t> bytes;
    std::shared_ptr<const MappedFile> owner;
};

// Immutable after construction: every const method is safe to call from many threads.
class GgufFile {
public:
    // Maps and validates the file (parse_gguf_header lists the checks). Throws Error naming the
    // file: kNotFound, kIo, kInvalidModel, kUnsupported.
    explicit GgufFile(const std::filesystem::path& path);

    const std::filesystem::path& path() const { return mapping_->path(); }
    const GgufHeader& header() const { return header_; }
    const std::shared_ptr<const MappedFile>& mapping() const { return mapping_; }
    // The bytes of one of this file's tensors.
    std::span<const uint8_t> bytes(const GgufTensorInfo& t) const {
        return {mapping_->data() + header_.data_offset + t.offset, t.nbytes};
    }

private:
    std::shared_ptr<const MappedFile> mapping_;
    GgufHeader header_;
};

// Immutable after construction: every const method is safe to call from many threads.
class GgufCheckpoint {
public:
    // Opens `path`. When its metadata has split.count > 1, `path` must be named
    // PREFIX-KKKKK-of-NNNNN.gguf (any of the splits) and every split PREFIX-0000i-of-NNNNN.gguf is
    // opened. Throws Error kInvalidModel naming the file and key when a split is missing, has
    // another split.no / split.count, repeats a tensor of another split, or when split 1's
    // split.tensors.count differs from the number of tensors found; plus GgufFile's errors.
    explicit GgufCheckpoint(const std::filesystem::path& path);

    // The metadata of the model (split 1's header; the other splits carry only split.*).
    const GgufHeader& metadata() const { return files_.front()->header(); }
    size_t num_files() const { return files_.size(); }
    const GgufFile& file(size_t i) const { return *files_[i]; }

    // Every tensor of every split, in split order and then file order.
    const std::vector<std::string>& tensor_names() const { return names_; }
    size_t num_tensors() const { return names_.size(); }
    bool contains(const std::string& name) const { return where_.count(name) != 0; }
    // Throws kNotFound naming the first file.
    const GgufTensorInfo& info(const std::string& name) const;
    // The tensor's blocks. Throws kNotFound, and kUnsupported naming the file, the tensor and its
    // type when the type is one moeserve cannot compute with (ggml_type_traits().supported).
    GgufTensor tensor(const std::string& name) const;
    // A zero-copy TensorView of an F32, F16 or BF16 tensor; kUnsupported for other types.
    TensorView view(const std::string& name) const;
    // Throws kUnsupported naming the first tensor (in tensor_names() order) whose type is not
    // supported, with the file and the type's name.
    void check_types_supported() const;

private:
    struct Location {
        size_t file = 0;
        const GgufTensorInfo* info = nullptr;
    };
    const Location& locate(const std::string& name) const;
    void add_tensors(size_t file_index);

    std::vector<std::unique_ptr<GgufFile>> files_;
    std::vector<std::string> names_;
    std::unordered_map<std::string, Location> where_;
};

}  // namespace moeserve::io
