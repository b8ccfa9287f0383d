// Compiles the grammars of structured-output requests on a thread of its own, so that a new
// schema (up to ~100 ms for the largest the API admits) never stalls the engine's steps for the
// requests already running. EngineCore holds such a request back until its grammar is ready.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "moeserve/structured/matcher.h"

namespace moeserve::engine {

class GrammarCompileWorker {
public:
    struct Done {
        int64_t ticket = 0;
        std::shared_ptr<const structured::CompiledGrammar> grammar;  // null when error is set
        std::string error;                                           // why the grammar does not compile
    };

    // compiler must outlive the worker. The thread starts with the first submit.
    explicit GrammarCompileWorker(structured::GrammarCompiler& compiler) : compiler_(compiler) {}
    ~GrammarCompileWorker();
    GrammarCompileWorker(const GrammarCompileWorker&) = delete;
    GrammarCompileWorker& operator=(const GrammarCompileWorker&) = delete;

    // Queues gbnf; its Done comes back from take_done() under the same ticket.
    void submit(int64_t ticket, std::string gbnf);
    std::vector<Done> take_done();
    // Blocks until a Done is ready or timeout passes; whether one is ready.
    bool wait_for_done(std::chrono::milliseconds timeout);

private:
    void run();

    structured::GrammarCompiler& compiler_;
    std::mutex mutex_;
    std::condition_variable job_ready_;
    std::condition_variable done_ready_;
    std::deque<std::pair<int64_t, std::string>> jobs_;
    std::vector<Done> done_;
    bool stopping_ = false;
    std::thread thread_;
};

}  // namespace moeserve::engine
