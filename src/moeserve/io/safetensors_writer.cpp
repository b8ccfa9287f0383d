// SafetensorsWriter: header layout, data order, atomic writes and sharding (see safetensors_writer.h).
#include "moeserve/io/safetensors_writer.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>

#include "moeserve/core/error.h"

namespace moeserve::io {
namespace {

using Json = nlohmann::ordered_json;

// Position of each dtype in the reference serializer's Dtype enum, which lists dtypes in
// increasing alignment; data is laid out from the highest rank down (then by name).
int alignment_rank(DType dtype) {
    switch (dtype) {
        case DType::kBool:
            return 0;
        case DType::kU8:
            return 1;
        case DType::kI8:
            return 2;
        case DType::kF8E4M3:
            return 4;
        case DType::kF16:
            return 7;
        case DType::kBF16:
            return 8;
        case DType::kI32:
            return 9;
        case DType::kF32:
            return 11;
        case DType::kI64:
            return 13;
    }
    return 0;
}

using Entry = std::pair<const std::string*, const Tensor*>;

// Header bytes (padded to a multiple of 8 with spaces) for `entries` in data order.
std::string make_header(const std::vector<Entry>& entries, const std::map<std::string, std::string>& metadata) {
    Json root = Json::object();
    if (!metadata.empty()) {
        Json meta = Json::object();
        for (const auto& [k, v] : metadata) meta[k] = v;
        root["__metadata__"] = std::move(meta);
    }
    uint64_t offset = 0;
    for (const auto& [name, tensor] : entries) {
        Json shape = Json::array();
        for (int64_t d : tensor->shape().dims()) shape.push_back(d);
        const uint64_t end = offset + tensor->nbytes();
        Json info = Json::object();
        info["dtype"] = std::string(dtype_name(tensor->dtype()));
        info["shape"] = std::move(shape);
        info["data_offsets"] = Json::array({offset, end});
        root[*name] = std::move(info);
        offset = end;
    }
    std::string header = root.dump();
    header.append((8 - header.size() % 8) % 8, ' ');
    return header;
}

void write_entries(const std::filesystem::path& path, std::vector<Entry> entries,
                   const std::map<std::string, std::string>& metadata) {
    std::sort(entries.begin(), entries.end(), [](const Entry& a, const Entry& b) {
        const int ra = alignment_rank(a.second->dtype());
        const int rb = alignment_rank(b.second->dtype());
        return ra != rb ? ra > rb : *a.first < *b.first;
    });
    const std::string header = make_header(entries, metadata);
    char len_bytes[8];
    uint64_t n = header.size();
    for (char& b : len_bytes) {  // little-endian
        b = static_cast<char>(n & 0xff);
        n >>= 8;
    }
    std::vector<std::string_view> parts{std::string_view(len_bytes, 8), header};
    for (const auto& [name, tensor] : entries) {
        parts.emplace_back(static_cast<const char*>(tensor->data()), tensor->nbytes());
    }
    write_file_atomically(path, parts);
}

std::string shard_name(size_t index, size_t count) {
    return fmt::format("model-{:05d}-of-{:05d}.safetensors", index + 1, count);
}

}  // namespace

SafetensorsWriter::SafetensorsWriter() { metadata_["format"] = "pt"; }

void SafetensorsWriter::check_new_name(const std::string& name) const {
    if (name.empty()) raise(ErrorCode::kInvalidArgument, "safetensors writer: tensor name is empty");
    if (name == "__metadata__") {
        raise(ErrorCode::kInvalidArgument, "safetensors writer: '__metadata__' is reserved, not a tensor name");
    }
    if (tensors_.count(name)) {
        raise(ErrorCode::kInvalidArgument, "safetensors writer: tensor '{}' was already added", name);
    }
    try {
        (void)Json(name).dump();  // throws on invalid UTF-8
    } catch (const Json::exception&) {
        raise(ErrorCode::kInvalidArgument, "safetensors writer: tensor name '{}' is not valid UTF-8", name);
    }
}

void SafetensorsWriter::add(const std::string& name, DType dtype, const Shape& shape, const void* data) {
    check_new_name(name);
    Tensor t(dtype, shape);
    if (t.nbytes() != 0) {
        MOESERVE_CHECK(data != nullptr, "add('{}'): null data for {} bytes", name, t.nbytes());
        std::memcpy(t.data(), data, t.nbytes());
    }
    tensors_.emplace(name, std::move(t));
}

void SafetensorsWriter::add(const std::string& name, Tensor&& tensor) {
    check_new_name(name);
    tensors_.emplace(name, std::move(tensor));
}

void SafetensorsWriter::set_metadata(const std::string& key, const std::string& value) {
    try {
        (void)Json({{key, value}}).dump();
    } catch (const Json::exception&) {
        raise(ErrorCode::kInvalidArgument, "safetensors writer: metadata '{}' is not valid UTF-8", key);
    }
    metadata_[key] = value;
}

uint64_t SafetensorsWriter::total_bytes() const {
    uint64_t total = 0;
    for (const auto& [name, t] : tensors_) total += t.nbytes();
    return total;
}

void SafetensorsWriter::write(const std::filesystem::path& path) const {
    std::vector<Entry> entries;
    for (const auto& [name, t] : tensors_) entries.emplace_back(&name, &t);
    write_entries(path, std::move(entries), metadata_);
}

std::vector<std::string> SafetensorsWriter::write_sharded(const std::filesystem::path& dir,
                                                          uint64_t max_shard_bytes) const {
    // 1. Pack tensors, in name order, greedily into shards.
    std::vector<std::vector<Entry>> shards(1);
    uint64_t current = 0;
    for (const auto& [name, t] : tensors_) {
        if (!shards.back().empty() && current + t.nbytes() > max_shard_bytes) {
            shards.emplace_back();
            current = 0;
        }
        shards.back().emplace_back(&name, &t);
        current += t.nbytes();
    }
    std::error_code ec;
    std::filesystem::create_directories(dir, ec);
    if (ec) raise(ErrorCode::kIo, "{}: cannot create directory: {}", dir.string(), ec.message());
    // 2. One shard: a plain model.safetensors.
    if (shards.size() == 1) {
        write_entries(dir / "model.safetensors", shards[0], metadata_);
        return {"model.safetensors"};
    }
    // 3. Several: numbered shards plus the index.
    std::vector<std::string> written;
    std::map<std::string, std::string> weight_map;
    for (size_t i = 0; i < shards.size(); ++i) {
        const std::string file = shard_name(i, shards.size());
        for (const auto& [name, t] : shards[i]) weight_map[*name] = file;
        write_entries(dir / file, shards[i], metadata_);
        written.push_back(file);
    }
    write_index(dir / "model.safetensors.index.json", weight_map, total_bytes());
    written.push_back("model.safetensors.index.json");
    return written;
}

void SafetensorsWriter::write_index(const std::filesystem::path& path,
                                    const std::map<std::string, std::string>& weight_map, uint64_t total_size) {
    nlohmann::json index;  // sorted keys
    index["metadata"] = {{"total_size", total_size}};
    index["weight_map"] = nlohmann::json::object();
    for (const auto& [name, file] : weight_map) index["weight_map"][name] = file;
    const std::string text = index.dump(2) + "\n";
    write_file_atomically(path, {text});
}

void write_file_atomically(const std::filesystem::path& path, const std::vector<std::string_view>& parts) {
    std::filesystem::path tmp = path;
    tmp += ".tmp";
    {
        std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
        if (!out) raise(ErrorCode::kIo, "{}: cannot open for writing: {}", tmp.string(), std::strerror(errno));
        for (std::string_view p : parts) out.write(p.data(), static_cast<std::streamsize>(p.size()));
        out.flush();
        if (!out) {
            out.close();
            std::error_code ignored;
            std::filesystem::remove(tmp, ignored);
            raise(ErrorCode::kIo, "{}: write failed (disk full?)", tmp.string());
        }
    }
    std::error_code ec;
    std::filesystem::rename(tmp, path, ec);
    if (ec) {
        std::error_code ignored;
        std::filesystem::remove(tmp, ignored);
        raise(ErrorCode::kIo, "{}: cannot rename {} over it: {}", path.string(), tmp.string(), ec.message());
    }
}

}  // namespace moeserve::io
