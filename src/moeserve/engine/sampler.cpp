#include "moeserve/engine/sampler.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <optional>

#include "moeserve/core/error.h"

namespace moeserve::engine {

ipc::TokenLogprobs compute_logprobs(const float* logits, int64_t vocab, TokenId token, int32_t top_k) {
    float max_logit = -std::numeric_limits<float>::infinity();
    for (int64_t i = 0; i < vocab; ++i) max_logit = std::max(max_logit, logits[i]);
    double total = 0;
    // NOTE(#5): float expf, summed in double: glibc's double exp took ~400 ns per call here when
    // it followed AVX code (60 ms per 152k-row), expf ~7 ns.
    for (int64_t i = 0; i < vocab; ++i) total += static_cast<double>(std::exp(logits[i] - max_logit));
    const double lse = static_cast<double>(max_logit) + std::log(total);
    ipc::TokenLogprobs out;
    out.token_id = token;
    out.logprob = static_cast<float>(static_cast<double>(logits[token]) - lse);
    int32_t rank = 1;
    for (int64_t i = 0; i < vocab; ++i) rank += logits[i] > logits[token] || (logits[i] == logits[token] && i < token);
    out.rank = rank;
    if (top_k > 0) {
        const auto k = static_cast<size_t>(std::min<int64_t>(top_k, vocab));
        std::vector<int32_t> ids(static_cast<size_t>(vocab));
        std::iota(ids.begin(), ids.end(), 0);
        std::partial_sort(
            ids.begin(), ids.begin() + static_cast<std::ptrdiff_t>(k), ids.end(),
            [&](int32_t a, int32_t b) { return logits[a] > logits[b] || (logits[a] == logits[b] && a < b); });
        for (size_t i = 0; i < k; ++i) {
            out.top.emplace_back(ids[i], static_cast<float>(static_cast<double>(logits[ids[i]]) - lse));
        }
    }
    return out;
}

void apply_penalties(float* logits, int64_t vocab, const Request& r) {
    const auto& s = r.sampling;
    const auto in_vocab = [vocab](TokenId t) { return t >= 0 && t < vocab; };
    if (s.repetition_penalty != 1.0f) {
        // Every token seen in the prompt or the output, once.
        std::vector<TokenId> seen(r.prompt_token_ids);
        seen.insert(seen.end(), r.output_token_ids.begin(), r.output_token_ids.end());
        std::sort(seen.begin(), seen.end());
        seen.erase(std::unique(seen.begin(), seen.end()), seen.end());
        for (TokenId t : seen) {
            if (!in_vocab(t)) continue;
            float& x = logits[t];
            x = x > 0 ? x / s.repetition_penalty : x * s.repetition_penalty;
        }
    }
    if (s.frequency_penalty != 0.0f || s.presence_penalty != 0.0f) {
        for (const auto& [t, count] : r.output_token_counts) {
            if (!in_vocab(t)) continue;
            logits[t] -= s.frequency_penalty * static_cast<float>(count) + s.presence_penalty;
        }
    }
    // A structured output whose grammar is complete can only end: min_tokens must not block EOS.
    const bool grammar_done = r.constrained() && r.grammar->is_terminated();
    if (r.num_output_tokens() < s.min_tokens && !grammar_done) {
        constexpr float kNegInf = -std::numeric_limits<float>::infinity();
        for (TokenId t : s.stop_token_ids)
            if (in_vocab(t)) logits[t] = kNegInf;
    }
}

void apply_logit_processors(float* logits, int64_t vocab, const Request& r) {
    const auto& s = r.sampling;
    const auto in_vocab = [vocab](TokenId t) { return t >= 0 && t < vocab; };
    constexpr float kNegInf = -std::numeric_limits<float>::infinity();
    if (!s.allowed_token_ids.empty()) {
        std::vector<float> kept;
        kept.reserve(s.allowed_token_ids.size());
        for (TokenId t : s.allowed_token_ids) kept.push_back(in_vocab(t) ? logits[t] : kNegInf);
        std::fill(logits, logits + vocab, kNegInf);
        for (size_t i = 0; i < kept.size(); ++i) {
            if (in_vocab(s.allowed_token_ids[i])) logits[s.allowed_token_ids[i]] = kept[i];
        }
    }
    for (const auto& word : s.bad_words_token_ids) {
        if (word.empty() || !in_vocab(word.back())) continue;
        if (r.output_ends_with(std::span<const TokenId>(word).first(word.size() - 1))) logits[word.back()] = kNegInf;
    }
    for (const auto& [t, bias] : s.logit_bias) {
        if (in_vocab(t)) logits[t] += bias;
    }
}

void apply_grammar_mask(float* logits, int64_t vocab, const Request& r) {
    if (!r.constrained()) return;
    std::vector<uint32_t> mask;
    r.grammar->fill_next_token_bitmask(mask);
    if (r.grammar->is_accepting()) {
        for (TokenId t : r.sampling.stop_token_ids) {
            if (t >= 0 && static_cast<size_t>(t >> 5) < mask.size())
                mask[static_cast<size_t>(t >> 5)] |= 1u << (t & 31);
        }
    }
    constexpr float kNegInf = -std::numeric_limits<float>::infinity();
    bool any = false;
    for (int64_t w = 0; w * 32 < vocab; ++w) {
        const uint32_t bits = static_cast<size_t>(w) < mask.size() ? mask[static_cast<size_t>(w)] : 0;
        const int64_t end = std::min<int64_t>(vocab, (w + 1) * 32);
        if (bits == 0xFFFFFFFFu && end == (w + 1) * 32) {
            any = true;
            continue;
        }
        for (int64_t t = w * 32; t < end; ++t) {
            if ((bits >> (t & 31)) & 1) {
                any = true;
            } else {
                logits[t] = kNegInf;
            }
        }
    }
    if (!any) logits[0] = 0;  // a dead end: the scheduler fails the request when token 0 is rejected
}

Sampler::Sampler(int64_t vocab_size, ThreadPool* pool)
    : vocab_(vocab_size), pool_(pool), scratch_(static_cast<size_t>(pool ? pool->num_threads() : 1)) {
    MOESERVE_CHECK(vocab_size > 0, "vocab size {}", vocab_size);
}

SampledToken Sampler::sample_row(float* logits, Request& r, kernels::cpu::SampleScratch& scratch) const {
    const auto& s = r.sampling;
    SampledToken out;
    apply_grammar_mask(logits, vocab_, r);
    // Raw logits are needed for logprobs after sampling; keep a copy only when asked.
    std::vector<float> raw;
    if (s.logprobs) raw.assign(logits, logits + vocab_);
    apply_logit_processors(logits, vocab_, r);
    apply_penalties(logits, vocab_, r);
    const kernels::cpu::SamplingSettings settings{s.temperature, s.top_k, s.top_p, s.min_p};
    out.token_id = s.temperature <= 0.0f ? kernels::cpu::argmax(logits, vocab_)
                                         : kernels::cpu::sample_token(logits, vocab_, settings, r.rng, scratch);
    if (s.logprobs) out.logprobs = compute_logprobs(raw.data(), vocab_, out.token_id, *s.logprobs);
    return out;
}

std::vector<SampledToken> Sampler::sample(std::span<float* const> rows, std::span<Request* const> requests) {
    MOESERVE_CHECK(rows.size() == requests.size(), "{} logits rows for {} requests", rows.size(), requests.size());
    std::vector<DraftRows> single(rows.size());
    for (size_t i = 0; i < rows.size(); ++i) single[i] = DraftRows{requests[i], rows.subspan(i, 1), {}};
    std::vector<SampledToken> out;
    out.reserve(rows.size());
    for (auto& drawn : sample_drafts(single)) out.push_back(std::move(drawn.front()));
    return out;
}

namespace {

// The accepted drafts of a verify step appended to a request's outputs for the rows after them
// (its grammar advanced by each, in the order the scheduler later applies them), and taken back
// on destruction: the request leaves the sampler as it came.
class DraftedOutputs {
public:
    explicit DraftedOutputs(Request& r) : r_(r), active_(r.grammar_active) {}
    DraftedOutputs(const DraftedOutputs&) = delete;
    DraftedOutputs& operator=(const DraftedOutputs&) = delete;
    ~DraftedOutputs() {
        for (size_t i = 0; i < appended_; ++i) {
            const TokenId t = r_.output_token_ids.back();
            r_.output_token_ids.pop_back();
            if (auto it = r_.output_token_counts.find(t); it != r_.output_token_counts.end() && --it->second == 0) {
                r_.output_token_counts.erase(it);
            }
        }
        if (saved_grammar_) *r_.grammar = std::move(*saved_grammar_);
        r_.grammar_active = active_;
    }

    void append(TokenId t) {
        if (r_.constrained()) {
            if (!saved_grammar_) saved_grammar_.emplace(*r_.grammar);
            r_.grammar->accept_token(t);  // its row's mask allowed t
        }
        r_.append_output(t);
        ++appended_;
    }

private:
    Request& r_;
    const bool active_;
    std::optional<structured::GrammarMatcher> saved_grammar_;
    size_t appended_ = 0;
};

}  // namespace

std::vector<std::vector<SampledToken>> Sampler::sample_drafts(std::span<const DraftRows> requests) {
    std::vector<std::vector<SampledToken>> out(requests.size());
    const auto verify = [&](size_t k, kernels::cpu::SampleScratch& scratch) {
        const DraftRows& d = requests[k];
        MOESERVE_CHECK(d.rows.size() == d.drafts.size() + 1, "{}: {} logits rows for {} drafts", d.request->request_id,
                       d.rows.size(), d.drafts.size());
        DraftedOutputs drafted(*d.request);
        for (size_t j = 0; j < d.rows.size(); ++j) {
            out[k].push_back(sample_row(d.rows[j], *d.request, scratch));
            if (j == d.drafts.size() || out[k].back().token_id != d.drafts[j]) break;
            drafted.append(d.drafts[j]);
        }
    };
    const auto n = static_cast<int64_t>(requests.size());
    if (pool_ == nullptr || pool_->num_threads() == 1 || n == 1) {
        for (size_t k = 0; k < requests.size(); ++k) verify(k, scratch_[0]);
        return out;
    }
    const int64_t num_threads = pool_->num_threads();
    pool_->run([&](int tid) {
        for (int64_t i = tid; i < n; i += num_threads)
            verify(static_cast<size_t>(i), scratch_[static_cast<size_t>(tid)]);
    });
    return out;
}

}  // namespace moeserve::engine
