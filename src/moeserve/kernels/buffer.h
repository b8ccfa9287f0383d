// A growable f32 array in the active backend's memory (backend.h: allocate): the model's per-step
// activations (the residual stream, the attention, MoE and logits buffers), so they live where
// the kernels run. It behaves as std::vector<float> for what the model asks of it: resize keeps
// the first min(old, new) values and zeroes the rest; capacity only grows (a step never
// allocates once the largest step has run). Depends on core and backend.h.
#pragma once

#include <cstddef>

#include "moeserve/core/tensor.h"

namespace moeserve::kernels {

class Buffer {
public:
    float* data() { return storage_.as<float>(); }
    const float* data() const { return storage_.as<float>(); }
    size_t size() const { return size_; }
    bool empty() const { return size_ == 0; }
    float* begin() { return data(); }
    float* end() { return data() + size_; }
    const float* begin() const { return data(); }
    const float* end() const { return data() + size_; }
    float& operator[](size_t i) { return data()[i]; }
    float operator[](size_t i) const { return data()[i]; }

    void resize(size_t n);
    // resize(n), every value set to v.
    void assign(size_t n, float v);
    // A copy of [first, last).
    void assign(const float* first, const float* last);

private:
    Tensor storage_;  // f32 [capacity], from the backend active at the last growth
    size_t size_ = 0;
};

}  // namespace moeserve::kernels
