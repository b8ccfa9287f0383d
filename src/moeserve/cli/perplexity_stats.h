// `moeserve perplexity`'s arithmetic, apart from the engine: llama.cpp's llama-perplexity
// chunking and scoring, the perplexity with its standard error, and the comparison of a run
// against a saved base run (KL divergence, top-1 agreement, delta-p), with the base file's
// format. Depends on core and the ipc message types only; no I/O but the base file's.
//
// Chunking (llama-perplexity): the text is encoded with the tokenizer's special tokens (a BOS first
// where it adds one), cut into num_chunks = n / ctx chunks of ctx tokens (the rest is dropped),
// and, with a BOS, each chunk's first token is replaced by it. Each
// chunk is one sequence; the logits of positions [ctx / 2, ctx - 1) predict tokens ctx/2 + 1 ..
// ctx - 1, so every scored token has at least ctx / 2 tokens of context.
#pragma once

#include <cstdint>
#include <cstdio>
#include <optional>
#include <string>
#include <vector>

#include "moeserve/ipc/messages.h"

namespace moeserve::cli {

// The chunks of `tokens` (the encoded text): [num_chunks][ctx], the first token of each replaced
// by *bos when given. Raises kInvalidArgument, in one line naming both counts, when
// the text is shorter than one chunk, and when ctx < 4.
std::vector<std::vector<int32_t>> perplexity_chunks(const std::vector<int32_t>& tokens, int32_t ctx,
                                                    std::optional<int32_t> bos);

// The first scored logits position of a chunk, and how many positions are scored.
inline int32_t first_scored(int32_t ctx) { return ctx / 2; }
inline int32_t num_scored(int32_t ctx) { return ctx - 1 - ctx / 2; }

// Mean negative log-likelihood and its standard error (sample standard deviation / sqrt(n)).
struct NllStats {
    double sum = 0, sum_sq = 0;
    int64_t count = 0;
    void add(double nll) {
        sum += nll;
        sum_sq += nll * nll;
        ++count;
    }
    double mean() const { return count ? sum / static_cast<double>(count) : 0.0; }
    double stderr_mean() const;  // 0 for fewer than 2 values
    // exp(mean) and its standard error by the delta method (llama-perplexity's "+/-").
    double ppl() const;
    double ppl_stderr() const;
};

// One scored position of a saved base run: the log-probability of the text's token and the
// top-k (id, log-probability), most likely first.
struct BasePosition {
    float token_logprob = 0;
    std::vector<std::pair<int32_t, float>> top;
};

// The --kl-divergence-base file: header, the evaluated tokens, then each scored position.
//   "MSKLDIV1" | int32 vocab, ctx, num_chunks, top_k | int32 tokens [num_chunks * ctx]
//   | per scored position (chunk-major): f32 token logprob, top_k x (int32 id, f32 logprob)
// Little-endian (the hosts moeserve builds for).
struct BaseHeader {
    int32_t vocab = 0, ctx = 0, num_chunks = 0, top_k = 0;
    std::vector<int32_t> tokens;  // [num_chunks * ctx]
};
class BaseWriter {
public:
    // Raises kIo naming the path when it cannot be created.
    BaseWriter(const std::string& path, const BaseHeader& header);
    ~BaseWriter();
    BaseWriter(const BaseWriter&) = delete;
    BaseWriter& operator=(const BaseWriter&) = delete;
    void add(const ipc::TokenLogprobs& lp);  // writes its first top_k entries (top must hold them)
    void close();                            // flushes; raises kIo on a write error
private:
    std::string path_;
    int32_t top_k_;
    std::FILE* file_ = nullptr;
};
// Reads the whole file; raises kNotFound / kInvalidArgument (not a base file, truncated) naming it.
struct BaseFile {
    BaseHeader header;
    std::vector<BasePosition> positions;  // [num_chunks * num_scored(ctx)]
};
BaseFile read_base_file(const std::string& path);

// A run against the base, position by position (llama-perplexity --kl-divergence).
class KlStats {
public:
    // base: the saved position; lp: this run's log-probabilities of the same position, its top
    // list holding every token id (prompt_logprobs = vocab), most likely first.
    void add(const BasePosition& base, const ipc::TokenLogprobs& lp);
    struct Summary {
        int64_t count = 0;
        double kld_mean = 0, kld_stderr = 0, kld_max = 0, kld_median = 0, kld_p99 = 0;
        double same_top_mean = 0, same_top_stderr = 0;                 // share of positions with the same argmax
        double delta_p_mean = 0, delta_p_stderr = 0, delta_p_rms = 0;  // p(token) this run - base
        double delta_p_min = 0, delta_p_max = 0;
        double base_top_mass = 0;  // mean probability mass the base's top-k holds
        double ppl_base = 0, ppl = 0, ln_ppl_ratio = 0, ln_ppl_ratio_stderr = 0;
    };
    Summary summary() const;

private:
    std::vector<double> kld_, delta_p_, same_top_, top_mass_, nll_base_, nll_;
};

// KL(P || Q) of the base's top-k distribution against this run's: sum over the base's top-k of
// p (ln p - ln q), plus the rest of the mass as one outcome (exact when top-k covers the vocab;
// otherwise a lower bound). q_logprobs f32 [vocab]: this run's log-probability of every token.
double kl_divergence_top_k(const BasePosition& base, const std::vector<float>& q_logprobs);

}  // namespace moeserve::cli
