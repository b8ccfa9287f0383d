// LocalComm: every collective is one round of (post a copy of the input, wait for all, read the
// peers' copies, wait for all) over a LocalCommGroup.
#include "moeserve/parallel/local_comm.h"

#include <algorithm>
#include <cstring>
#include <fmt/format.h>

#include "moeserve/core/error.h"

namespace moeserve::parallel {

class LocalComm : public Communicator {
public:
    LocalComm(LocalCommGroup& group, int rank)
        : group_(group), rank_(rank), name_(fmt::format("{}[rank {} of {}]", group.name_, rank, group.size_)) {}

    int rank() const override { return rank_; }
    int size() const override { return group_.size_; }
    const std::string& name() const override { return name_; }
    std::chrono::milliseconds timeout() const override { return group_.timeout_; }

    void all_reduce_sum(std::span<float> data) override { reduce(data, "all_reduce_sum_f32", false); }
    void all_reduce_sum(std::span<int64_t> data) override { reduce(data, "all_reduce_sum_i64", false); }
    void all_reduce_max(std::span<int64_t> data) override { reduce(data, "all_reduce_max_i64", true); }

    void all_gather_bytes(std::span<const std::byte> in, std::span<std::byte> out) override {
        MOESERVE_CHECK(out.size() == in.size() * static_cast<size_t>(size()), "all_gather: out {} != {} x in {}",
                       out.size(), size(), in.size());
        round(fmt::format("all_gather {}", in.size()), in, {}, [&](const auto& slots) {
            for (int r = 0; r < size(); ++r) {
                if (!in.empty())
                    std::memcpy(out.data() + static_cast<size_t>(r) * in.size(), slots[r].data.data(), in.size());
            }
        });
    }

    void all_gather_v_bytes(std::span<const std::byte> in, const std::vector<size_t>& bytes_per_rank,
                            std::span<std::byte> out) override {
        check_counts(bytes_per_rank, "all_gather_v");
        MOESERVE_CHECK(in.size() == bytes_per_rank[static_cast<size_t>(rank_)], "all_gather_v: in {} != count {}",
                       in.size(), bytes_per_rank[static_cast<size_t>(rank_)]);
        round(fmt::format("all_gather_v {}", fmt::join(bytes_per_rank, ",")), in, {}, [&](const auto& slots) {
            size_t off = 0;
            for (int r = 0; r < size(); ++r) {
                const auto& d = slots[r].data;
                MOESERVE_CHECK(off + d.size() <= out.size(), "all_gather_v: out too small");
                if (!d.empty()) std::memcpy(out.data() + off, d.data(), d.size());
                off += d.size();
            }
        });
    }

    void all_to_all_v_bytes(std::span<const std::byte> in, const std::vector<size_t>& send_bytes,
                            std::span<std::byte> out, const std::vector<size_t>& recv_bytes) override {
        check_counts(send_bytes, "all_to_all_v");
        check_counts(recv_bytes, "all_to_all_v");
        round("all_to_all_v", in, send_bytes, [&](const auto& slots) {
            size_t out_off = 0;
            for (int s = 0; s < size(); ++s) {
                const auto& c = slots[s].counts;
                size_t in_off = 0;
                for (int j = 0; j < rank_; ++j) in_off += c[static_cast<size_t>(j)];
                const size_t n = c[static_cast<size_t>(rank_)];
                if (n != recv_bytes[static_cast<size_t>(s)]) {
                    throw Error(ErrorCode::kUnavailable,
                                fmt::format("{}: all_to_all_v size mismatch: rank {} sends {} bytes, rank {} "
                                            "expects {}",
                                            name_, s, n, rank_, recv_bytes[static_cast<size_t>(s)]));
                }
                if (n > 0) std::memcpy(out.data() + out_off, slots[s].data.data() + in_off, n);  // data() may be null
                out_off += n;
            }
        });
    }

    void reduce_scatter_sum(std::span<const float> in, std::span<float> out) override {
        MOESERVE_CHECK(in.size() == out.size() * static_cast<size_t>(size()), "reduce_scatter: in {} != {} x {}",
                       in.size(), size(), out.size());
        round(fmt::format("reduce_scatter_sum {}", out.size()), std::as_bytes(in), {}, [&](const auto& slots) {
            std::fill(out.begin(), out.end(), 0.0f);
            for (int r = 0; r < size(); ++r) {
                const auto* src =
                    reinterpret_cast<const float*>(slots[r].data.data()) + static_cast<size_t>(rank_) * out.size();
                for (size_t i = 0; i < out.size(); ++i) out[i] += src[i];
            }
        });
    }

    void broadcast_bytes(std::span<std::byte> data, int root) override {
        round(fmt::format("broadcast {} from {}", data.size(), root), data, {}, [&](const auto& slots) {
            if (!data.empty()) std::memcpy(data.data(), slots[root].data.data(), data.size());
        });
    }

    void barrier() override {
        round("barrier", {}, {}, [](const auto&) {});
    }

private:
    template <typename T>
    void reduce(std::span<T> data, const char* op, bool is_max) {
        round(fmt::format("{} {}", op, data.size()), std::as_bytes(data), {}, [&](const auto& slots) {
            for (size_t i = 0; i < data.size(); ++i) {
                T acc = reinterpret_cast<const T*>(slots[0].data.data())[i];
                for (int r = 1; r < size(); ++r) {
                    const T v = reinterpret_cast<const T*>(slots[r].data.data())[i];
                    acc = is_max ? std::max(acc, v) : acc + v;
                }
                data[i] = acc;
            }
        });
    }

    void check_counts(const std::vector<size_t>& c, const char* op) const {
        MOESERVE_CHECK(c.size() == static_cast<size_t>(size()), "{}: {} counts for {} ranks", op, c.size(), size());
    }

    // Post, wait, read the peers' posts via `read`, wait (so posts stay valid while read).
    template <typename Read>
    void round(const std::string& op, std::span<const std::byte> in, const std::vector<size_t>& counts, Read&& read) {
        {
            std::lock_guard<std::mutex> lock(group_.mu_);
            auto& slot = group_.slots_[static_cast<size_t>(rank_)];
            slot.op = op;
            slot.data.assign(in.begin(), in.end());
            slot.counts = counts;
        }
        group_.arrive_and_wait(rank_, op);
        for (int r = 0; r < size(); ++r) {
            const std::string& other = group_.slots_[static_cast<size_t>(r)].op;
            if (other != op) {
                std::unique_lock<std::mutex> lock(group_.mu_);
                group_.fail(lock, fmt::format("collective mismatch: rank {} called '{}' while rank {} called '{}'",
                                              rank_, op, r, other));
            }
        }
        try {
            read(group_.slots_);
        } catch (const Error&) {
            std::unique_lock<std::mutex> lock(group_.mu_);
            group_.broken_ = true;
            group_.cv_.notify_all();
            throw;
        }
        group_.arrive_and_wait(rank_, op + " (done)");
    }

    LocalCommGroup& group_;
    const int rank_;
    const std::string name_;
};

LocalCommGroup::LocalCommGroup(int size, std::chrono::milliseconds timeout, std::string name)
    : size_(size), timeout_(timeout), name_(std::move(name)), slots_(static_cast<size_t>(size)) {
    MOESERVE_CHECK(size >= 1, "group size {}", size);
}

std::unique_ptr<Communicator> LocalCommGroup::communicator(int rank) {
    MOESERVE_CHECK(rank >= 0 && rank < size_, "rank {} outside [0, {})", rank, size_);
    return std::make_unique<LocalComm>(*this, rank);
}

void LocalCommGroup::fail(std::unique_lock<std::mutex>& lock, const std::string& reason) {
    if (!broken_) {
        broken_ = true;
        broken_reason_ = reason;
    }
    cv_.notify_all();
    const std::string msg = fmt::format("{}: {}", name_, broken_reason_);
    lock.unlock();
    throw Error(ErrorCode::kUnavailable, msg);
}

void LocalCommGroup::arrive_and_wait(int rank, const std::string& op) {
    std::unique_lock<std::mutex> lock(mu_);
    if (broken_) fail(lock, broken_reason_);
    const uint64_t gen = generation_;
    if (++arrived_ == size_) {
        arrived_ = 0;
        ++generation_;
        cv_.notify_all();
        return;
    }
    const bool done = cv_.wait_for(lock, timeout_, [&] { return generation_ != gen || broken_; });
    if (broken_) fail(lock, broken_reason_);
    if (!done) {
        fail(lock,
             fmt::format("rank {} waited {} ms in '{}' for peers that did not arrive", rank, timeout_.count(), op));
    }
}

}  // namespace moeserve::parallel
