// Read-only mmap of a file (see mapped_file.h).
#include "moeserve/io/mapped_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "moeserve/core/error.h"

namespace moeserve::io {
namespace {

// Closes a descriptor on every path out of open().
struct FdCloser {
    int fd;
    ~FdCloser() {
        if (fd >= 0) ::close(fd);
    }
};

}  // namespace

std::shared_ptr<const MappedFile> MappedFile::open(const std::filesystem::path& path) {
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        const int err = errno;
        if (err == ENOENT) raise(ErrorCode::kNotFound, "{}: no such file", path.string());
        raise(ErrorCode::kIo, "{}: cannot open for reading: {}", path.string(), std::strerror(err));
    }
    FdCloser closer{fd};
    struct stat st {};
    if (::fstat(fd, &st) != 0) {
        raise(ErrorCode::kIo, "{}: cannot stat: {}", path.string(), std::strerror(errno));
    }
    if (!S_ISREG(st.st_mode)) raise(ErrorCode::kIo, "{}: not a regular file", path.string());
    const uint64_t size = static_cast<uint64_t>(st.st_size);
    if (size == 0) return std::shared_ptr<const MappedFile>(new MappedFile(path, nullptr, 0));
    void* addr = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
    if (addr == MAP_FAILED) {
        raise(ErrorCode::kIo, "{}: mmap of {} bytes failed: {}", path.string(), size, std::strerror(errno));
    }
    return std::shared_ptr<const MappedFile>(new MappedFile(path, static_cast<const uint8_t*>(addr), size));
}

void MappedFile::drop_resident(const uint8_t* begin, uint64_t n) const {
    const auto start = reinterpret_cast<uintptr_t>(data_);
    const auto at = reinterpret_cast<uintptr_t>(begin);
    if (data_ == nullptr || at < start || at - start > size_ || n > size_ - (at - start)) return;
    const auto page = static_cast<uintptr_t>(::sysconf(_SC_PAGESIZE));
    const uintptr_t lo = (at + page - 1) & ~(page - 1);
    const uintptr_t hi = (at + n) & ~(page - 1);
    // advice only: a failure leaves the pages resident, which costs memory, not correctness
    if (hi > lo) ::madvise(reinterpret_cast<void*>(lo), hi - lo, MADV_DONTNEED);
}

MappedFile::~MappedFile() {
    if (data_ != nullptr) ::munmap(const_cast<uint8_t*>(data_), size_);
}

}  // namespace moeserve::io
