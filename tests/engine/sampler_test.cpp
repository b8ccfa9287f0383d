// Sampler: seeded reproducibility, penalties against a hand computation, the support sets of
// top-k / top-p / min-p on a fixed logit vector, min_tokens masking, logprobs = log_softmax.
#include "moeserve/engine/sampler.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <set>

#include "engine/engine_test_util.h"

namespace moeserve::engine {
namespace {

std::unique_ptr<Request> sampling_request(ipc::SamplingParams p, uint64_t seed, std::vector<TokenId> prompt = {2}) {
    return std::make_unique<Request>("r", std::move(prompt), p, seed, 0);
}

// Logits whose softmax is probs (natural log).
std::vector<float> logits_of(const std::vector<double>& probs) {
    std::vector<float> out;
    for (double p : probs) out.push_back(static_cast<float>(std::log(p)));
    return out;
}

std::set<TokenId> support(const ipc::SamplingParams& p, const std::vector<float>& logits, int draws = 2000) {
    Sampler sampler(static_cast<int64_t>(logits.size()), nullptr);
    auto r = sampling_request(p, 1);
    std::set<TokenId> seen;
    for (int i = 0; i < draws; ++i) {
        std::vector<float> row = logits;
        float* rows[] = {row.data()};
        Request* reqs[] = {r.get()};
        seen.insert(sampler.sample(rows, reqs)[0].token_id);
    }
    return seen;
}

const std::vector<double> kProbs = {0.05, 0.4, 0.25, 0.15, 0.1, 0.05};  // sorted: 1 2 3 4 0 5

TEST(SamplerTest, TopKKeepsTheKMostLikely) {
    ipc::SamplingParams p;
    p.top_k = 3;
    EXPECT_EQ(support(p, logits_of(kProbs)), (std::set<TokenId>{1, 2, 3}));
}

TEST(SamplerTest, TopPKeepsTheSmallestSetReachingP) {
    ipc::SamplingParams p;
    p.top_p = 0.7f;  // 0.4 + 0.25 = 0.65 < 0.7 -> add 0.15
    EXPECT_EQ(support(p, logits_of(kProbs)), (std::set<TokenId>{1, 2, 3}));
    p.top_p = 0.6f;
    EXPECT_EQ(support(p, logits_of(kProbs)), (std::set<TokenId>{1, 2}));
}

TEST(SamplerTest, MinPDropsTokensBelowAShareOfTheMax) {
    ipc::SamplingParams p;
    p.min_p = 0.3f;  // floor 0.12: keeps 0.4, 0.25, 0.15
    EXPECT_EQ(support(p, logits_of(kProbs)), (std::set<TokenId>{1, 2, 3}));
}

TEST(SamplerTest, PlainSamplingFollowsTheDistribution) {
    ipc::SamplingParams p;
    Sampler sampler(6, nullptr);
    auto r = sampling_request(p, 3);
    std::vector<int> counts(6, 0);
    const int n = 20000;
    for (int i = 0; i < n; ++i) {
        std::vector<float> row = logits_of(kProbs);
        float* rows[] = {row.data()};
        Request* reqs[] = {r.get()};
        ++counts[static_cast<size_t>(sampler.sample(rows, reqs)[0].token_id)];
    }
    // 5 sigma of a binomial with n = 20000 is < 0.018 for every p here.
    for (size_t i = 0; i < kProbs.size(); ++i) EXPECT_NEAR(counts[i] / double(n), kProbs[i], 0.018) << i;
}

TEST(SamplerTest, SeededStreamsReproduceAndDiffer) {
    ipc::SamplingParams p;
    p.temperature = 0.8f;
    const auto draw = [&](uint64_t seed) {
        Sampler sampler(6, nullptr);
        auto r = sampling_request(p, seed);
        std::vector<TokenId> out;
        for (int i = 0; i < 32; ++i) {
            std::vector<float> row = logits_of(kProbs);
            float* rows[] = {row.data()};
            Request* reqs[] = {r.get()};
            out.push_back(sampler.sample(rows, reqs)[0].token_id);
        }
        return out;
    };
    EXPECT_EQ(draw(42), draw(42));
    EXPECT_NE(draw(42), draw(43));
}

TEST(SamplerTest, PenaltiesMatchAHandComputation) {
    // prompt {2}, outputs {3, 3, 5}; repetition 2, frequency 0.5, presence 0.25.
    ipc::SamplingParams p;
    p.repetition_penalty = 2.0f;
    p.frequency_penalty = 0.5f;
    p.presence_penalty = 0.25f;
    auto r = sampling_request(p, 0, {2});
    for (TokenId t : {3, 3, 5}) r->append_output(t);
    std::vector<float> logits = {1.0f, -1.0f, 4.0f, -2.0f, 0.5f, 3.0f};
    apply_penalties(logits.data(), 6, *r);
    const std::vector<float> expected = {
        1.0f,                          // unseen
        -1.0f,                         // unseen
        4.0f / 2,                      // prompt only: repetition
        -2.0f * 2 - 0.5f * 2 - 0.25f,  // output x2: repetition (negative: x2), frequency, presence
        0.5f,                          // unseen
        3.0f / 2 - 0.5f - 0.25f,       // output x1
    };
    EXPECT_EQ(logits, expected);
}

TEST(SamplerTest, LogitProcessorsAllowBanAndBias) {
    ipc::SamplingParams p;
    p.allowed_token_ids = {1, 3, 4, 5};
    p.bad_words_token_ids = {{4}, {2, 5}, {3, 3, 1}};
    p.logit_bias = {{3, -1.5f}, {0, 100.0f}};
    auto r = sampling_request(p, 0, {2});
    r->append_output(3);
    r->append_output(3);
    std::vector<float> logits = {1.0f, -1.0f, 4.0f, -2.0f, 0.5f, 3.0f};
    apply_logit_processors(logits.data(), 6, *r);
    const float inf = std::numeric_limits<float>::infinity();
    // 0 and 2 not allowed (0's bias does not bring it back); 4 banned alone; "3 3 1": the output
    // ends with 3 3, so 1 is banned; "2 5": the output does not end with 2, so 5 stays.
    const std::vector<float> expected = {-inf + 100.0f, -inf, -inf, -2.0f - 1.5f, -inf, 3.0f};
    EXPECT_EQ(logits, expected);
}

TEST(SamplerTest, MinTokensMasksEosAndStopTokens) {
    ipc::SamplingParams p;
    p.temperature = 0;
    p.min_tokens = 2;
    p.stop_token_ids = {4, 1};  // the client's 4 and the EOS 1, as ipc::validate_request merges them
    auto r = sampling_request(p, 0);
    Sampler sampler(6, nullptr);
    std::vector<float> row = {0, 9, 0, 0, 8, 7};  // eos 1 best, stop 4 next
    float* rows[] = {row.data()};
    Request* reqs[] = {r.get()};
    EXPECT_EQ(sampler.sample(rows, reqs)[0].token_id, 5);
    r->append_output(5);
    r->append_output(5);
    row = {0, 9, 0, 0, 8, 7};
    EXPECT_EQ(sampler.sample(rows, reqs)[0].token_id, 1);
}

TEST(SamplerTest, LogprobsAreLogSoftmaxOfTheRawLogits) {
    ipc::SamplingParams p;
    p.temperature = 0;
    p.logprobs = 3;
    p.repetition_penalty = 5.0f;  // changes the sampled token, not the logprobs
    auto r = sampling_request(p, 0, {1});
    Sampler sampler(6, nullptr);
    const std::vector<float> raw = {0.5f, 3.0f, 2.0f, -1.0f, 2.0f, 0.0f};
    std::vector<float> row = raw;
    float* rows[] = {row.data()};
    Request* reqs[] = {r.get()};
    const SampledToken tok = sampler.sample(rows, reqs)[0];
    EXPECT_EQ(tok.token_id, 2);  // 3.0 / 5 = 0.6 < 2.0; ties 2 vs 4 -> lower id
    ASSERT_TRUE(tok.logprobs);
    double total = 0;
    for (float x : raw) total += std::exp(double(x));
    const auto lp = [&](int i) { return static_cast<float>(raw[static_cast<size_t>(i)] - std::log(total)); };
    EXPECT_NEAR(tok.logprobs->logprob, lp(2), 1e-6);
    EXPECT_EQ(tok.logprobs->rank, 2);
    ASSERT_EQ(tok.logprobs->top.size(), 3u);
    EXPECT_EQ(tok.logprobs->top[0].first, 1);
    EXPECT_EQ(tok.logprobs->top[1].first, 2);
    EXPECT_EQ(tok.logprobs->top[2].first, 4);
    EXPECT_NEAR(tok.logprobs->top[0].second, lp(1), 1e-6);
}

TEST(SamplerTest, ThreadCountDoesNotChangeTokens) {
    ipc::SamplingParams p;
    p.temperature = 1.0f;
    p.top_p = 0.9f;
    ThreadPool pool(2);
    const auto run = [&](ThreadPool* tp) {
        Sampler sampler(6, tp);
        std::vector<std::unique_ptr<Request>> reqs;
        for (uint64_t s = 0; s < 5; ++s) reqs.push_back(sampling_request(p, s));
        std::vector<TokenId> out;
        for (int step = 0; step < 10; ++step) {
            std::vector<std::vector<float>> rows(5, logits_of(kProbs));
            std::vector<float*> ptrs;
            std::vector<Request*> rp;
            for (size_t i = 0; i < 5; ++i) {
                ptrs.push_back(rows[i].data());
                rp.push_back(reqs[i].get());
            }
            for (const auto& t : sampler.sample(ptrs, rp)) out.push_back(t.token_id);
        }
        return out;
    };
    EXPECT_EQ(run(nullptr), run(&pool));
}

}  // namespace
}  // namespace moeserve::engine
