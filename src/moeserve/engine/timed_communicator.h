// TimedCommunicator: a Communicator decorator that counts the calls and wall time spent in the
// collectives of another one (e.g. the EP group the model's MoE exchange uses), so /metrics can
// show the communication share of a step. Same contract as the wrapped communicator.
#pragma once

#include <chrono>
#include <cstdint>

#include "moeserve/parallel/comm.h"

namespace moeserve::engine {

class TimedCommunicator final : public parallel::Communicator {
public:
    // inner must outlive this object.
    explicit TimedCommunicator(parallel::Communicator& inner) : inner_(inner) {}

    int64_t calls() const { return calls_; }
    double seconds() const { return seconds_; }

    int rank() const override { return inner_.rank(); }
    int size() const override { return inner_.size(); }
    const std::string& name() const override { return inner_.name(); }
    std::chrono::milliseconds timeout() const override { return inner_.timeout(); }

    void all_reduce_sum(std::span<float> d) override {
        timed([&] { inner_.all_reduce_sum(d); });
    }
    void all_reduce_sum(std::span<int64_t> d) override {
        timed([&] { inner_.all_reduce_sum(d); });
    }
    void all_reduce_max(std::span<int64_t> d) override {
        timed([&] { inner_.all_reduce_max(d); });
    }
    void all_gather_bytes(std::span<const std::byte> in, std::span<std::byte> out) override {
        timed([&] { inner_.all_gather_bytes(in, out); });
    }
    void all_gather_v_bytes(std::span<const std::byte> in, const std::vector<size_t>& bytes_per_rank,
                            std::span<std::byte> out) override {
        timed([&] { inner_.all_gather_v_bytes(in, bytes_per_rank, out); });
    }
    void all_to_all_v_bytes(std::span<const std::byte> in, const std::vector<size_t>& send_bytes,
                            std::span<std::byte> out, const std::vector<size_t>& recv_bytes) override {
        timed([&] { inner_.all_to_all_v_bytes(in, send_bytes, out, recv_bytes); });
    }
    void reduce_scatter_sum(std::span<const float> in, std::span<float> out) override {
        timed([&] { inner_.reduce_scatter_sum(in, out); });
    }
    void broadcast_bytes(std::span<std::byte> data, int root) override {
        timed([&] { inner_.broadcast_bytes(data, root); });
    }
    void barrier() override {
        timed([&] { inner_.barrier(); });
    }

private:
    template <typename F>
    void timed(F&& f) {
        const auto t0 = std::chrono::steady_clock::now();
        ++calls_;
        f();  // on a throw the partial time is dropped; the communicator is broken anyway
        seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    }

    parallel::Communicator& inner_;
    int64_t calls_ = 0;
    double seconds_ = 0;
};

}  // namespace moeserve::engine
