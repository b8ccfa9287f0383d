// WeightSource: opening a model directory and looking tensors up across files (see weight_source.h).
#include "moeserve/io/weight_source.h"

#include <fmt/format.h>

#include <algorithm>

#include "moeserve/core/error.h"
#include "moeserve/io/safetensors_index.h"

namespace moeserve::io {

std::unique_ptr<WeightSource> WeightSource::open(const std::filesystem::path& model_dir) {
    std::error_code ec;
    if (!std::filesystem::exists(model_dir, ec)) {
        raise(ErrorCode::kNotFound, "model directory {} does not exist", model_dir.string());
    }
    if (!std::filesystem::is_directory(model_dir, ec)) {
        raise(ErrorCode::kNotFound, "{} is not a directory; pass the model directory", model_dir.string());
    }
    std::unique_ptr<WeightSource> src(new WeightSource());
    src->dir_ = model_dir;
    if (std::filesystem::exists(model_dir / kSafetensorsIndexFile, ec)) {
        src->open_index(model_dir / kSafetensorsIndexFile);
    } else if (std::filesystem::exists(model_dir / "model.safetensors", ec)) {
        src->open_single(model_dir / "model.safetensors");
    } else {
        // another saver's index (ModelSlim: quant_model_weights.safetensors.index.json), if one
        std::vector<std::filesystem::path> indexes;
        for (const auto& entry : std::filesystem::directory_iterator(model_dir, ec)) {
            const std::string name = entry.path().filename().string();
            const std::string suffix = ".safetensors.index.json";
            if (name.size() > suffix.size() && name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0) {
                indexes.push_back(entry.path());
            }
        }
        if (indexes.size() == 1) {
            src->open_index(indexes[0]);
        } else {
            src->open_all_in_dir();
        }
    }
    return src;
}

void WeightSource::open_index(const std::filesystem::path& index_path) {
    const SafetensorsIndex index = read_safetensors_index(index_path);
    index_path_ = index_path;
    source_desc_ = index_path.string();
    std::map<std::string, size_t> file_pos;
    for (const std::string& shard : index.shard_files) {
        const std::filesystem::path path = dir_ / shard;
        std::error_code ec;
        if (!std::filesystem::exists(path, ec)) {
            std::vector<std::string> held;
            for (const auto& [name, file] : index.weight_map) {
                if (file == shard) held.push_back(name);
            }
            raise(ErrorCode::kNotFound,
                  "{}: shard '{}' is missing from {} (it should hold '{}'{}); the download may be incomplete",
                  index_path.string(), shard, dir_.string(), held.front(),
                  held.size() > 1 ? fmt::format(" and {} more tensors", held.size() - 1) : "");
        }
        file_pos[shard] = files_.size();
        files_.push_back(std::make_unique<SafetensorsFile>(path));
    }
    for (const auto& [name, shard] : index.weight_map) file_of_[name] = file_pos.at(shard);
}

void WeightSource::open_single(const std::filesystem::path& file) {
    source_desc_ = file.string();
    files_.push_back(std::make_unique<SafetensorsFile>(file));
    for (const std::string& name : files_.back()->names()) file_of_[name] = 0;
}

void WeightSource::open_all_in_dir() {
    std::vector<std::filesystem::path> paths;
    std::error_code ec;
    for (const auto& entry : std::filesystem::directory_iterator(dir_, ec)) {
        if (entry.path().extension() == ".safetensors" && entry.is_regular_file(ec)) paths.push_back(entry.path());
    }
    if (ec) raise(ErrorCode::kIo, "{}: cannot list directory: {}", dir_.string(), ec.message());
    if (paths.empty()) {
        raise(ErrorCode::kNotFound, "no model.safetensors or {} in {} (and no other *.safetensors files)",
              kSafetensorsIndexFile, dir_.string());
    }
    std::sort(paths.begin(), paths.end());
    source_desc_ = fmt::format("the {} *.safetensors files in {}", paths.size(), dir_.string());
    for (const auto& path : paths) {
        files_.push_back(std::make_unique<SafetensorsFile>(path));
        for (const std::string& name : files_.back()->names()) {
            auto [it, inserted] = file_of_.emplace(name, files_.size() - 1);
            if (!inserted) {
                raise(ErrorCode::kInvalidModel, "{}: tensor '{}' is in both {} and {}; which one is meant?",
                      dir_.string(), name, files_[it->second]->path().filename().string(), path.filename().string());
            }
        }
    }
}

std::unique_ptr<WeightSource> WeightSource::renamed(std::unique_ptr<WeightSource> base,
                                                    const std::map<std::string, std::string>& aliases,
                                                    std::map<std::string, Tensor> owned) {
    std::unique_ptr<WeightSource> out(new WeightSource());
    out->dir_ = base->dir_;
    out->index_path_ = base->index_path_;
    out->source_desc_ = base->source_desc_ + ", renamed";
    for (const auto& [name, from] : aliases) {
        MOESERVE_CHECK(owned.count(name) == 0, "renamed: '{}' is both an alias and an owned tensor", name);
        const auto it = base->file_of_.find(from);
        MOESERVE_CHECK(it != base->file_of_.end(), "renamed: alias '{}' -> '{}' is not a file tensor of the base", name,
                       from);
        out->file_of_.emplace(name, it->second);
        const std::string stored = base->stored_name(from);  // the base may be renamed itself
        if (name != stored) out->stored_.emplace(name, stored);
    }
    out->files_ = std::move(base->files_);
    out->owned_ = std::move(owned);
    return out;
}

std::vector<std::string> WeightSource::names() const {
    std::vector<std::string> out;
    out.reserve(num_tensors());
    for (const auto& [name, ref] : gguf_names_) out.push_back(name);
    for (const auto& [name, pos] : file_of_) out.push_back(name);
    for (const auto& [name, t] : owned_) out.push_back(name);
    std::sort(out.begin(), out.end());
    return out;
}

std::string WeightSource::stored_name(const std::string& name) const {
    const auto it = stored_.find(name);
    return it == stored_.end() ? name : it->second;
}

std::string WeightSource::describe(const std::string& name) const {
    if (owned_.count(name) != 0) return fmt::format("'{}' (converted in memory from {})", name, dir_.string());
    if (gguf_) {
        const auto g = gguf_names_.find(name);
        if (g == gguf_names_.end()) return fmt::format("'{}' (not in {})", name, dir_.string());
        const std::string stored =
            g->second.index < 0 ? g->second.tensor : fmt::format("{}[{}]", g->second.tensor, g->second.index);
        return fmt::format("'{}' (read as '{}') in {}", stored, name, dir_.string());
    }
    const auto it = file_of_.find(name);
    if (it == file_of_.end()) return fmt::format("'{}' (not in {})", name, dir_.string());
    const std::string file = files_[it->second]->path().string();
    const std::string stored = stored_name(name);
    return stored == name ? fmt::format("'{}' in {}", name, file)
                          : fmt::format("'{}' (read as '{}') in {}", stored, name, file);
}

const SafetensorsFile& WeightSource::file_of(const std::string& name) const {
    if (gguf_) raise(ErrorCode::kUnsupported, "{}: a GGUF file has no safetensors tensor {}", dir_.string(), name);
    auto it = file_of_.find(name);
    if (it == file_of_.end()) {
        if (owned_.count(name) != 0) {
            raise(ErrorCode::kNotFound, "{}: tensor '{}' was converted in memory and is in no file", dir_.string(),
                  name);
        }
        raise(ErrorCode::kNotFound, "{}: no tensor '{}' in the checkpoint ({})", dir_.string(), name, source_desc_);
    }
    const SafetensorsFile& file = *files_[it->second];
    const std::string stored = stored_name(name);
    if (!file.contains(stored)) {  // only possible with an index
        raise(ErrorCode::kNotFound, "{}: '{}' is mapped to '{}', which does not contain it",
              index_path_ ? index_path_->string() : dir_.string(), stored, file.path().filename().string());
    }
    return file;
}

const TensorInfo& WeightSource::info(const std::string& name) const { return file_of(name).info(stored_name(name)); }

TensorView WeightSource::get(const std::string& name) const {
    if (gguf_) return gguf_view(name);
    const auto it = owned_.find(name);
    if (it != owned_.end()) return it->second.view();
    return file_of(name).view(stored_name(name));
}

TensorView WeightSource::get(const std::string& name, DType dtype, const Shape& shape) const {
    const TensorView view = get(name);
    if (view.dtype != dtype || !(view.shape == shape)) {
        raise(ErrorCode::kInvalidModel, "{}: should be {} {}, but it has {} {}", describe(name), dtype_name(dtype),
              shape.str(), dtype_name(view.dtype), view.shape.str());
    }
    return view;
}

Tensor WeightSource::load_f32(const std::string& name) const {
    const TensorView src = get(name);
    Tensor out(DType::kF32, src.shape);
    convert_to_f32(src, out.as<float>());
    return out;
}

void WeightSource::drop_resident(const std::string& name) const {
    if (owned_.count(name) != 0) return;
    if (gguf_) {  // a stacked expert's slice, or a whole tensor
        const std::optional<GgufBlocks> b = gguf(name);
        if (b->owner) b->owner->drop_resident(b->bytes.data(), b->bytes.size());
        return;
    }
    const SafetensorsFile& file = file_of(name);
    const TensorView view = file.view(stored_name(name));
    file.mapping()->drop_resident(static_cast<const uint8_t*>(view.data), view.nbytes());
}

std::vector<std::shared_ptr<const MappedFile>> WeightSource::mappings() const {
    std::vector<std::shared_ptr<const MappedFile>> out;
    for (const auto& f : files_) out.push_back(f->mapping());
    if (gguf_) {
        for (size_t i = 0; i < gguf_->num_files(); ++i) out.push_back(gguf_->file(i).mapping());
    }
    return out;
}

std::vector<std::filesystem::path> WeightSource::files() const {
    std::vector<std::filesystem::path> out;
    for (const auto& f : files_) out.push_back(f->path());
    if (gguf_) {
        for (size_t i = 0; i < gguf_->num_files(); ++i) out.push_back(gguf_->file(i).path());
    }
    return out;
}

}  // namespace moeserve::io
