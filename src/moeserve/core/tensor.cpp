#include "moeserve/core/tensor.h"

#include <cstdlib>
#include <cstring>

#include <sys/mman.h>

namespace moeserve {

Shape::Shape(std::initializer_list<int64_t> dims) : Shape(std::span<const int64_t>(dims.begin(), dims.size())) {}

Shape::Shape(std::span<const int64_t> dims) {
    MOESERVE_CHECK(dims.size() <= kMaxDims, "shape has {} dims, at most {} supported", dims.size(), kMaxDims);
    rank_ = static_cast<int>(dims.size());
    for (size_t i = 0; i < dims.size(); ++i) dims_[i] = dims[i];
}

int64_t Shape::numel() const {
    int64_t n = 1;
    for (int i = 0; i < rank_; ++i) n *= dims_[static_cast<size_t>(i)];
    return n;
}

bool Shape::operator==(const Shape& o) const {
    if (rank_ != o.rank_) return false;
    for (int i = 0; i < rank_; ++i) {
        if (dims_[static_cast<size_t>(i)] != o.dims_[static_cast<size_t>(i)]) return false;
    }
    return true;
}

std::string Shape::str() const {
    std::string s = "[";
    for (int i = 0; i < rank_; ++i) {
        if (i) s += ", ";
        s += std::to_string(dims_[static_cast<size_t>(i)]);
    }
    return s + "]";
}

TensorView TensorView::slice0(int64_t i) const {
    MOESERVE_CHECK(rank() >= 1 && i >= 0 && i < shape[0], "slice0({}) of shape {}", i, shape.str());
    auto dims = shape.dims().subspan(1);
    Shape inner(dims);
    const size_t stride = static_cast<size_t>(inner.numel()) * dtype_size(dtype);
    return {static_cast<char*>(data) + static_cast<size_t>(i) * stride, dtype, inner, device};
}

TensorView TensorView::rows(int64_t begin, int64_t end) const {
    MOESERVE_CHECK(rank() >= 1 && 0 <= begin && begin <= end && end <= shape[0], "rows({}, {}) of shape {}", begin, end,
                   shape.str());
    Shape out = shape;
    out[0] = end - begin;
    const size_t row_bytes = static_cast<size_t>(shape.numel() / (shape[0] ? shape[0] : 1)) * dtype_size(dtype);
    return {static_cast<char*>(data) + static_cast<size_t>(begin) * row_bytes, dtype, out, device};
}

TensorView TensorView::reshape(const Shape& new_shape) const {
    MOESERVE_CHECK(new_shape.numel() == numel(), "reshape {} -> {}", shape.str(), new_shape.str());
    return {data, dtype, new_shape, device};
}

namespace {
constexpr size_t kMapThreshold = size_t{1} << 20;
}  // namespace

void* aligned_alloc_zeroed(size_t bytes) {
    if (bytes >= kMapThreshold) {
        void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        MOESERVE_CHECK(p != MAP_FAILED, "out of memory mapping {} bytes", bytes);
        // NOTE: 2 MiB pages where the kernel allows them (THP "madvise" mode is common): decode
        // streams every weight once per token, and 4 KiB pages cost it 20-40% (a TLB miss per
        // page; bench-size Qwen3-MoE, 1 thread, Zen4). Harmless where THP is off.
        madvise(p, bytes, MADV_HUGEPAGE);
        return p;  // page-aligned, zero-filled on first touch
    }
    const size_t rounded = bytes == 0 ? 64 : (bytes + 63) / 64 * 64;
    void* p = std::aligned_alloc(64, rounded);
    MOESERVE_CHECK(p != nullptr, "out of memory allocating {} bytes", bytes);
    std::memset(p, 0, rounded);
    return p;
}

void aligned_free(void* p, size_t bytes) {
    if (p == nullptr) return;
    if (bytes >= kMapThreshold) {
        munmap(p, bytes);
    } else {
        std::free(p);
    }
}

void AlignedFree::operator()(void* p) const { aligned_free(p, bytes); }

Tensor::Tensor(DType dtype, const Shape& shape)
    : data_(aligned_alloc_zeroed(static_cast<size_t>(shape.numel()) * dtype_size(dtype)),
            AlignedFree{static_cast<size_t>(shape.numel()) * dtype_size(dtype)}),
      dtype_(dtype),
      shape_(shape) {}

Tensor Tensor::clone() const {
    Tensor t(dtype_, shape_);
    if (nbytes()) std::memcpy(t.data(), data(), nbytes());
    return t;
}

}  // namespace moeserve
