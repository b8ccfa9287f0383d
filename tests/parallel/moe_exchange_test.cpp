// Padded vs variable all-gather, and MoE dispatch/combine by all-to-all-v and by all-gather +
// reduce-scatter, against the single-rank result (a toy expert y_e(x) = (e + 1) x + e).
#include "moeserve/parallel/moe_exchange.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cmath>

#include <random>
#include <tuple>
#include "moeserve/parallel/gather.h"
#include "moeserve/parallel/local_comm.h"
#include "moeserve/testing/gathers.h"
#include "parallel/run_ranks.h"

namespace moeserve::parallel {
namespace {

using moeserve::testing::all_gather_rows_v;
using moeserve::testing::run_ranks;
using namespace std::chrono_literals;

struct RankTokens {
    std::vector<float> x, w;
    std::vector<int32_t> ids;
    int64_t n = 0;
};

constexpr int64_t kHidden = 5;
constexpr int kTopK = 2;
constexpr int64_t kExperts = 8;

RankTokens make_tokens(int64_t n, uint64_t seed) {
    std::mt19937_64 rng(seed);
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    RankTokens t;
    t.n = n;
    for (int64_t i = 0; i < n * kHidden; ++i) t.x.push_back(u(rng));
    for (int64_t i = 0; i < n; ++i) {
        const auto a = static_cast<int32_t>(rng() % kExperts);
        auto b = static_cast<int32_t>(rng() % kExperts);
        if (b == a) b = (a + 1) % kExperts;
        t.ids.insert(t.ids.end(), {a, b});
        t.w.insert(t.w.end(), {0.25f + 0.5f * std::fabs(u(rng)), 0.25f});
    }
    return t;
}

float expert(int32_t e, float x) { return static_cast<float>(e + 1) * x + static_cast<float>(e); }

// Weighted sum over the k experts of rows that this rank owns ([begin, end)).
void run_local_experts(const float* x, const int32_t* ids, const float* w, int64_t n, int32_t begin, int32_t end,
                       float* out) {
    for (int64_t t = 0; t < n; ++t) {
        for (int64_t h = 0; h < kHidden; ++h) {
            float acc = 0.0f;
            for (int j = 0; j < kTopK; ++j) {
                const int32_t e = ids[t * kTopK + j];
                if (e >= begin && e < end) acc += w[t * kTopK + j] * expert(e, x[t * kHidden + h]);
            }
            out[t * kHidden + h] = acc;
        }
    }
}

class MoeExchangeTest : public ::testing::TestWithParam<int> {};

TEST_P(MoeExchangeTest, BothExchangesEqualTheSingleRankResult) {
    const int ep = GetParam();
    const int64_t per_rank = kExperts / ep;
    std::vector<RankTokens> tokens;
    for (int r = 0; r < ep; ++r) tokens.push_back(make_tokens(r == 1 ? 0 : 3 + 2 * r, 100 + static_cast<uint64_t>(r)));
    LocalCommGroup group(ep, 5000ms, "ep");
    std::vector<std::vector<float>> out_a2a(static_cast<size_t>(ep)), out_ag(static_cast<size_t>(ep));
    auto errors = run_ranks(ep, [&](int rank) {
        auto comm = group.communicator(rank);
        const RankTokens& t = tokens[static_cast<size_t>(rank)];
        MoeExchange ex;
        for (MoeExchangeKind kind : {MoeExchangeKind::kAllToAll, MoeExchangeKind::kAllGather}) {
            ex.dispatch(*comm, kind, {t.x.data(), t.ids.data(), t.w.data(), t.n, kHidden, kTopK}, per_rank);
            run_local_experts(ex.local_x(), ex.local_ids(), ex.local_weights(), ex.num_local(),
                              static_cast<int32_t>(rank * per_rank), static_cast<int32_t>((rank + 1) * per_rank),
                              ex.local_out());
            auto& out = kind == MoeExchangeKind::kAllToAll ? out_a2a[static_cast<size_t>(rank)]
                                                           : out_ag[static_cast<size_t>(rank)];
            out.assign(static_cast<size_t>(t.n * kHidden), -1.0f);
            ex.combine(*comm, out.data());
        }
    });
    for (const auto& e : errors) ASSERT_FALSE(e);
    for (int r = 0; r < ep; ++r) {
        const RankTokens& t = tokens[static_cast<size_t>(r)];
        std::vector<float> ref(static_cast<size_t>(t.n * kHidden));
        run_local_experts(t.x.data(), t.ids.data(), t.w.data(), t.n, 0, kExperts, ref.data());
        for (size_t i = 0; i < ref.size(); ++i) {
            EXPECT_NEAR(out_a2a[static_cast<size_t>(r)][i], ref[i], 1e-5f) << "rank " << r << " i " << i;
            EXPECT_NEAR(out_ag[static_cast<size_t>(r)][i], ref[i], 1e-5f) << "rank " << r << " i " << i;
        }
    }
}

INSTANTIATE_TEST_SUITE_P(EpSizes, MoeExchangeTest, ::testing::Values(1, 2, 4));

TEST(GatherTest, PaddedAndVariableAllGatherAreEqual) {
    constexpr int n = 4;
    LocalCommGroup group(n, 5000ms, "g");
    const int64_t counts[n] = {2, 0, 5, 1};
    auto errors = run_ranks(n, [&](int rank) {
        auto comm = group.communicator(rank);
        std::vector<float> rows;
        for (int64_t i = 0; i < counts[rank] * 3; ++i) rows.push_back(static_cast<float>(rank * 100 + i));
        std::vector<float> a, b;
        PaddedGatherScratch scratch;
        std::vector<int64_t> ca, cb;
        all_gather_rows_padded(*comm, rows, 3, a, ca, scratch);
        all_gather_rows_v(*comm, rows, 3, b, cb);
        EXPECT_EQ(a, b);
        EXPECT_EQ(ca, (std::vector<int64_t>{2, 0, 5, 1}));
        EXPECT_EQ(cb, ca);
        ASSERT_EQ(a.size(), 24u);
        EXPECT_EQ(a[6], 200.0f);  // rank 2's first row follows rank 0's two rows
    });
    for (const auto& e : errors) EXPECT_FALSE(e);
}

// Counts every all-gather on the way to the real communicator (the count exchange is one).
class CountingComm final : public Communicator {
public:
    explicit CountingComm(Communicator& inner) : inner_(inner) {}
    int rank() const override { return inner_.rank(); }
    int size() const override { return inner_.size(); }
    const std::string& name() const override { return inner_.name(); }
    std::chrono::milliseconds timeout() const override { return inner_.timeout(); }
    void all_reduce_sum(std::span<float> d) override { inner_.all_reduce_sum(d); }
    void all_reduce_sum(std::span<int64_t> d) override { inner_.all_reduce_sum(d); }
    void all_reduce_max(std::span<int64_t> d) override { inner_.all_reduce_max(d); }
    void all_gather_bytes(std::span<const std::byte> in, std::span<std::byte> out) override {
        ++all_gathers;
        inner_.all_gather_bytes(in, out);
    }
    void all_gather_v_bytes(std::span<const std::byte> in, const std::vector<size_t>& b,
                            std::span<std::byte> out) override {
        inner_.all_gather_v_bytes(in, b, out);
    }
    void all_to_all_v_bytes(std::span<const std::byte> in, const std::vector<size_t>& s, std::span<std::byte> out,
                            const std::vector<size_t>& r) override {
        inner_.all_to_all_v_bytes(in, s, out, r);
    }
    void reduce_scatter_sum(std::span<const float> in, std::span<float> out) override {
        inner_.reduce_scatter_sum(in, out);
    }
    void broadcast_bytes(std::span<std::byte> d, int root) override { inner_.broadcast_bytes(d, root); }
    void barrier() override { inner_.barrier(); }
    int all_gathers = 0;

private:
    Communicator& inner_;
};

// Three "layers" per forward, two forwards with different token counts: after begin_forward()
// the counts travel once per forward (1 + 3 all-gathers, not 2 x 3), with the same results as
// an exchange that sends them every layer.
TEST(MoeExchangeCountsTest, PaddedGatherExchangesCountsOncePerForward) {
    constexpr int ep = 2;
    constexpr int64_t per_rank = kExperts / ep;
    LocalCommGroup group(ep, 5000ms, "ep");
    std::vector<int> gathers(ep);
    auto errors = run_ranks(ep, [&](int rank) {
        auto comm = group.communicator(rank);
        CountingComm counting(*comm);
        MoeExchange once, every;
        for (int forward = 0; forward < 2; ++forward) {
            const RankTokens t = make_tokens(2 + rank + 3 * forward, 7 + static_cast<uint64_t>(rank + 10 * forward));
            once.begin_forward();
            for (int layer = 0; layer < 3; ++layer) {
                std::vector<float> a(static_cast<size_t>(t.n * kHidden)), b(a.size());
                for (auto [ex, c, out] : {std::tuple<MoeExchange*, Communicator*, float*>{&once, &counting, a.data()},
                                          {&every, comm.get(), b.data()}}) {
                    ex->dispatch(*c, MoeExchangeKind::kAllGather,
                                 {t.x.data(), t.ids.data(), t.w.data(), t.n, kHidden, kTopK}, per_rank);
                    run_local_experts(ex->local_x(), ex->local_ids(), ex->local_weights(), ex->num_local(),
                                      static_cast<int32_t>(rank * per_rank),
                                      static_cast<int32_t>((rank + 1) * per_rank), ex->local_out());
                    ex->combine(*c, out);
                }
                EXPECT_EQ(a, b) << "rank " << rank << " forward " << forward << " layer " << layer;
            }
        }
        gathers[static_cast<size_t>(rank)] = counting.all_gathers;
    });
    for (const auto& e : errors) ASSERT_FALSE(e);
    EXPECT_EQ(gathers, (std::vector<int>{8, 8}));  // 2 forwards x (1 count + 3 row gathers)
}

TEST(MoeExchangeMismatchTest, RanksPickingDifferentExchangesFailInBoundedTime) {
    LocalCommGroup group(2, 2000ms, "ep");
    const RankTokens t = make_tokens(3, 1);
    const auto start = std::chrono::steady_clock::now();
    auto errors = run_ranks(2, [&](int rank) {
        auto comm = group.communicator(rank);
        MoeExchange ex;
        ex.dispatch(*comm, rank == 0 ? MoeExchangeKind::kAllToAll : MoeExchangeKind::kAllGather,
                    {t.x.data(), t.ids.data(), t.w.data(), t.n, kHidden, kTopK}, 4);
    });
    EXPECT_TRUE(errors[0] && errors[1]);
    EXPECT_LT(std::chrono::steady_clock::now() - start, 10s);
}

}  // namespace
}  // namespace moeserve::parallel
