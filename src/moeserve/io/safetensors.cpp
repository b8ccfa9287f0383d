// SafetensorsFile: mapping, header framing and zero-copy views (see safetensors.h).
#include "moeserve/io/safetensors.h"

#include <cstring>

#include "moeserve/core/error.h"

namespace moeserve::io {

SafetensorsFile::SafetensorsFile(const std::filesystem::path& path) : mapping_(MappedFile::open(path)) {
    const std::string label = path.string();
    const uint64_t file_size = mapping_->size();
    if (file_size < 8) {
        raise(ErrorCode::kInvalidModel,
              "{}: file is {} bytes, shorter than the 8-byte safetensors header length; not a safetensors "
              "file or truncated",
              label, file_size);
    }
    uint64_t header_len = 0;
    for (int i = 7; i >= 0; --i) header_len = (header_len << 8) | mapping_->data()[i];  // little-endian
    if (header_len > file_size - 8) {
        raise(ErrorCode::kInvalidModel,
              "{}: header length {} runs past the end of the file ({} bytes); not a safetensors file or "
              "truncated",
              label, header_len, file_size);
    }
    data_offset_ = 8 + header_len;
    const std::string_view header_json(reinterpret_cast<const char*>(mapping_->data()) + 8, header_len);
    header_ = parse_safetensors_header(header_json, file_size - data_offset_, label);
    names_.reserve(header_.tensors.size());
    for (const TensorInfo& t : header_.tensors) names_.push_back(t.name);
}

const TensorInfo& SafetensorsFile::info(const std::string& name) const {
    const TensorInfo* t = header_.find(name);
    if (t == nullptr) raise(ErrorCode::kNotFound, "{}: no tensor '{}' in this file", path().string(), name);
    return *t;
}

TensorView SafetensorsFile::view(const std::string& name) const {
    const TensorInfo& t = info(name);
    // NOTE: TensorView holds a mutable pointer; the pages are PROT_READ, so writes fault loudly.
    const uint8_t* bytes = mapping_->data() + data_offset_ + t.data_begin;
    return TensorView{const_cast<uint8_t*>(bytes), t.dtype, t.shape};
}

}  // namespace moeserve::io
