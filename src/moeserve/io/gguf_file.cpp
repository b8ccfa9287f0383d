// GgufFile and GgufCheckpoint: mapping, split discovery and tensor access (see gguf_file.h).
#include "moeserve/io/gguf_file.h"

#include <fmt/format.h>

#include <regex>

#include "moeserve/core/error.h"

namespace moeserve::io {
namespace {

constexpr const char* kSplitNo = "split.no";
constexpr const char* kSplitCount = "split.count";
constexpr const char* kSplitTensorsCount = "split.tensors.count";

// split.count of a file's header; 1 when the key is absent.
int64_t split_count(const GgufHeader& h) {
    if (h.find(kSplitCount) == nullptr) return 1;
    const int64_t n = h.get_int(kSplitCount);
    if (n < 1 || n > 99999) {
        raise(ErrorCode::kInvalidModel, "{}: metadata key '{}' is {}, expected 1 to 99999", h.file, kSplitCount, n);
    }
    return n;
}

int64_t split_no(const GgufHeader& h) { return h.find(kSplitNo) == nullptr ? 0 : h.get_int(kSplitNo); }

// The other splits' paths from one split's name, which must follow llama.cpp's pattern.
std::vector<std::filesystem::path> split_paths(const GgufHeader& h, const std::filesystem::path& path, int64_t count) {
    static const std::regex kPattern(R"(^(.*)-([0-9]{5})-of-([0-9]{5})\.gguf$)");
    const std::string name = path.filename().string();
    std::smatch m;
    if (!std::regex_match(name, m, kPattern) || std::stoll(m[3].str()) != count) {
        raise(ErrorCode::kInvalidModel,
              "{}: metadata key '{}' is {}, but the file is not named PREFIX-NNNNN-of-{:05d}.gguf, so its other "
              "splits cannot be found",
              h.file, kSplitCount, count, count);
    }
    if (std::stoll(m[2].str()) != split_no(h) + 1) {
        raise(ErrorCode::kInvalidModel, "{}: metadata key '{}' is {}, but the name says split {}", h.file, kSplitNo,
              split_no(h), m[2].str());
    }
    std::vector<std::filesystem::path> paths;
    for (int64_t i = 1; i <= count; ++i) {
        paths.push_back(path.parent_path() / fmt::format("{}-{:05d}-of-{:05d}.gguf", m[1].str(), i, count));
    }
    return paths;
}

void check_split(const GgufHeader& h, int64_t index, int64_t count) {
    if (split_count(h) != count || split_no(h) != index) {
        raise(ErrorCode::kInvalidModel,
              "{}: expected split {} of {} ('{}' = {}, '{}' = {}); the splits do not belong "
              "together",
              h.file, index, count, kSplitNo, split_no(h), kSplitCount, split_count(h));
    }
}

}  // namespace

GgufFile::GgufFile(const std::filesystem::path& path) : mapping_(MappedFile::open(path)) {
    header_ = parse_gguf_header(std::span<const uint8_t>(mapping_->data(), mapping_->size()), path.string());
}

GgufCheckpoint::GgufCheckpoint(const std::filesystem::path& path) {
    auto given = std::make_unique<GgufFile>(path);
    const int64_t count = split_count(given->header());
    if (count == 1) {
        files_.push_back(std::move(given));
        add_tensors(0);
        return;
    }
    const std::vector<std::filesystem::path> paths = split_paths(given->header(), path, count);
    const int64_t given_index = split_no(given->header());
    for (int64_t i = 0; i < count; ++i) {
        if (i == given_index) {
            files_.push_back(std::move(given));
        } else {
            files_.push_back(std::make_unique<GgufFile>(paths[static_cast<size_t>(i)]));
        }
        check_split(files_.back()->header(), i, count);
        add_tensors(files_.size() - 1);
    }
    const GgufHeader& first = metadata();
    if (first.find(kSplitTensorsCount) != nullptr &&
        first.get_int(kSplitTensorsCount) != static_cast<int64_t>(names_.size())) {
        raise(ErrorCode::kInvalidModel, "{}: metadata key '{}' is {}, but the {} splits hold {} tensors", first.file,
              kSplitTensorsCount, first.get_int(kSplitTensorsCount), count, names_.size());
    }
}

void GgufCheckpoint::add_tensors(size_t file_index) {
    const GgufFile& f = *files_[file_index];
    for (const GgufTensorInfo& t : f.header().tensors) {
        auto [it, inserted] = where_.emplace(t.name, Location{file_index, &t});
        if (!inserted) {
            raise(ErrorCode::kInvalidModel, "{}: tensor '{}' is also in {}", f.path().string(), gguf_printable(t.name),
                  files_[it->second.file]->path().string());
        }
        names_.push_back(t.name);
    }
}

const GgufCheckpoint::Location& GgufCheckpoint::locate(const std::string& name) const {
    auto it = where_.find(name);
    if (it == where_.end()) {
        raise(ErrorCode::kNotFound, "{}: no tensor '{}' in this GGUF model", files_.front()->path().string(),
              gguf_printable(name));
    }
    return it->second;
}

const GgufTensorInfo& GgufCheckpoint::info(const std::string& name) const { return *locate(name).info; }

GgufTensor GgufCheckpoint::tensor(const std::string& name) const {
    const Location& loc = locate(name);
    const GgufFile& f = *files_[loc.file];
    const GgmlTypeTraits traits = ggml_traits(loc.info->type);
    if (!traits.supported) {
        raise(ErrorCode::kUnsupported, "{}: tensor '{}' has type {}, which moeserve does not support (supported: {})",
              f.path().string(), gguf_printable(name), traits.name, ggml_supported_type_names());
    }
    return GgufTensor{loc.info, f.bytes(*loc.info), f.mapping()};
}

TensorView GgufCheckpoint::view(const std::string& name) const {
    const GgufTensor t = tensor(name);
    const std::optional<DType> dtype = ggml_plain_dtype(t.info->type);
    if (!dtype) {
        raise(ErrorCode::kUnsupported, "{}: tensor '{}' has type {}; only F32, F16 and BF16 tensors have a plain view",
              files_[locate(name).file]->path().string(), gguf_printable(name), ggml_type_name(t.info->type));
    }
    // NOTE: TensorView holds a mutable pointer; the pages are PROT_READ, so writes fault loudly.
    return TensorView{const_cast<uint8_t*>(t.bytes.data()), *dtype, t.info->shape};
}

void GgufCheckpoint::check_types_supported() const {
    for (const std::string& name : names_) (void)tensor(name);
}

}  // namespace moeserve::io
