// The threads that loading a model may use for its bulk work: copying weights out of the file and
// repacking them into the kernels' layouts. Most of that time is page faults (the file's pages
// mapped in, the new tensors' pages cleared, which on a VM can mean the host backing them), and
// they run in parallel as well as anything. That is the rank's pool for as long as a
// LoadPoolScope lives on this thread (model::load_model opens one around the whole load). The
// loaders sit many calls below load_model and need nothing else from it, so the pool travels
// this way instead of through every loader's signature. Outside a scope (a test that loads one
// layer) the work runs on the calling thread alone.
#pragma once

#include "moeserve/core/thread_pool.h"

namespace moeserve {

class LoadPoolScope {
public:
    explicit LoadPoolScope(ThreadPool& pool);
    ~LoadPoolScope();
    LoadPoolScope(const LoadPoolScope&) = delete;
    LoadPoolScope& operator=(const LoadPoolScope&) = delete;

private:
    ThreadPool* outer_;
};

// The innermost scope's pool on this thread, else a pool of one thread (the caller).
ThreadPool& load_pool();

}  // namespace moeserve
