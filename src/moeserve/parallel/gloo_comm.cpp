// GlooComm: the Communicator over one gloo::Context. Gloo failures (peer closed the connection,
// timeout) become Error kUnavailable and leave the communicator broken.
#include "moeserve/parallel/gloo_comm.h"

#include <fmt/format.h>
#include <gloo/allgather.h>
#include <gloo/allgatherv.h>
#include <gloo/allreduce.h>
#include <gloo/alltoall.h>
#include <gloo/alltoallv.h>
#include <gloo/barrier.h>
#include <gloo/broadcast.h>
#include <gloo/common/error.h>
#include <gloo/math.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/prefix_store.h>
#include <gloo/transport/tcp/device.h>

#include <algorithm>
#include <cstring>

#include "moeserve/core/error.h"
#include "moeserve/parallel/guarded_comm.h"
#include "moeserve/parallel/rendezvous.h"

namespace moeserve::parallel {

namespace {

using ReduceFn = void (*)(void*, const void*, const void*, size_t);

class GlooComm : public Communicator {
public:
    GlooComm(std::shared_ptr<gloo::Context> ctx, std::string name, std::chrono::milliseconds timeout)
        : ctx_(std::move(ctx)), name_(std::move(name)), timeout_(timeout) {}

    int rank() const override { return ctx_->rank; }
    int size() const override { return ctx_->size; }
    const std::string& name() const override { return name_; }
    std::chrono::milliseconds timeout() const override { return timeout_; }

    void all_reduce_sum(std::span<float> d) override {
        all_reduce(d.data(), d.size(), static_cast<ReduceFn>(&gloo::sum<float>), "all_reduce_sum");
    }
    void all_reduce_sum(std::span<int64_t> d) override {
        all_reduce(d.data(), d.size(), static_cast<ReduceFn>(&gloo::sum<int64_t>), "all_reduce_sum");
    }
    void all_reduce_max(std::span<int64_t> d) override {
        all_reduce(d.data(), d.size(), static_cast<ReduceFn>(&gloo::max<int64_t>), "all_reduce_max");
    }

    void all_gather_bytes(std::span<const std::byte> in, std::span<std::byte> out) override {
        MOESERVE_CHECK(out.size() == in.size() * static_cast<size_t>(size()), "all_gather: out {} != {} x {}",
                       out.size(), size(), in.size());
        if (in.empty()) return;  // same size on every rank: all skip
        gloo::AllgatherOptions o(ctx_);
        o.setInput(const_cast<char*>(reinterpret_cast<const char*>(in.data())), in.size());
        o.setOutput(reinterpret_cast<char*>(out.data()), out.size());
        o.setTimeout(timeout_);
        guarded("all_gather", [&] { gloo::allgather(o); });
    }

    void all_gather_v_bytes(std::span<const std::byte> in, const std::vector<size_t>& counts,
                            std::span<std::byte> out) override {
        size_t total = 0;
        for (size_t c : counts) total += c;
        MOESERVE_CHECK(counts.size() == static_cast<size_t>(size()) && out.size() >= total &&
                           in.size() == counts[static_cast<size_t>(rank())],
                       "all_gather_v: bad counts");
        if (total == 0) return;
        gloo::AllgathervOptions o(ctx_);
        o.setInput(const_cast<char*>(ptr(in)), in.size());
        o.setOutput(reinterpret_cast<char*>(out.data()), counts);
        o.setTimeout(timeout_);
        guarded("all_gather_v", [&] { gloo::allgatherv(o); });
    }

    void all_to_all_v_bytes(std::span<const std::byte> in, const std::vector<size_t>& send, std::span<std::byte> out,
                            const std::vector<size_t>& recv) override {
        MOESERVE_CHECK(send.size() == static_cast<size_t>(size()) && recv.size() == send.size(),
                       "all_to_all_v: counts for {} ranks", size());
        std::vector<int64_t> s(send.begin(), send.end()), r(recv.begin(), recv.end());
        gloo::AlltoallvOptions o(ctx_);
        o.setInput(const_cast<char*>(ptr(in)), s);
        o.setOutput(out.empty() ? &dummy_ : reinterpret_cast<char*>(out.data()), r);
        o.setTimeout(timeout_);
        guarded("all_to_all_v", [&] { gloo::alltoallv(o); });
    }

    void reduce_scatter_sum(std::span<const float> in, std::span<float> out) override {
        const size_t n = out.size();
        MOESERVE_CHECK(in.size() == n * static_cast<size_t>(size()), "reduce_scatter: in {} != {} x {}", in.size(),
                       size(), n);
        if (n == 0) return;
        // NOTE: Gloo 2022 has no free-function reduce-scatter; an all-to-all of the blocks and a
        // local sum in rank order moves the same bytes as a direct reduce-scatter.
        recv_.resize(in.size());
        gloo::AlltoallOptions o(ctx_);
        o.setInput(const_cast<float*>(in.data()), in.size());
        o.setOutput(recv_.data(), recv_.size());
        o.setTimeout(timeout_);
        guarded("reduce_scatter", [&] { gloo::alltoall(o); });
        std::fill(out.begin(), out.end(), 0.0f);
        for (int r = 0; r < size(); ++r) {
            const float* src = recv_.data() + static_cast<size_t>(r) * n;
            for (size_t i = 0; i < n; ++i) out[i] += src[i];
        }
    }

    void broadcast_bytes(std::span<std::byte> data, int root) override {
        if (data.empty()) return;
        gloo::BroadcastOptions o(ctx_);
        o.setOutput(reinterpret_cast<char*>(data.data()), data.size());
        o.setRoot(root);
        o.setTimeout(timeout_);
        guarded("broadcast", [&] { gloo::broadcast(o); });
    }

    void barrier() override {
        gloo::BarrierOptions o(ctx_);
        o.setTimeout(timeout_);
        guarded("barrier", [&] { gloo::barrier(o); });
    }

private:
    char* ptr(std::span<const std::byte> s) {
        return s.empty() ? &dummy_ : const_cast<char*>(reinterpret_cast<const char*>(s.data()));
    }

    void all_reduce(void* data, size_t n, ReduceFn fn, const char* op) {
        if (n == 0) return;
        gloo::AllreduceOptions o(ctx_);
        if (fn == static_cast<ReduceFn>(&gloo::sum<float>)) {
            o.setOutput(static_cast<float*>(data), n);
        } else {
            o.setOutput(static_cast<int64_t*>(data), n);
        }
        o.setReduceFunction(fn);
        o.setTimeout(timeout_);
        guarded(op, [&] { gloo::allreduce(o); });
    }

    // Runs one Gloo call. Callers build the call's options outside `f`, so that the buffers they
    // own outlive break_off on failure.
    template <typename F>
    void guarded(const char* op, F&& f) {
        if (broken_) raise(ErrorCode::kUnavailable, "{}: {} after an earlier failure: {}", name_, op, broken_reason_);
        try {
            f();
        } catch (const gloo::Exception& e) {
            break_off(e.what());
            raise(ErrorCode::kUnavailable,
                  "{}: {} failed: {} (a peer rank died, stalled past {} ms, or ran a "
                  "different collective)",
                  name_, op, e.what(), timeout_.count());
        } catch (const gloo::EnforceNotMet& e) {
            break_off(e.what());
            raise(ErrorCode::kUnavailable, "{}: {} failed: {}", name_, op, e.what());
        }
    }

    // Marks the communicator broken and closes every pair, before the caller's options (and the
    // buffers they own) are destroyed. Gloo's device thread signals a failing pair's error to each
    // of its pending buffers one by one, under the pair's lock; the first signal already wakes this
    // thread, and the same buffer can be signalled again (it may sit in two of the pair's queues).
    // Closing a pair takes that lock, so it waits for the signalling to finish, and takes the pair
    // off the device thread for good (CI's TSan saw a buffer destroyed under a second signal).
    void break_off(const char* reason) {
        broken_ = true;
        broken_reason_ = reason;
        try {
            ctx_->closeConnections();
        } catch (const std::exception&) {
            // Closing is best effort: the communicator is broken either way.
        }
    }

    std::shared_ptr<gloo::Context> ctx_;
    const std::string name_;
    const std::chrono::milliseconds timeout_;
    bool broken_ = false;
    std::string broken_reason_;
    std::vector<float> recv_;
    char dummy_ = 0;
};

struct GlooResources {
    std::unique_ptr<TcpStore> store;
    std::shared_ptr<gloo::transport::Device> device;
};

int index_in(const std::vector<int>& ranks, int rank) {
    for (size_t i = 0; i < ranks.size(); ++i) {
        if (ranks[i] == rank) return static_cast<int>(i);
    }
    return -1;
}

// The test hook's collective in group `kind` ("tp", "dp", "ep") of global rank `rank`, if the
// spec "<kind>:<rank>:<step>:<index>" names them.
SkipCollective skip_for(const std::string& spec, const std::string& kind, int rank) {
    if (spec.empty()) return {};
    std::vector<std::string> parts;
    for (size_t at = 0;;) {
        const size_t colon = spec.find(':', at);
        parts.push_back(spec.substr(at, colon == std::string::npos ? std::string::npos : colon - at));
        if (colon == std::string::npos) break;
        at = colon + 1;
    }
    SkipCollective s;
    try {
        if (parts.size() != 4) throw std::invalid_argument(spec);
        if (parts[0] != kind || std::stoi(parts[1]) != rank) return {};
        s.step = std::stoll(parts[2]);
        s.index = std::stoll(parts[3]);
    } catch (const std::logic_error&) {
        raise(ErrorCode::kInvalidArgument,
              "MOESERVE_DEBUG_SKIP_COLLECTIVE '{}' is not <tp|dp|ep>:<global rank>:<step>:<index>", spec);
    }
    return s;
}

std::unique_ptr<Communicator> connect_group(GlooResources& res, const std::string& kind, int group_index,
                                            const std::vector<int>& ranks, const GlooConnectOptions& o) {
    const std::string key = fmt::format("{}{}", kind, group_index);
    const std::string name = fmt::format("{}[{}]", key, fmt::join(ranks, " "));
    const std::string store_prefix = fmt::format("g{}/{}", o.generation, key);
    if (ranks.size() == 1) return make_single_rank_communicator(name);
    const int rank = o.rank;
    const std::chrono::milliseconds timeout = o.timeout;
    gloo::rendezvous::PrefixStore prefixed(store_prefix, *res.store);
    auto ctx = std::make_shared<gloo::rendezvous::Context>(index_in(ranks, rank), static_cast<int>(ranks.size()));
    ctx->setTimeout(timeout);
    try {
        ctx->connectFullMesh(prefixed, res.device);
    } catch (const gloo::Exception& e) {
        raise(ErrorCode::kUnavailable, "{}: cannot connect to the group's ranks: {}", name, e.what());
    } catch (const gloo::EnforceNotMet& e) {
        raise(ErrorCode::kUnavailable, "{}: cannot connect to the group's ranks: {}", name, e.what());
    }
    auto comm = std::make_unique<GlooComm>(std::move(ctx), name, timeout);
    if (!o.collective_guard) return comm;
    // The test hook skips in the first generation only: a re-formed group runs clean.
    const SkipCollective skip = o.generation == 0 ? skip_for(o.debug_skip_collective, kind, rank) : SkipCollective{};
    return make_guarded_communicator(std::move(comm), skip);
}

std::string generation_key(int rank) { return fmt::format("generation/{}", rank); }

// The ranks a rank meets at the rendezvous of its generation: every rank of the world when the
// deployment starts (each fingerprint checked against all), and when a lock-step group re-forms;
// an independent DP group (no EP across DP groups) re-forms alone, with its own TP (and EP) ranks,
// while the other DP groups serve on.
std::vector<int> rendezvous_ranks(const GlooConnectOptions& o) {
    std::vector<int> ranks;
    if (o.generation == 0 || dp_groups_step_together(o.sizes)) {
        for (int r = 0; r < o.sizes.world(); ++r) ranks.push_back(r);
        return ranks;
    }
    const RankGroups g = rank_groups(o.sizes, o.rank);
    ranks = g.tp_group;
    ranks.insert(ranks.end(), g.ep_group.begin(), g.ep_group.end());
    std::sort(ranks.begin(), ranks.end());
    ranks.erase(std::unique(ranks.begin(), ranks.end()), ranks.end());
    return ranks;
}

// Also where every rank waits for the others to arrive (each one's fingerprint).
void check_fingerprints(TcpStore& store, const GlooConnectOptions& o) {
    const std::string generation = std::to_string(o.generation);
    store.set(generation_key(o.rank), std::vector<char>(generation.begin(), generation.end()));
    store.set(fmt::format("g{}/fingerprint/{}", o.generation, o.rank),
              std::vector<char>(o.fingerprint.begin(), o.fingerprint.end()));
    const auto arrival = o.arrival_timeout.count() > 0 ? o.arrival_timeout : o.timeout;
    for (const int r : rendezvous_ranks(o)) {
        const std::string key = fmt::format("g{}/fingerprint/{}", o.generation, r);
        store.wait({key}, arrival);
        const std::vector<char> v = store.get(key);
        const std::string theirs(v.begin(), v.end());
        if (theirs != o.fingerprint) {
            raise(ErrorCode::kInvalidArgument,
                  "rank {} and rank {} disagree on the model or parallel configuration: rank {} has '{}', rank {} "
                  "has '{}'; start every node with the same --model and parallel sizes",
                  o.rank, r, o.rank, o.fingerprint, r, theirs);
        }
    }
}

}  // namespace

int last_generation(const std::string& store_host, int store_port, int rank, std::chrono::milliseconds timeout) {
    TcpStore store(store_host, store_port, timeout);
    std::vector<char> value;
    if (!store.try_get(generation_key(rank), value)) return -1;
    return std::stoi(std::string(value.begin(), value.end()));
}

ParallelContext connect_gloo(const GlooConnectOptions& o) {
    validate(o.sizes);
    if (o.rank < 0 || o.rank >= o.sizes.world()) {
        raise(ErrorCode::kInvalidArgument,
              "rank {} outside [0, {}) for data-parallel-size {} x tensor-parallel-size {}", o.rank, o.sizes.world(),
              o.sizes.dp, o.sizes.tp);
    }
    auto res = std::make_shared<GlooResources>();
    res->store = std::make_unique<TcpStore>(o.store_host, o.store_port, o.timeout);
    check_fingerprints(*res->store, o);
    gloo::transport::tcp::attr attr;
    if (!o.iface.empty()) {
        attr.iface = o.iface;
    } else {
        attr.hostname = o.hostname;
    }
    try {
        res->device = gloo::transport::tcp::CreateDevice(attr);
    } catch (const std::exception& e) {
        raise(ErrorCode::kInvalidArgument, "cannot open the Gloo TCP transport on {}: {}",
              o.iface.empty() ? "address '" + o.hostname + "'" : "interface '" + o.iface + "'", e.what());
    }
    ParallelContext c;
    c.sizes = o.sizes;
    c.groups = rank_groups(o.sizes, o.rank);
    c.tp = connect_group(*res, "tp", c.groups.dp_rank, c.groups.tp_group, o);
    // Only lock-step DP runs collectives across DP groups (the DP coordinator's); independent DP
    // groups have none, so each can re-form without the others (rendezvous_ranks).
    c.dp = dp_groups_step_together(o.sizes)
               ? connect_group(*res, "dp", c.groups.tp_rank, c.groups.dp_group, o)
               : make_single_rank_communicator(fmt::format("dp{}[{}]", c.groups.tp_rank, o.rank));
    c.ep = connect_group(*res, "ep", c.groups.ep_group_index, c.groups.ep_group, o);
    c.resources = res;
    return c;
}

}  // namespace moeserve::parallel
