// Runs one function per rank on its own thread and collects each rank's exception, for the
// in-process (LocalComm) parallel tests.
#pragma once

#include <exception>
#include <functional>
#include <thread>
#include <vector>

namespace moeserve::testing {

// fn(rank) on `n` threads; returns each rank's exception (null when it returned normally).
inline std::vector<std::exception_ptr> run_ranks(int n, const std::function<void(int)>& fn) {
    std::vector<std::exception_ptr> errors(static_cast<size_t>(n));
    std::vector<std::thread> threads;
    for (int r = 0; r < n; ++r) {
        threads.emplace_back([&, r] {
            try {
                fn(r);
            } catch (...) {
                errors[static_cast<size_t>(r)] = std::current_exception();
            }
        });
    }
    for (auto& t : threads) t.join();
    return errors;
}

}  // namespace moeserve::testing
