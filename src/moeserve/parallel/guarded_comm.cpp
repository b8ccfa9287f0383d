// GuardedComm: every collective of the inner communicator with this rank's tag inside
// (guarded_comm.h). Buffers are members that grow on demand, so a step allocates nothing once
// they reached its sizes.
#include "moeserve/parallel/guarded_comm.h"

#include <algorithm>
#include <cstring>
#include <fmt/format.h>
#include <vector>

#include "moeserve/core/error.h"

namespace moeserve::parallel {

namespace {

enum class Kind : int32_t {
    kAllReduceSumF32 = 1,
    kAllReduceSumI64,
    kAllReduceMaxI64,
    kAllGather,
    kAllGatherV,
    kAllToAllV,
    kReduceScatter,
    kBroadcast,
    kBarrier,
};

const char* kind_name(int32_t kind) {
    switch (static_cast<Kind>(kind)) {
        case Kind::kAllReduceSumF32:
            return "all_reduce_sum f32";
        case Kind::kAllReduceSumI64:
            return "all_reduce_sum i64";
        case Kind::kAllReduceMaxI64:
            return "all_reduce_max i64";
        case Kind::kAllGather:
            return "all_gather";
        case Kind::kAllGatherV:
            return "all_gather_v";
        case Kind::kAllToAllV:
            return "all_to_all_v";
        case Kind::kReduceScatter:
            return "reduce_scatter";
        case Kind::kBroadcast:
            return "broadcast";
        case Kind::kBarrier:
            return "barrier";
    }
    return "unknown collective";
}

// What one rank believes the current collective is. `bytes` is the payload the kind implies:
// the whole buffer for reductions and broadcast, one rank's block for all_gather, the total for
// all_gather_v, the block for the receiving rank for all_to_all_v (what it sends in all, in
// messages about this rank's own call).
struct Tag {
    int64_t step = 0;
    int64_t index = 0;
    int64_t bytes = 0;
    int32_t kind = 0;
    int32_t rank = 0;  // the rank that wrote it (not compared)

    bool same_collective(const Tag& o) const {
        return step == o.step && index == o.index && bytes == o.bytes && kind == o.kind;
    }
};
static_assert(sizeof(Tag) == 32, "the tag travels as 32 bytes");
constexpr size_t kTagBytes = sizeof(Tag);

std::string describe(const Tag& t) {
    return fmt::format("rank {} ran collective {} of step {} ({}, {} bytes)", t.rank, t.index, t.step,
                       kind_name(t.kind), t.bytes);
}

// 48 bits of the compared fields (splitmix64 rounds): equal tags give equal digests; unequal
// ones collide with probability 2^-48.
uint64_t digest(const Tag& t) {
    uint64_t h = 0x9e3779b97f4a7c15ULL;
    for (uint64_t v : {static_cast<uint64_t>(t.step), static_cast<uint64_t>(t.index), static_cast<uint64_t>(t.bytes),
                       static_cast<uint64_t>(t.kind)}) {
        h ^= v + 0x9e3779b97f4a7c15ULL + (h << 6) + (h >> 2);
        h ^= h >> 30;
        h *= 0xbf58476d1ce4e5b9ULL;
        h ^= h >> 27;
        h *= 0x94d049bb133111ebULL;
        h ^= h >> 31;
    }
    return h >> 16;
}

// The digest as kChunks floats of 12 bits each: a sum over up to 4096 ranks of such values
// stays below 2^24, where f32 adds integers exactly in any order.
constexpr int kChunks = 4;
constexpr int kChunkBits = 12;
constexpr int kMaxGroupForF32 = 1 << (24 - kChunkBits);

void digest_chunks(uint64_t d, float* out) {
    for (int i = 0; i < kChunks; ++i) {
        out[i] = static_cast<float>((d >> (i * kChunkBits)) & ((1u << kChunkBits) - 1));
    }
}

class GuardedComm : public Communicator {
public:
    GuardedComm(std::unique_ptr<Communicator> inner, SkipCollective skip) : inner_(std::move(inner)), skip_(skip) {
        MOESERVE_CHECK(inner_->size() <= kMaxGroupForF32, "guarded group of {} ranks (at most {})", inner_->size(),
                       kMaxGroupForF32);
    }

    int rank() const override { return inner_->rank(); }
    int size() const override { return inner_->size(); }
    const std::string& name() const override { return inner_->name(); }
    std::chrono::milliseconds timeout() const override { return inner_->timeout(); }
    void begin_step() override {
        ++step_;
        index_ = 0;
    }

    void all_reduce_sum(std::span<float> d) override {
        Tag tag;
        if (!next(Kind::kAllReduceSumF32, d.size_bytes(), tag)) return;
        const size_t n = d.size();
        f32_.resize(n + kChunks);
        std::copy(d.begin(), d.end(), f32_.begin());
        float* chunks = f32_.data() + n;
        digest_chunks(digest(tag), chunks);
        float expect[kChunks];
        for (int i = 0; i < kChunks; ++i) expect[i] = chunks[i] * static_cast<float>(size());
        run(tag, [&] { inner_->all_reduce_sum(std::span<float>(f32_)); });
        if (!std::equal(expect, expect + kChunks, f32_.data() + n)) fail_after_reduction(tag);
        std::copy(f32_.begin(), f32_.begin() + static_cast<std::ptrdiff_t>(n), d.begin());
    }

    void all_reduce_sum(std::span<int64_t> d) override {
        Tag tag;
        if (!next(Kind::kAllReduceSumI64, d.size_bytes(), tag)) return;
        const auto dg = static_cast<int64_t>(digest(tag));
        i64_.assign(d.begin(), d.end());
        i64_.push_back(dg);
        run(tag, [&] { inner_->all_reduce_sum(std::span<int64_t>(i64_)); });
        if (i64_.back() != dg * size()) fail_after_reduction(tag);
        std::copy(i64_.begin(), i64_.end() - 1, d.begin());
    }

    void all_reduce_max(std::span<int64_t> d) override {
        Tag tag;
        if (!next(Kind::kAllReduceMaxI64, d.size_bytes(), tag)) return;
        const auto dg = static_cast<int64_t>(digest(tag));
        i64_.assign(d.begin(), d.end());
        i64_.push_back(dg);
        i64_.push_back(-dg);
        run(tag, [&] { inner_->all_reduce_max(std::span<int64_t>(i64_)); });
        // max(x_r) == x and max(-x_r) == -x: every rank's x_r is x.
        if (i64_[d.size()] != dg || i64_[d.size() + 1] != -dg) fail_after_reduction(tag);
        std::copy(i64_.begin(), i64_.begin() + static_cast<std::ptrdiff_t>(d.size()), d.begin());
    }

    void all_gather_bytes(std::span<const std::byte> in, std::span<std::byte> out) override {
        Tag tag;
        if (!next(Kind::kAllGather, in.size(), tag)) return;
        const size_t block = in.size() + kTagBytes;
        send_.resize(block);
        if (!in.empty()) std::memcpy(send_.data(), in.data(), in.size());  // an empty span may be null
        std::memcpy(send_.data() + in.size(), &tag, kTagBytes);
        recv_.resize(block * static_cast<size_t>(size()));
        run(tag, [&] { inner_->all_gather_bytes(send_, recv_); });
        for (int r = 0; r < size(); ++r) {
            const std::byte* b = recv_.data() + static_cast<size_t>(r) * block;
            check_peer(tag, b + in.size());
            if (!in.empty()) std::memcpy(out.data() + static_cast<size_t>(r) * in.size(), b, in.size());
        }
    }

    void all_gather_v_bytes(std::span<const std::byte> in, const std::vector<size_t>& counts,
                            std::span<std::byte> out) override {
        size_t total = 0;
        for (size_t c : counts) total += c;
        Tag tag;
        if (!next(Kind::kAllGatherV, total, tag)) return;
        counts_.resize(counts.size());
        for (size_t r = 0; r < counts.size(); ++r) counts_[r] = counts[r] + kTagBytes;
        send_.resize(in.size() + kTagBytes);
        if (!in.empty()) std::memcpy(send_.data(), in.data(), in.size());  // an empty span may be null
        std::memcpy(send_.data() + in.size(), &tag, kTagBytes);
        recv_.resize(total + kTagBytes * counts.size());
        run(tag, [&] { inner_->all_gather_v_bytes(send_, counts_, recv_); });
        size_t src = 0, dst = 0;
        for (size_t c : counts) {
            check_peer(tag, recv_.data() + src + c);
            if (c > 0) std::memcpy(out.data() + dst, recv_.data() + src, c);
            src += c + kTagBytes;
            dst += c;
        }
    }

    void all_to_all_v_bytes(std::span<const std::byte> in, const std::vector<size_t>& send, std::span<std::byte> out,
                            const std::vector<size_t>& recv) override {
        size_t send_total = 0, recv_total = 0;
        for (size_t c : send) send_total += c + kTagBytes;
        for (size_t c : recv) recv_total += c + kTagBytes;
        // The tag says what this rank sends in all; each block's own tag says its size, which
        // the receiver compares with the size it expects from this rank.
        Tag tag;
        if (!next(Kind::kAllToAllV, send_total - kTagBytes * send.size(), tag)) return;
        send_.resize(send_total);
        counts_.resize(send.size());
        recv_counts_.resize(recv.size());
        size_t src = 0, dst = 0;
        for (size_t r = 0; r < send.size(); ++r) {
            Tag block_tag = tag;
            block_tag.bytes = static_cast<int64_t>(send[r]);
            if (send[r] > 0) std::memcpy(send_.data() + dst, in.data() + src, send[r]);
            std::memcpy(send_.data() + dst + send[r], &block_tag, kTagBytes);
            src += send[r];
            dst += send[r] + kTagBytes;
            counts_[r] = send[r] + kTagBytes;
        }
        for (size_t r = 0; r < recv.size(); ++r) recv_counts_[r] = recv[r] + kTagBytes;
        recv_.resize(recv_total);
        run(tag, [&] { inner_->all_to_all_v_bytes(send_, counts_, recv_, recv_counts_); });
        src = 0;
        dst = 0;
        for (size_t s = 0; s < recv.size(); ++s) {
            Tag expected = tag;
            expected.bytes = static_cast<int64_t>(recv[s]);
            check_peer(expected, recv_.data() + src + recv[s]);
            if (recv[s] > 0) std::memcpy(out.data() + dst, recv_.data() + src, recv[s]);
            src += recv[s] + kTagBytes;
            dst += recv[s];
        }
    }

    void reduce_scatter_sum(std::span<const float> in, std::span<float> out) override {
        Tag tag;
        if (!next(Kind::kReduceScatter, in.size_bytes(), tag)) return;
        const size_t n = out.size(), w = n + kChunks;
        float chunks[kChunks];
        digest_chunks(digest(tag), chunks);
        f32_.resize(w * static_cast<size_t>(size()));
        for (size_t r = 0; r < static_cast<size_t>(size()); ++r) {
            std::copy_n(in.data() + r * n, n, f32_.data() + r * w);
            std::copy_n(chunks, kChunks, f32_.data() + r * w + n);
        }
        f32_out_.resize(w);
        run(tag, [&] { inner_->reduce_scatter_sum(f32_, f32_out_); });
        for (int i = 0; i < kChunks; ++i) {
            if (f32_out_[n + static_cast<size_t>(i)] != chunks[i] * static_cast<float>(size())) {
                fail_after_reduction(tag);
            }
        }
        std::copy_n(f32_out_.data(), n, out.data());
    }

    void broadcast_bytes(std::span<std::byte> data, int root) override {
        Tag tag;
        if (!next(Kind::kBroadcast, data.size(), tag)) return;
        send_.resize(data.size() + kTagBytes);
        if (!data.empty()) std::memcpy(send_.data(), data.data(), data.size());
        std::memcpy(send_.data() + data.size(), &tag, kTagBytes);
        run(tag, [&] { inner_->broadcast_bytes(send_, root); });
        if (rank() != root) {
            check_peer(tag, send_.data() + data.size());
            if (!data.empty()) std::memcpy(data.data(), send_.data(), data.size());
        }
    }

    void barrier() override {
        Tag tag;
        if (!next(Kind::kBarrier, 0, tag)) return;
        recv_.resize(kTagBytes * static_cast<size_t>(size()));
        run(tag, [&] {
            inner_->all_gather_bytes(std::span<const std::byte>(reinterpret_cast<const std::byte*>(&tag), kTagBytes),
                                     recv_);
        });
        for (int r = 0; r < size(); ++r) check_peer(tag, recv_.data() + static_cast<size_t>(r) * kTagBytes);
    }

private:
    // This rank's tag of the next collective; false when the test hook skips it.
    bool next(Kind kind, size_t bytes, Tag& tag) {
        if (broken_) {
            raise(ErrorCode::kUnavailable, "{}: {} after an earlier failure: {}", name(),
                  kind_name(static_cast<int32_t>(kind)), broken_reason_);
        }
        if (step_ == skip_.step && index_ == skip_.index) {
            skip_ = {};
            return false;
        }
        tag = Tag{.step = step_,
                  .index = index_++,
                  .bytes = static_cast<int64_t>(bytes),
                  .kind = static_cast<int32_t>(kind),
                  .rank = rank()};
        return true;
    }

    // Runs the inner collective; its failure (a dead peer, sizes that do not line up) says
    // where this rank was. The inner message already names the group.
    template <typename F>
    void run(const Tag& tag, F&& f) {
        try {
            f();
        } catch (const Error& e) {
            break_with(fmt::format("{} (this {})", e.what(), describe(tag)));
        }
    }

    void check_peer(const Tag& mine, const std::byte* theirs_bytes) {
        Tag theirs;
        std::memcpy(&theirs, theirs_bytes, kTagBytes);
        if (!mine.same_collective(theirs)) fail(out_of_step(mine, {theirs}));
    }

    // Every rank saw the reduction's check fail, so every rank joins this gather of full tags.
    [[noreturn]] void fail_after_reduction(const Tag& mine) {
        std::vector<Tag> tags(static_cast<size_t>(size()));
        try {
            inner_->all_gather_bytes(std::span<const std::byte>(reinterpret_cast<const std::byte*>(&mine), kTagBytes),
                                     std::as_writable_bytes(std::span<Tag>(tags)));
        } catch (const Error&) {
            fail(out_of_step(mine, {}));
        }
        std::vector<Tag> differ;
        for (const Tag& t : tags) {
            if (!mine.same_collective(t)) differ.push_back(t);
        }
        fail(out_of_step(mine, differ));
    }

    std::string out_of_step(const Tag& mine, const std::vector<Tag>& theirs) const {
        std::string peers;
        for (const Tag& t : theirs) peers += "; " + describe(t);
        if (theirs.empty()) peers = "; another rank ran a different collective";
        return fmt::format(
            "ranks out of step: this {}{}. The group stops: its ranks no longer run the same "
            "collectives (a bug; please report this line)",
            describe(mine), peers);
    }

    [[noreturn]] void fail(const std::string& reason) { break_with(fmt::format("{}: {}", name(), reason)); }

    [[noreturn]] void break_with(const std::string& message) {
        broken_ = true;
        broken_reason_ = message;
        throw Error(ErrorCode::kUnavailable, message);
    }

    std::unique_ptr<Communicator> inner_;
    SkipCollective skip_;
    int64_t step_ = 0;
    int64_t index_ = 0;
    bool broken_ = false;
    std::string broken_reason_;
    std::vector<float> f32_, f32_out_;
    std::vector<int64_t> i64_;
    std::vector<std::byte> send_, recv_;
    std::vector<size_t> counts_, recv_counts_;
};

}  // namespace

std::unique_ptr<Communicator> make_guarded_communicator(std::unique_ptr<Communicator> inner, SkipCollective skip) {
    return std::make_unique<GuardedComm>(std::move(inner), skip);
}

}  // namespace moeserve::parallel
