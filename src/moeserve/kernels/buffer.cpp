#include "moeserve/kernels/buffer.h"

#include <algorithm>
#include <cstring>

#include "moeserve/kernels/backend.h"

namespace moeserve::kernels {

void Buffer::resize(size_t n) {
    const auto capacity = static_cast<size_t>(storage_.numel());
    if (n > capacity) {
        const size_t grown = std::max(n, 2 * capacity);
        Tensor bigger = active_backend().allocate(DType::kF32, Shape{static_cast<int64_t>(grown)});
        if (size_ > 0) std::memcpy(bigger.data(), storage_.data(), size_ * sizeof(float));
        storage_ = std::move(bigger);
    } else if (n < size_) {
        std::fill(data() + n, data() + size_, 0.0f);  // so a later growth reads zeros, as a vector's would
    }
    size_ = n;
}

void Buffer::assign(size_t n, float v) {
    resize(n);
    std::fill(begin(), end(), v);
}

void Buffer::assign(const float* first, const float* last) {
    resize(static_cast<size_t>(last - first));
    std::copy(first, last, begin());
}

}  // namespace moeserve::kernels
