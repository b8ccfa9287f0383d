// In-process worlds and single-rank communicators.
#include "moeserve/parallel/groups.h"

#include <fmt/format.h>
#include <map>

#include "moeserve/parallel/guarded_comm.h"

namespace moeserve::parallel {

namespace {
// A LocalComm that owns its (size 1) group.
class SingleRankComm : public Communicator {
public:
    explicit SingleRankComm(const std::string& name)
        : group_(std::make_unique<LocalCommGroup>(1, std::chrono::milliseconds(1000), name)),
          inner_(group_->communicator(0)) {}
    int rank() const override { return 0; }
    int size() const override { return 1; }
    const std::string& name() const override { return inner_->name(); }
    std::chrono::milliseconds timeout() const override { return inner_->timeout(); }
    void all_reduce_sum(std::span<float>) override {}
    void all_reduce_sum(std::span<int64_t>) override {}
    void all_reduce_max(std::span<int64_t>) override {}
    void all_gather_bytes(std::span<const std::byte> in, std::span<std::byte> out) override {
        inner_->all_gather_bytes(in, out);
    }
    void all_gather_v_bytes(std::span<const std::byte> in, const std::vector<size_t>& c,
                            std::span<std::byte> out) override {
        inner_->all_gather_v_bytes(in, c, out);
    }
    void all_to_all_v_bytes(std::span<const std::byte> in, const std::vector<size_t>& s, std::span<std::byte> out,
                            const std::vector<size_t>& r) override {
        inner_->all_to_all_v_bytes(in, s, out, r);
    }
    void reduce_scatter_sum(std::span<const float> in, std::span<float> out) override {
        inner_->reduce_scatter_sum(in, out);
    }
    void broadcast_bytes(std::span<std::byte>, int) override {}
    void barrier() override {}

private:
    std::unique_ptr<LocalCommGroup> group_;
    std::unique_ptr<Communicator> inner_;
};
}  // namespace

std::unique_ptr<Communicator> make_single_rank_communicator(const std::string& name) {
    return std::make_unique<SingleRankComm>(name);
}

LocalWorld make_local_world(const ParallelSizes& sizes, std::chrono::milliseconds timeout) {
    validate(sizes);
    LocalWorld w;
    // One LocalCommGroup per distinct rank list, keyed by kind and first rank.
    std::map<std::string, LocalCommGroup*> by_key;
    auto group_for = [&](const char* kind, const std::vector<int>& ranks) {
        const std::string key = fmt::format("{}[{}]", kind, fmt::join(ranks, " "));
        auto it = by_key.find(key);
        if (it != by_key.end()) return it->second;
        w.comm_groups.push_back(std::make_unique<LocalCommGroup>(static_cast<int>(ranks.size()), timeout, key));
        by_key[key] = w.comm_groups.back().get();
        return w.comm_groups.back().get();
    };
    auto index_in = [](const std::vector<int>& ranks, int rank) {
        for (size_t i = 0; i < ranks.size(); ++i) {
            if (ranks[i] == rank) return static_cast<int>(i);
        }
        return -1;
    };
    for (int r = 0; r < sizes.world(); ++r) {
        ParallelContext c;
        c.sizes = sizes;
        c.groups = rank_groups(sizes, r);
        // Guarded as connect_gloo() guards the process groups, so every test of a local world
        // runs the guard too.
        auto member = [&](const char* kind, const std::vector<int>& ranks) {
            return make_guarded_communicator(group_for(kind, ranks)->communicator(index_in(ranks, r)));
        };
        c.tp = member("tp", c.groups.tp_group);
        c.dp = member("dp", c.groups.dp_group);
        c.ep = member("ep", c.groups.ep_group);
        w.ranks.push_back(std::move(c));
    }
    return w;
}

}  // namespace moeserve::parallel
