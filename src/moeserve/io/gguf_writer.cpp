// GgufWriter: serialization of the header, the tensor table and the aligned data (see
// gguf_writer.h).
#include "moeserve/io/gguf_writer.h"

#include <fmt/format.h>

#include <cstring>

#include "moeserve/core/error.h"
#include "moeserve/io/gguf_header.h"
#include "moeserve/io/safetensors_writer.h"

namespace moeserve::io {
namespace {

template <typename T>
void put(std::string& out, T v) {
    char b[sizeof(T)];
    std::memcpy(b, &v, sizeof(T));
    out.append(b, sizeof(T));
}

void put_string(std::string& out, std::string_view s) {
    put<uint64_t>(out, s.size());
    out.append(s);
}

void put_array(std::string& out, const GgufArray& a) {
    put<uint32_t>(out, static_cast<uint32_t>(a.type()));
    put<uint64_t>(out, a.size());
    if (a.type() == GgufValueType::kString) {
        for (size_t i = 0; i < a.size(); ++i) put_string(out, a.string_at(i));
    } else if (a.type() == GgufValueType::kArray) {
        for (size_t i = 0; i < a.size(); ++i) put_array(out, a.array_at(i));
    } else {
        out.append(a.scalar_bytes());
    }
}

void put_value(std::string& out, const GgufValue& v) {
    put<uint32_t>(out, static_cast<uint32_t>(v.type()));
    std::visit(
        [&](const auto& x) {
            using T = std::decay_t<decltype(x)>;
            if constexpr (std::is_same_v<T, std::string>) {
                put_string(out, x);
            } else if constexpr (std::is_same_v<T, GgufArray>) {
                put_array(out, x);
            } else if constexpr (std::is_same_v<T, bool>) {
                put<uint8_t>(out, x ? 1 : 0);
            } else {
                put<T>(out, x);
            }
        },
        v.storage());
}

uint64_t align_up(uint64_t n, uint64_t alignment) { return (n + alignment - 1) / alignment * alignment; }

GgmlType ggml_type_of(DType dtype, const std::string& name) {
    switch (dtype) {
        case DType::kF32:
            return GgmlType::kF32;
        case DType::kF16:
            return GgmlType::kF16;
        case DType::kBF16:
            return GgmlType::kBF16;
        default:
            raise(ErrorCode::kUnsupported, "gguf writer: tensor '{}' has dtype {}; only F32, F16 and BF16 copy as-is",
                  name, dtype_name(dtype));
    }
}

}  // namespace

GgufWriter::GgufWriter(uint32_t alignment) : alignment_(alignment) {
    if (alignment == 0 || (alignment & (alignment - 1)) != 0 || alignment > (1u << 20)) {
        raise(ErrorCode::kInvalidArgument, "gguf writer: alignment {} is not a power of two up to 1 MiB", alignment);
    }
    padding_.assign(alignment, '\0');
    if (alignment != kGgufDefaultAlignment) {
        metadata_.emplace_back("general.alignment", GgufValue::of<GgufValueType::kUint32>(alignment));
        key_index_.emplace("general.alignment", 0);
    }
}

void GgufWriter::set(const std::string& key, GgufValue value) {
    if (key.empty()) raise(ErrorCode::kInvalidArgument, "gguf writer: metadata key is empty");
    if (key == "general.alignment") {
        raise(ErrorCode::kInvalidArgument, "gguf writer: general.alignment is set by the constructor");
    }
    auto [it, inserted] = key_index_.emplace(key, metadata_.size());
    if (inserted) {
        metadata_.emplace_back(key, std::move(value));
    } else {
        metadata_[it->second].second = std::move(value);
    }
}

void GgufWriter::set_string(const std::string& key, const std::string& value) {
    set(key, GgufValue::of<GgufValueType::kString>(value));
}
void GgufWriter::set_u32(const std::string& key, uint32_t value) {
    set(key, GgufValue::of<GgufValueType::kUint32>(value));
}
void GgufWriter::set_f32(const std::string& key, float value) {
    set(key, GgufValue::of<GgufValueType::kFloat32>(value));
}
void GgufWriter::set_bool(const std::string& key, bool value) { set(key, GgufValue::of<GgufValueType::kBool>(value)); }

void GgufWriter::add_tensor(const std::string& name, GgmlType type, const Shape& shape, std::string bytes) {
    if (name.empty()) raise(ErrorCode::kInvalidArgument, "gguf writer: tensor name is empty");
    if (tensor_index_.count(name) != 0) {
        raise(ErrorCode::kInvalidArgument, "gguf writer: tensor '{}' was already added", name);
    }
    if (shape.rank() > kGgufMaxDims) {
        raise(ErrorCode::kInvalidArgument, "gguf writer: tensor '{}' has {} dims, GGUF allows at most {}", name,
              shape.rank(), kGgufMaxDims);
    }
    const GgmlTypeTraits traits = ggml_traits(type);
    const int64_t row = shape.rank() == 0 ? 1 : shape[shape.rank() - 1];
    const auto nbytes = ggml_nbytes(type, static_cast<uint64_t>(shape.numel()));
    if (row % traits.block_size != 0 || !nbytes || *nbytes != bytes.size()) {
        raise(ErrorCode::kInvalidArgument,
              "gguf writer: tensor '{}' {} {} needs rows that are whole blocks of {} and {} bytes, got {} bytes", name,
              traits.name, shape.str(), traits.block_size, nbytes.value_or(0), bytes.size());
    }
    tensor_index_.emplace(name, tensors_.size());
    tensors_.push_back(Entry{name, type, shape, std::move(bytes)});
}

void GgufWriter::add_tensor(const std::string& name, const TensorView& tensor) {
    const GgmlType type = ggml_type_of(tensor.dtype, name);
    add_tensor(name, type, tensor.shape, std::string(static_cast<const char*>(tensor.data), tensor.nbytes()));
}

std::vector<std::string_view> GgufWriter::file_parts(const std::vector<const Entry*>& tensors, const Metadata& metadata,
                                                     std::string& header) const {
    header.clear();
    header.append("GGUF");
    put<uint32_t>(header, 3);
    put<uint64_t>(header, tensors.size());
    put<uint64_t>(header, metadata.size());
    for (const auto& [key, value] : metadata) {
        put_string(header, key);
        put_value(header, value);
    }
    uint64_t offset = 0;
    for (const Entry* t : tensors) {
        put_string(header, t->name);
        put<uint32_t>(header, static_cast<uint32_t>(t->shape.rank()));
        for (int d = t->shape.rank() - 1; d >= 0; --d) put<uint64_t>(header, static_cast<uint64_t>(t->shape[d]));
        put<uint32_t>(header, static_cast<uint32_t>(t->type));
        put<uint64_t>(header, offset);
        offset = align_up(offset + t->bytes.size(), alignment_);
    }
    header.append(align_up(header.size(), alignment_) - header.size(), '\0');
    std::vector<std::string_view> parts{header};
    for (const Entry* t : tensors) {
        parts.emplace_back(t->bytes);
        parts.push_back(std::string_view(padding_).substr(0, align_up(t->bytes.size(), alignment_) - t->bytes.size()));
    }
    return parts;
}

std::string GgufWriter::serialize() const {
    std::vector<const Entry*> all;
    for (const Entry& e : tensors_) all.push_back(&e);
    std::string header;
    std::string out;
    for (const std::string_view part : file_parts(all, metadata_, header)) out.append(part);
    return out;
}

void GgufWriter::write(const std::filesystem::path& path) const {
    std::vector<const Entry*> all;
    for (const Entry& e : tensors_) all.push_back(&e);
    std::string header;
    write_file_atomically(path, file_parts(all, metadata_, header));
}

std::vector<std::filesystem::path> GgufWriter::write_splits(const std::filesystem::path& prefix,
                                                            uint64_t max_split_bytes) const {
    std::vector<std::vector<const Entry*>> splits(1);
    uint64_t bytes = 0;
    for (const Entry& e : tensors_) {
        if (!splits.back().empty() && bytes + e.bytes.size() > max_split_bytes) {
            splits.emplace_back();
            bytes = 0;
        }
        splits.back().push_back(&e);
        bytes += e.bytes.size();
    }
    if (splits.size() > 65535) {
        raise(ErrorCode::kInvalidArgument, "gguf writer: {} splits of at most {} bytes; split.count is a UINT16",
              splits.size(), max_split_bytes);
    }
    const auto count = static_cast<uint16_t>(splits.size());
    std::vector<std::filesystem::path> paths;
    for (size_t i = 0; i < splits.size(); ++i) {
        Metadata metadata = i == 0 ? metadata_ : Metadata{};
        if (i != 0 && alignment_ != kGgufDefaultAlignment) metadata.push_back(metadata_.front());
        metadata.emplace_back("split.no", GgufValue::of<GgufValueType::kUint16>(static_cast<uint16_t>(i)));
        metadata.emplace_back("split.count", GgufValue::of<GgufValueType::kUint16>(count));
        if (i == 0) {
            metadata.emplace_back("split.tensors.count",
                                  GgufValue::of<GgufValueType::kInt32>(static_cast<int32_t>(tensors_.size())));
        }
        std::filesystem::path path = prefix;
        path += fmt::format("-{:05d}-of-{:05d}.gguf", i + 1, splits.size());
        std::string header;
        write_file_atomically(path, file_parts(splits[i], metadata, header));
        paths.push_back(path);
    }
    return paths;
}

}  // namespace moeserve::io
