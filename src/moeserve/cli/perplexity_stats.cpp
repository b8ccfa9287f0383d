#include "moeserve/cli/perplexity_stats.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "moeserve/core/error.h"

namespace moeserve::cli {

namespace {

constexpr char kMagic[8] = {'M', 'S', 'K', 'L', 'D', 'I', 'V', '1'};

double mean_of(const std::vector<double>& v) {
    double s = 0;
    for (double x : v) s += x;
    return v.empty() ? 0.0 : s / static_cast<double>(v.size());
}

// Standard error of the mean: sample standard deviation / sqrt(n).
double stderr_of(const std::vector<double>& v) {
    if (v.size() < 2) return 0.0;
    const double m = mean_of(v);
    double ss = 0;
    for (double x : v) ss += (x - m) * (x - m);
    const auto n = static_cast<double>(v.size());
    return std::sqrt(ss / (n - 1) / n);
}

// The value below which a share q of v lies (nearest rank of the sorted copy).
double quantile(std::vector<double> v, double q) {
    if (v.empty()) return 0.0;
    std::sort(v.begin(), v.end());
    const auto at = static_cast<size_t>(std::lround(q * static_cast<double>(v.size() - 1)));
    return v[at];
}

void read_exact(std::FILE* f, void* out, size_t bytes, const std::string& path) {
    if (std::fread(out, 1, bytes, f) != bytes) {
        raise(ErrorCode::kInvalidArgument, "--kl-divergence-base {}: the file is truncated", path);
    }
}

}  // namespace

std::vector<std::vector<int32_t>> perplexity_chunks(const std::vector<int32_t>& tokens, int32_t ctx,
                                                    std::optional<int32_t> bos) {
    if (ctx < 4) raise(ErrorCode::kInvalidArgument, "--ctx {}: need at least 4 tokens per chunk", ctx);
    const auto n = static_cast<int64_t>(tokens.size());
    if (n < ctx) {
        raise(ErrorCode::kInvalidArgument,
              "the text has {} tokens, fewer than one chunk of --ctx {}: give a longer text or a smaller --ctx", n,
              ctx);
    }
    std::vector<std::vector<int32_t>> chunks;
    for (int64_t c = 0; c < n / ctx; ++c) {
        const auto begin = tokens.begin() + c * ctx;
        chunks.emplace_back(begin, begin + ctx);
        if (bos) chunks.back()[0] = *bos;
    }
    return chunks;
}

double NllStats::stderr_mean() const {
    if (count < 2) return 0.0;
    const auto n = static_cast<double>(count);
    const double var = std::max(0.0, (sum_sq - sum * sum / n) / (n - 1));
    return std::sqrt(var / n);
}

double NllStats::ppl() const { return std::exp(mean()); }
double NllStats::ppl_stderr() const { return ppl() * stderr_mean(); }

BaseWriter::BaseWriter(const std::string& path, const BaseHeader& header) : path_(path), top_k_(header.top_k) {
    file_ = std::fopen(path.c_str(), "wb");
    if (file_ == nullptr) raise(ErrorCode::kIo, "--kl-divergence-base {}: cannot create the file", path);
    const int32_t fields[4] = {header.vocab, header.ctx, header.num_chunks, header.top_k};
    std::fwrite(kMagic, 1, sizeof kMagic, file_);
    std::fwrite(fields, sizeof(int32_t), 4, file_);
    std::fwrite(header.tokens.data(), sizeof(int32_t), header.tokens.size(), file_);
}

BaseWriter::~BaseWriter() {
    if (file_ != nullptr) std::fclose(file_);
}

void BaseWriter::add(const ipc::TokenLogprobs& lp) {
    MOESERVE_CHECK(static_cast<int32_t>(lp.top.size()) >= top_k_, "{} top logprobs for top_k {}", lp.top.size(),
                   top_k_);
    std::fwrite(&lp.logprob, sizeof(float), 1, file_);
    for (int32_t i = 0; i < top_k_; ++i) {
        const auto& [id, logprob] = lp.top[static_cast<size_t>(i)];
        std::fwrite(&id, sizeof(int32_t), 1, file_);
        std::fwrite(&logprob, sizeof(float), 1, file_);
    }
}

void BaseWriter::close() {
    const bool failed = std::ferror(file_) != 0;
    const bool close_failed = std::fclose(file_) != 0;
    file_ = nullptr;
    if (failed || close_failed) raise(ErrorCode::kIo, "--kl-divergence-base {}: write failed", path_);
}

BaseFile read_base_file(const std::string& path) {
    std::FILE* f = std::fopen(path.c_str(), "rb");
    if (f == nullptr) raise(ErrorCode::kNotFound, "--kl-divergence-base {}: no such file", path);
    struct Closer {
        std::FILE* f;
        ~Closer() { std::fclose(f); }
    } closer{f};
    char magic[8];
    read_exact(f, magic, sizeof magic, path);
    if (std::memcmp(magic, kMagic, sizeof magic) != 0) {
        raise(ErrorCode::kInvalidArgument, "--kl-divergence-base {}: not a file written by moeserve perplexity", path);
    }
    BaseFile out;
    BaseHeader& h = out.header;
    int32_t fields[4];
    read_exact(f, fields, sizeof fields, path);
    h.vocab = fields[0], h.ctx = fields[1], h.num_chunks = fields[2], h.top_k = fields[3];
    if (h.vocab <= 0 || h.ctx < 4 || h.num_chunks <= 0 || h.top_k <= 0 || h.top_k > h.vocab) {
        raise(ErrorCode::kInvalidArgument, "--kl-divergence-base {}: bad header (vocab {}, ctx {}, {} chunks, top {})",
              path, h.vocab, h.ctx, h.num_chunks, h.top_k);
    }
    h.tokens.resize(static_cast<size_t>(h.num_chunks) * static_cast<size_t>(h.ctx));
    read_exact(f, h.tokens.data(), h.tokens.size() * sizeof(int32_t), path);
    out.positions.resize(static_cast<size_t>(h.num_chunks) * static_cast<size_t>(num_scored(h.ctx)));
    for (BasePosition& p : out.positions) {
        read_exact(f, &p.token_logprob, sizeof(float), path);
        p.top.resize(static_cast<size_t>(h.top_k));
        for (auto& [id, logprob] : p.top) {
            read_exact(f, &id, sizeof(int32_t), path);
            read_exact(f, &logprob, sizeof(float), path);
        }
    }
    return out;
}

double kl_divergence_top_k(const BasePosition& base, const std::vector<float>& q_logprobs) {
    double kld = 0, p_top = 0, q_top = 0;
    for (const auto& [id, logprob] : base.top) {
        const double p = std::exp(static_cast<double>(logprob));
        const auto q_lp = static_cast<double>(q_logprobs[static_cast<size_t>(id)]);
        kld += p * (static_cast<double>(logprob) - q_lp);
        p_top += p;
        q_top += std::exp(q_lp);
    }
    const double p_rest = 1.0 - p_top;
    if (p_rest > 1e-12) kld += p_rest * (std::log(p_rest) - std::log(std::max(1.0 - q_top, 1e-30)));
    return kld;
}

void KlStats::add(const BasePosition& base, const ipc::TokenLogprobs& lp) {
    MOESERVE_CHECK(!lp.top.empty() && !base.top.empty(), "empty logprob lists");
    std::vector<float> q(lp.top.size());
    for (const auto& [id, logprob] : lp.top) q[static_cast<size_t>(id)] = logprob;
    kld_.push_back(kl_divergence_top_k(base, q));
    delta_p_.push_back(std::exp(static_cast<double>(lp.logprob)) - std::exp(static_cast<double>(base.token_logprob)));
    same_top_.push_back(lp.top[0].first == base.top[0].first ? 1.0 : 0.0);
    double mass = 0;
    for (const auto& entry : base.top) mass += std::exp(static_cast<double>(entry.second));
    top_mass_.push_back(mass);
    nll_base_.push_back(-static_cast<double>(base.token_logprob));
    nll_.push_back(-static_cast<double>(lp.logprob));
}

KlStats::Summary KlStats::summary() const {
    Summary s;
    s.count = static_cast<int64_t>(kld_.size());
    if (kld_.empty()) return s;
    s.kld_mean = mean_of(kld_);
    s.kld_stderr = stderr_of(kld_);
    s.kld_max = *std::max_element(kld_.begin(), kld_.end());
    s.kld_median = quantile(kld_, 0.5);
    s.kld_p99 = quantile(kld_, 0.99);
    s.same_top_mean = mean_of(same_top_);
    s.same_top_stderr = stderr_of(same_top_);
    s.delta_p_mean = mean_of(delta_p_);
    s.delta_p_stderr = stderr_of(delta_p_);
    double sq = 0;
    for (double d : delta_p_) sq += d * d;
    s.delta_p_rms = std::sqrt(sq / static_cast<double>(delta_p_.size()));
    s.delta_p_min = *std::min_element(delta_p_.begin(), delta_p_.end());
    s.delta_p_max = *std::max_element(delta_p_.begin(), delta_p_.end());
    s.base_top_mass = mean_of(top_mass_);
    s.ppl_base = std::exp(mean_of(nll_base_));
    s.ppl = std::exp(mean_of(nll_));
    std::vector<double> diff(nll_.size());
    for (size_t i = 0; i < nll_.size(); ++i) diff[i] = nll_[i] - nll_base_[i];
    s.ln_ppl_ratio = mean_of(diff);
    s.ln_ppl_ratio_stderr = stderr_of(diff);
    return s;
}

}  // namespace moeserve::cli
