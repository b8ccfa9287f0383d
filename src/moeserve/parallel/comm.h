// Communicator: the collectives the model and the engine use, over one group of ranks.
// Implementations: GlooComm (processes, TCP), LocalComm (threads in one process, for tests) and
// the single rank's (groups.cpp).
// Depends on core only.
//
// Contract shared by every call:
//   - Collective: every rank of the group calls the same operation with matching sizes, in the
//     same order (layout.h lock-step rule).
//   - Bounded: a call that cannot complete within the communicator's timeout (a peer died, is
//     stuck, or called a different collective) throws Error kUnavailable naming the group and the
//     operation; it never hangs. After such an error the communicator is broken: every later
//     call throws too (a self-healing group replaces it: replaceable_comm.h).
//   - Not thread-safe: one caller per communicator (the rank's compute thread).
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace moeserve::parallel {

class Communicator {
public:
    virtual ~Communicator() = default;

    virtual int rank() const = 0;
    virtual int size() const = 0;
    // "tp[0 1]" style name for messages.
    virtual const std::string& name() const = 0;
    virtual std::chrono::milliseconds timeout() const = 0;

    // Starts the group's next step. Every rank of the group calls it at the same point (the start
    // of each model forward for TP and EP, of each DP round for DP); only the desync guard
    // (guarded_comm.h) counts steps, to tell one step's collectives from the next one's.
    virtual void begin_step() {}

    // In place: data[i] = sum (or max) over ranks of data[i].
    virtual void all_reduce_sum(std::span<float> data) = 0;
    virtual void all_reduce_sum(std::span<int64_t> data) = 0;
    virtual void all_reduce_max(std::span<int64_t> data) = 0;

    // out [size * in.size()] = rank 0's block, rank 1's block, ...
    virtual void all_gather_bytes(std::span<const std::byte> in, std::span<std::byte> out) = 0;
    // Rank r contributes bytes_per_rank[r] bytes (its `in` must have exactly that many); out
    // holds the blocks back to back in rank order (sum of bytes_per_rank).
    virtual void all_gather_v_bytes(std::span<const std::byte> in, const std::vector<size_t>& bytes_per_rank,
                                    std::span<std::byte> out) = 0;
    // in: blocks for rank 0, 1, ... of send_bytes[r] bytes back to back; out: blocks from rank
    // 0, 1, ... of recv_bytes[r] bytes. recv_bytes[r] must equal rank r's send_bytes[rank()].
    virtual void all_to_all_v_bytes(std::span<const std::byte> in, const std::vector<size_t>& send_bytes,
                                    std::span<std::byte> out, const std::vector<size_t>& recv_bytes) = 0;
    // in f32 [size, n]: block r is this rank's contribution to rank r; out f32 [n] = sum over
    // ranks of their block rank(), summed in rank order.
    virtual void reduce_scatter_sum(std::span<const float> in, std::span<float> out) = 0;
    // Root's bytes are copied into every rank's data (same size everywhere).
    virtual void broadcast_bytes(std::span<std::byte> data, int root) = 0;
    virtual void barrier() = 0;

    // Typed conveniences (trivially copyable T).
    template <typename T>
    void all_gather(std::span<const T> in, std::span<T> out) {
        all_gather_bytes(std::as_bytes(in), std::as_writable_bytes(out));
    }
    template <typename T>
    void all_gather_v(std::span<const T> in, const std::vector<int64_t>& counts, std::span<T> out) {
        all_gather_v_bytes(std::as_bytes(in), to_bytes<T>(counts), std::as_writable_bytes(out));
    }
    template <typename T>
    void all_to_all_v(std::span<const T> in, const std::vector<int64_t>& send_counts, std::span<T> out,
                      const std::vector<int64_t>& recv_counts) {
        all_to_all_v_bytes(std::as_bytes(in), to_bytes<T>(send_counts), std::as_writable_bytes(out),
                           to_bytes<T>(recv_counts));
    }
    template <typename T>
    void broadcast(std::span<T> data, int root) {
        broadcast_bytes(std::as_writable_bytes(data), root);
    }

private:
    template <typename T>
    static std::vector<size_t> to_bytes(const std::vector<int64_t>& counts) {
        std::vector<size_t> b(counts.size());
        for (size_t i = 0; i < counts.size(); ++i) b[i] = static_cast<size_t>(counts[i]) * sizeof(T);
        return b;
    }
};

}  // namespace moeserve::parallel
