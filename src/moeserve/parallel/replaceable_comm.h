// A Communicator whose group can be formed again (self-healing groups, issue 31): the model, the
// TP leader and the DP coordinator keep pointers to their communicators for their whole life, so
// when a rank dies and the group re-forms with a new Gloo context, the new communicators go
// behind these same objects instead of into every holder.
//
// replace() is called by the thread that runs the collectives, between steps (never during one).
#pragma once

#include <memory>
#include <string>

#include "moeserve/parallel/comm.h"
#include "moeserve/parallel/groups.h"

namespace moeserve::parallel {

class ReplaceableCommunicator final : public Communicator {
public:
    explicit ReplaceableCommunicator(std::unique_ptr<Communicator> inner);
    // Not connected yet (a restarted rank loads its shard before it joins its group): rank and
    // size as the group will have them; the name comes with the first replace().
    ReplaceableCommunicator(std::string kind, int rank, int size, std::chrono::milliseconds timeout);

    // The group's next generation: later calls go to `inner` (same rank, size and name expected;
    // Error kInvalidArgument otherwise). The old one is destroyed.
    void replace(std::unique_ptr<Communicator> inner);
    // Closes the current generation (its peers still in a collective with this rank fail at once
    // instead of after the timeout); until replace(), every collective throws Error kUnavailable.
    void disconnect() { inner_.reset(); }

    int rank() const override { return rank_; }
    int size() const override { return size_; }
    const std::string& name() const override { return name_; }
    std::chrono::milliseconds timeout() const override { return timeout_; }
    void begin_step() override { live().begin_step(); }
    void all_reduce_sum(std::span<float> data) override { live().all_reduce_sum(data); }
    void all_reduce_sum(std::span<int64_t> data) override { live().all_reduce_sum(data); }
    void all_reduce_max(std::span<int64_t> data) override { live().all_reduce_max(data); }
    void all_gather_bytes(std::span<const std::byte> in, std::span<std::byte> out) override {
        live().all_gather_bytes(in, out);
    }
    void all_gather_v_bytes(std::span<const std::byte> in, const std::vector<size_t>& bytes_per_rank,
                            std::span<std::byte> out) override {
        live().all_gather_v_bytes(in, bytes_per_rank, out);
    }
    void all_to_all_v_bytes(std::span<const std::byte> in, const std::vector<size_t>& send_bytes,
                            std::span<std::byte> out, const std::vector<size_t>& recv_bytes) override {
        live().all_to_all_v_bytes(in, send_bytes, out, recv_bytes);
    }
    void reduce_scatter_sum(std::span<const float> in, std::span<float> out) override {
        live().reduce_scatter_sum(in, out);
    }
    void broadcast_bytes(std::span<std::byte> data, int root) override { live().broadcast_bytes(data, root); }
    void barrier() override { live().barrier(); }

private:
    Communicator& live();

    std::unique_ptr<Communicator> inner_;
    // The group's, kept across generations (holders may keep the name's reference).
    int rank_ = 0, size_ = 1;
    std::string name_;
    bool named_ = true;  // false until an unconnected one is first connected
    std::chrono::milliseconds timeout_;
};

// A ParallelContext whose communicators can be re-formed: holders take pointers from context()
// once; regroup() moves a newly connected context's communicators behind them.
class RegroupableContext {
public:
    explicit RegroupableContext(ParallelContext first);
    // Not connected yet: regroup() connects it. Holders may take its communicators now.
    RegroupableContext(const ParallelSizes& sizes, int rank, std::chrono::milliseconds timeout);
    ParallelContext& context() { return ctx_; }
    // Closes the current generation's communicators and transport (ReplaceableCommunicator::
    // disconnect), before the next one is connected.
    void disconnect();
    // The communicators and transport of `next` (same sizes and rank) go behind the same objects.
    void regroup(ParallelContext next);

private:
    static ReplaceableCommunicator& as_replaceable(std::unique_ptr<Communicator>& c) {
        return static_cast<ReplaceableCommunicator&>(*c);
    }
    ParallelContext ctx_;  // tp, dp, ep are ReplaceableCommunicators
};

}  // namespace moeserve::parallel
