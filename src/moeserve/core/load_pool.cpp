#include "moeserve/core/load_pool.h"

namespace moeserve {
namespace {

thread_local ThreadPool* current = nullptr;

}  // namespace

LoadPoolScope::LoadPoolScope(ThreadPool& pool) : outer_(current) { current = &pool; }

LoadPoolScope::~LoadPoolScope() { current = outer_; }

ThreadPool& load_pool() {
    if (current != nullptr) return *current;
    thread_local ThreadPool serial(1);
    return serial;
}

}  // namespace moeserve
