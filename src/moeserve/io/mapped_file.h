// A whole file mapped read-only into memory (mmap). Held by shared_ptr so tensor views into it
// stay valid for as long as any holder keeps the mapping. Depends on core only.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>

namespace moeserve::io {

class MappedFile {
public:
    // Maps the regular file at `path` read-only. Throws Error kNotFound when it does not exist,
    // kIo when it is not a regular file or cannot be opened or mapped. An empty file maps to
    // data() == nullptr, size() == 0.
    static std::shared_ptr<const MappedFile> open(const std::filesystem::path& path);

    ~MappedFile();
    MappedFile(const MappedFile&) = delete;
    MappedFile& operator=(const MappedFile&) = delete;

    // The file's bytes; read-only memory (writing through a view into it faults).
    const uint8_t* data() const { return data_; }
    uint64_t size() const { return size_; }
    const std::filesystem::path& path() const { return path_; }

    // Drops this process's resident pages among [begin, begin + n) (the whole pages inside it; a
    // range outside the mapping is ignored): for bytes a loader has copied into its own form, so
    // the mapping no longer counts in the resident memory. Touched again, the pages are read back
    // from the file (the mapping is private and never written, so nothing is lost).
    void drop_resident(const uint8_t* begin, uint64_t n) const;

private:
    MappedFile(std::filesystem::path path, const uint8_t* data, uint64_t size)
        : path_(std::move(path)), data_(data), size_(size) {}

    std::filesystem::path path_;
    const uint8_t* data_ = nullptr;
    uint64_t size_ = 0;
};

}  // namespace moeserve::io
