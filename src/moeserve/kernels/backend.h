// Kernel backends: a backend is a name, the device its memory lives on, an allocator and the ops
// table (kernels/ops.h). "cpu" (kernels/cpu/) is built in and active by default; another backend
// registers itself with register_backend and is chosen with use_backend, before any model loads
// (a model's buffers and KV cache come from the backend active when they are allocated, and its
// ops from the one active when they run). The backends so far run on host memory: allocate
// returns a Tensor, and the model reads and writes its buffers on the host (ids, gathers, the
// collectives); a device backend adds its own owner type and copy ops here. Depends on core only.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "moeserve/core/tensor.h"
#include "moeserve/kernels/ops.h"

namespace moeserve::kernels {

struct Backend {
    std::string_view name;  // "cpu", "reference", ...: what use_backend takes
    Device device = Device::kCpu;
    // Zeroed storage for `shape` elements of `dtype` on `device`: the KV caches and the model's
    // per-step buffers (buffer.h).
    Tensor (*allocate)(DType dtype, const Shape& shape) = nullptr;
    Ops ops{};
};

// Adds a backend. The object must outlive every use (a static). A duplicate name, or an ops table
// with an unset entry, is Error kInvalidArgument.
void register_backend(const Backend& backend);
// The registered backends' names, "cpu" first.
std::vector<std::string> backend_names();
// Makes `name` the active backend; an unknown name is Error kInvalidArgument naming the known ones.
void use_backend(std::string_view name);
const Backend& active_backend();

}  // namespace moeserve::kernels
