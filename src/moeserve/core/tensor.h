// TensorView (non-owning, contiguous, shape outermost-first as in PyTorch) and Tensor
// (owning, 64-byte aligned). Depends on std, fmt and core/dtype.h, core/error.h.
#pragma once

#include <array>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <span>
#include <string>

#include "moeserve/core/dtype.h"
#include "moeserve/core/error.h"

namespace moeserve {

// A shape of up to kMaxDims dims, outermost first: [num_experts, rows, cols].
class Shape {
public:
    static constexpr int kMaxDims = 6;
    Shape() = default;
    Shape(std::initializer_list<int64_t> dims);
    explicit Shape(std::span<const int64_t> dims);

    int rank() const { return rank_; }
    int64_t operator[](int i) const { return dims_[static_cast<size_t>(i)]; }
    int64_t& operator[](int i) { return dims_[static_cast<size_t>(i)]; }
    int64_t numel() const;
    std::span<const int64_t> dims() const { return {dims_.data(), static_cast<size_t>(rank_)}; }
    bool operator==(const Shape& o) const;
    // "[2, 3, 4]"
    std::string str() const;

private:
    std::array<int64_t, kMaxDims> dims_{};
    int rank_ = 0;
};

// Where a tensor's memory lives: the kernel backend that allocated it (kernels/backend.h) says.
// Host memory (checkpoints, the CPU backend's buffers) is kCpu.
enum class Device : uint8_t { kCpu };

// Non-owning view of contiguous memory with a dtype and shape. Cheap to copy.
// The memory's owner (a Tensor, an mmap'd checkpoint) must outlive the view.
struct TensorView {
    void* data = nullptr;
    DType dtype = DType::kF32;
    Shape shape;
    Device device = Device::kCpu;

    int64_t numel() const { return shape.numel(); }
    size_t nbytes() const { return static_cast<size_t>(numel()) * dtype_size(dtype); }
    int64_t dim(int i) const { return shape[i]; }
    int rank() const { return shape.rank(); }

    // Typed access, unchecked: the caller knows the dtype (the `dtype` field says it).
    template <typename T>
    T* as() const {
        return static_cast<T*>(data);
    }
    // The i-th slice along the outermost dimension: [d0, d1, ...] -> [d1, ...].
    TensorView slice0(int64_t i) const;
    // Rows [begin, end) along the outermost dimension.
    TensorView rows(int64_t begin, int64_t end) const;
    // Same bytes, another shape with the same numel.
    TensorView reshape(const Shape& new_shape) const;
};

// Frees what aligned_alloc_zeroed returned (it needs the size: large buffers are mappings).
struct AlignedFree {
    size_t bytes = 0;
    void operator()(void* p) const;
};

// Owning, 64-byte aligned, zero-initialized host buffer (Device::kCpu). Move-only; copy with clone().
class Tensor {
public:
    Tensor() = default;
    Tensor(DType dtype, const Shape& shape);
    Tensor(Tensor&&) noexcept = default;
    Tensor& operator=(Tensor&&) noexcept = default;
    Tensor(const Tensor&) = delete;
    Tensor& operator=(const Tensor&) = delete;

    Tensor clone() const;
    TensorView view() const { return {data_.get(), dtype_, shape_, Device::kCpu}; }
    operator TensorView() const { return view(); }

    void* data() const { return data_.get(); }
    template <typename T>
    T* as() const {
        return static_cast<T*>(data_.get());
    }
    DType dtype() const { return dtype_; }
    const Shape& shape() const { return shape_; }
    // A default-constructed Tensor is empty: numel() == 0 (not a rank-0 scalar).
    int64_t numel() const { return data_ ? shape_.numel() : 0; }
    bool empty() const { return data_ == nullptr; }
    size_t nbytes() const { return static_cast<size_t>(numel()) * dtype_size(dtype_); }
    int64_t dim(int i) const { return shape_[i]; }

private:
    std::unique_ptr<void, AlignedFree> data_;
    DType dtype_ = DType::kF32;
    Shape shape_;
};

// Allocates `bytes` bytes aligned to 64, zeroed; free with aligned_free(p, bytes). Buffers of
// 1 MiB and more are anonymous mappings whose pages the kernel zeroes on first touch, so a large
// KV cache costs nothing until it is used (a memset of 20 GiB took ~50 s at server start).
void* aligned_alloc_zeroed(size_t bytes);
void aligned_free(void* p, size_t bytes);

}  // namespace moeserve
