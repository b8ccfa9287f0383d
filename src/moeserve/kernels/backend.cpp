// The backend registry: a fixed-size table (backends register once, at start-up or in a test's
// set-up) and one atomic pointer to the active backend, read by every op call.
#include "moeserve/kernels/backend.h"

#include <array>
#include <atomic>
#include <cstring>
#include <mutex>

#include "moeserve/core/error.h"
#include "moeserve/kernels/cpu/backend.h"

namespace moeserve::kernels {
namespace {

constexpr size_t kMaxBackends = 8;

struct Registry {
    std::mutex mu;
    std::array<const Backend*, kMaxBackends> backends{&cpu::backend()};
    size_t count = 1;
    std::atomic<const Backend*> active{&cpu::backend()};
};

Registry& registry() {
    static Registry r;
    return r;
}

// Every entry of the table is set: a backend without an op fails at registration, not mid-forward.
bool ops_complete(const Ops& ops) {
    static_assert(sizeof(Ops) % sizeof(void (*)()) == 0, "Ops holds function pointers only");
    std::array<void (*)(), sizeof(Ops) / sizeof(void (*)())> entries{};
    static_assert(sizeof(entries) == sizeof(Ops));
    std::memcpy(entries.data(), &ops, sizeof(Ops));
    for (auto* e : entries) {
        if (e == nullptr) return false;
    }
    return true;
}

}  // namespace

void register_backend(const Backend& backend) {
    Registry& r = registry();
    std::lock_guard lock(r.mu);
    for (size_t i = 0; i < r.count; ++i) {
        if (r.backends[i]->name == backend.name)
            raise(ErrorCode::kInvalidArgument, "backend {} is registered already", backend.name);
    }
    if (backend.allocate == nullptr || !ops_complete(backend.ops)) {
        raise(ErrorCode::kInvalidArgument, "backend {} leaves an op or its allocator unset", backend.name);
    }
    if (r.count == kMaxBackends) raise(ErrorCode::kInvalidArgument, "more than {} backends", kMaxBackends);
    r.backends[r.count++] = &backend;
}

std::vector<std::string> backend_names() {
    Registry& r = registry();
    std::lock_guard lock(r.mu);
    std::vector<std::string> names;
    for (size_t i = 0; i < r.count; ++i) names.emplace_back(r.backends[i]->name);
    return names;
}

void use_backend(std::string_view name) {
    Registry& r = registry();
    std::lock_guard lock(r.mu);
    std::string known;
    for (size_t i = 0; i < r.count; ++i) {
        if (r.backends[i]->name == name) {
            r.active.store(r.backends[i], std::memory_order_release);
            return;
        }
        known += (i ? ", " : "") + std::string(r.backends[i]->name);
    }
    raise(ErrorCode::kInvalidArgument, "unknown kernel backend '{}' (registered: {})", name, known);
}

const Backend& active_backend() { return *registry().active.load(std::memory_order_acquire); }

const Ops& ops() { return active_backend().ops; }

}  // namespace moeserve::kernels
