#include "moeserve/engine/grammar_compile_worker.h"

#include <sys/resource.h>
#include <unistd.h>

#include <exception>

#include "moeserve/core/error.h"

namespace moeserve::engine {

namespace {
constexpr int kCompileNice = 10;  // CFS weight about a tenth of the engine thread's
}  // namespace

GrammarCompileWorker::~GrammarCompileWorker() {
    {
        std::lock_guard<std::mutex> lock(mutex_);
        stopping_ = true;
        jobs_.clear();
    }
    job_ready_.notify_all();
    if (thread_.joinable()) thread_.join();
}

void GrammarCompileWorker::submit(int64_t ticket, std::string gbnf) {
    {
        std::lock_guard<std::mutex> lock(mutex_);
        jobs_.emplace_back(ticket, std::move(gbnf));
        if (!thread_.joinable()) thread_ = std::thread([this] { run(); });
    }
    job_ready_.notify_one();
}

std::vector<GrammarCompileWorker::Done> GrammarCompileWorker::take_done() {
    std::lock_guard<std::mutex> lock(mutex_);
    std::vector<Done> out;
    out.swap(done_);
    return out;
}

bool GrammarCompileWorker::wait_for_done(std::chrono::milliseconds timeout) {
    std::unique_lock<std::mutex> lock(mutex_);
    return done_ready_.wait_for(lock, timeout, [this] { return !done_.empty(); });
}

void GrammarCompileWorker::run() {
    // Below the engine thread: on a machine with no idle core the steps of running requests go
    // first, and a compile takes what they leave (Linux: nice applies per thread).
    if (::setpriority(PRIO_PROCESS, static_cast<id_t>(::gettid()), kCompileNice) != 0) {
        // not permitted or not Linux: the compile competes as an equal, as before
    }
    std::unique_lock<std::mutex> lock(mutex_);
    while (true) {
        job_ready_.wait(lock, [this] { return stopping_ || !jobs_.empty(); });
        if (stopping_) return;
        auto [ticket, gbnf] = std::move(jobs_.front());
        jobs_.pop_front();
        lock.unlock();
        Done done{ticket, nullptr, {}};
        try {
            done.grammar = compiler_.compile(gbnf);
        } catch (const Error& e) {
            done.error = e.what();
        } catch (const std::exception& e) {  // e.g. bad_alloc: this request fails, not the engine
            done.error = std::string("the grammar could not be compiled: ") + e.what();
        }
        lock.lock();
        done_.push_back(std::move(done));
        done_ready_.notify_all();
    }
}

}  // namespace moeserve::engine
