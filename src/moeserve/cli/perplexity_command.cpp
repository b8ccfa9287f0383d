// `moeserve perplexity`: llama.cpp's llama-perplexity through moeserve's engine. The text is cut
// into chunks (perplexity_stats.h); each chunk is one request with prompt_logprobs, run by the
// in-process EngineCore `generate` uses, so every precision, KV cache dtype and load-time
// quantization flag applies; or, with --url, by a deployed server in any TP/DP/EP layout
// (perplexity_remote.h). Prints the perplexity with its standard error and tokens/s; with
// --kl-divergence-base FILE it saves each scored position's top log-probabilities, and with
// --kl-divergence too it compares this run against that file instead.
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>

#include "moeserve/cli/commands.h"
#include "moeserve/cli/generate_batch.h"
#include "moeserve/cli/model_files.h"
#include "moeserve/cli/perplexity_remote.h"
#include "moeserve/cli/perplexity_stats.h"
#include "moeserve/cli/serve_layout.h"
#include "moeserve/core/error.h"
#include "moeserve/ipc/request_validation.h"
#include "moeserve/tokenizer/tokenizer.h"

namespace moeserve::cli {

namespace {

constexpr int32_t kBaseTopK = 64;  // log-probabilities saved per position in a base file

struct PerplexityOptions {
    EngineOptions engine;
    std::string file;
    int32_t ctx = 512;
    int32_t batch = 2048;
    int32_t max_chunks = -1;
    std::string kl_base;
    bool kl_divergence = false;
    RemotePerplexityTarget remote;  // url set: the chunks run on that server
};

using Clock = std::chrono::steady_clock;

// What the run does with each scored position besides the perplexity.
struct Sinks {
    std::unique_ptr<BaseWriter> writer;  // saving a base
    std::unique_ptr<BaseFile> base;      // comparing against one
    KlStats kl;
};

// The chunks of the text, after the one-line refusals (missing file, too short, ctx too long).
std::vector<std::vector<int32_t>> read_chunks(const PerplexityOptions& o, const tokenizer::Tokenizer& tok,
                                              int32_t max_model_len) {
    if (!std::filesystem::is_regular_file(o.file)) raise(ErrorCode::kNotFound, "--file {}: no such file", o.file);
    if (o.ctx > max_model_len) {
        raise(ErrorCode::kInvalidArgument, "--ctx {} exceeds --max-model-len {}: give a smaller --ctx", o.ctx,
              max_model_len);
    }
    const std::vector<int32_t> bos = tok.encode("", /*add_special_tokens=*/true);
    std::optional<int32_t> first;
    if (!bos.empty()) first = bos[0];
    auto chunks = perplexity_chunks(tok.encode(read_text_file(o.file), /*add_special_tokens=*/true), o.ctx, first);
    if (o.max_chunks > 0 && static_cast<size_t>(o.max_chunks) < chunks.size()) chunks.resize(o.max_chunks);
    return chunks;
}

Sinks make_sinks(const PerplexityOptions& o, const std::vector<std::vector<int32_t>>& chunks, int32_t vocab) {
    Sinks s;
    if (o.kl_base.empty()) return s;
    BaseHeader h{.vocab = vocab,
                 .ctx = o.ctx,
                 .num_chunks = static_cast<int32_t>(chunks.size()),
                 .top_k = std::min(kBaseTopK, vocab),
                 .tokens = {}};
    for (const auto& c : chunks) h.tokens.insert(h.tokens.end(), c.begin(), c.end());
    if (!o.kl_divergence) {
        s.writer = std::make_unique<BaseWriter>(o.kl_base, h);
        return s;
    }
    s.base = std::make_unique<BaseFile>(read_base_file(o.kl_base));
    const BaseHeader& b = s.base->header;
    if (b.vocab != h.vocab || b.ctx != h.ctx || b.tokens != h.tokens) {
        raise(ErrorCode::kInvalidArgument,
              "--kl-divergence-base {} was made from other tokens (vocab {}, ctx {}, {} chunks; this run: vocab {}, "
              "ctx {}, {} chunks): use the same --file, --ctx, --chunks and tokenizer",
              o.kl_base, b.vocab, b.ctx, b.num_chunks, h.vocab, h.ctx, h.num_chunks);
    }
    return s;
}

// One finished chunk: its scored positions into the statistics and the sinks.
void score_chunk(size_t chunk, const std::vector<ipc::TokenLogprobs>& lps, int32_t ctx, NllStats& nll, Sinks& s) {
    MOESERVE_CHECK(static_cast<int32_t>(lps.size()) == ctx - 1, "chunk {}: {} prompt logprobs for ctx {}", chunk,
                   lps.size(), ctx);
    const int32_t first = first_scored(ctx);
    for (int32_t j = first; j < ctx - 1; ++j) {
        const ipc::TokenLogprobs& lp = lps[static_cast<size_t>(j)];
        nll.add(-static_cast<double>(lp.logprob));
        if (s.writer) s.writer->add(lp);
        if (s.base) {
            const size_t at = chunk * static_cast<size_t>(num_scored(ctx)) + static_cast<size_t>(j - first);
            s.kl.add(s.base->positions[at], lp);
        }
    }
}

void print_kl(const KlStats::Summary& k) {
    fmt::print("KL divergence against the base ({} positions; the base's top {} hold {:.4f} of the mass on average)\n",
               k.count, kBaseTopK, k.base_top_mass);
    fmt::print("  PPL(base) {:.4f}  PPL(this run) {:.4f}  mean ln(PPL(this)/PPL(base)) {:.6g} +/- {:.3g}\n", k.ppl_base,
               k.ppl, k.ln_ppl_ratio, k.ln_ppl_ratio_stderr);
    fmt::print("  mean KLD {:.6g} +/- {:.3g}  median {:.6g}  99% {:.6g}  max {:.6g}\n", k.kld_mean, k.kld_stderr,
               k.kld_median, k.kld_p99, k.kld_max);
    fmt::print("  same top token {:.3f} +/- {:.3f} %\n", 100 * k.same_top_mean, 100 * k.same_top_stderr);
    fmt::print("  delta p mean {:.4f} +/- {:.4f} %  RMS {:.4f} %  min {:.4f} %  max {:.4f} %\n", 100 * k.delta_p_mean,
               100 * k.delta_p_stderr, 100 * k.delta_p_rms, 100 * k.delta_p_min, 100 * k.delta_p_max);
}

using ChunkDone = std::function<void(size_t, std::vector<ipc::TokenLogprobs>)>;

// The chunks through the in-process engine, batch / ctx at once.
void run_local_chunks(EngineOptions eo, const CheckedEngineOptions& checked,
                      const std::vector<std::vector<int32_t>>& chunks, int32_t ctx, int32_t batch, int32_t top,
                      const ChunkDone& on_done) {
    // A chunk is a prompt of ctx tokens plus the one token a request must generate.
    const int32_t num_seqs = std::max(1, batch / ctx);
    eo.max_model_len = ctx + 1;
    eo.max_num_seqs = num_seqs;
    eo.max_num_batched_tokens = std::max(batch, 1);
    eo.enable_prefix_caching = false;
    ThreadPool pool(offline_threads(eo));
    OfflineEngine e = load_offline_engine(eo, checked, pool);
    const auto vocab = static_cast<int32_t>(e.model->info().vocab_size);
    std::fprintf(stderr, "perplexity: %zu chunks of %d tokens, %d at once; quantization: %s\n", chunks.size(), ctx,
                 num_seqs, e.model->info().quantization.c_str());
    const ipc::RequestLimits limits{.max_model_len = eo.max_model_len, .vocab_size = vocab, .max_logprobs = vocab};
    size_t next_submit = 0, in_flight = 0, finished = 0;
    while (finished < chunks.size()) {
        for (; in_flight < static_cast<size_t>(num_seqs) && next_submit < chunks.size(); ++next_submit, ++in_flight) {
            ipc::AddRequest add{std::to_string(next_submit), chunks[next_submit], {}};
            add.sampling.max_tokens = 1;
            add.sampling.temperature = 0;
            add.sampling.prompt_logprobs = top;
            e.core->add_request(ipc::validate_request(std::move(add), /*ignore_eos=*/true, limits));
        }
        for (ipc::RequestOutput& out : e.core->step().outputs) {
            if (out.finish_reason == ipc::FinishReason::kError || out.finish_reason == ipc::FinishReason::kAbort)
                raise(ErrorCode::kInvalidArgument, "the engine rejected chunk {}: {}", out.request_id, out.error);
            if (!out.prompt_logprobs) continue;
            on_done(std::stoul(out.request_id), std::move(*out.prompt_logprobs));
            --in_flight;
            ++finished;
        }
    }
}

int run_perplexity(PerplexityOptions o) {
    EngineOptions& eo = o.engine;
    if (o.kl_divergence && o.kl_base.empty())
        raise(ErrorCode::kInvalidArgument, "--kl-divergence needs --kl-divergence-base FILE");
    if (o.kl_divergence && !o.remote.url.empty()) {
        raise(ErrorCode::kInvalidArgument,
              "--kl-divergence needs every token's log-probability at every position, too much for --url: compare "
              "in-process (the same flags without --url); --url can save a base");
    }
    // In-process, the engine's flags and model are checked as generate checks them; with --url the
    // model folder only lends its config and tokenizer.
    const CheckedEngineOptions checked =
        o.remote.url.empty() ? check_engine_options(eo) : CheckedEngineOptions{model::open_model_source(eo.model), {}};
    const model::ModelSource& source = checked.source;
    const nlohmann::json& config = source.config.json();
    const int32_t max_model_len = o.remote.url.empty() ? resolve_max_model_len(eo, config) : o.ctx + 1;
    // a GGUF file's tokenizer is its metadata (--tokenizer overrides), as for generate and serve
    const auto tok = load_model_tokenizer(eo.tokenizer, source);
    const std::vector<std::vector<int32_t>> chunks = read_chunks(o, tok, max_model_len);
    const auto vocab = config.value("vocab_size", int32_t{0});
    Sinks sinks = make_sinks(o, chunks, vocab);
    // prompt_logprobs: the token's own log-probability always; a base needs its top k, a
    // comparison every token's.
    const int32_t top = sinks.base ? vocab : sinks.writer ? std::min(kBaseTopK, vocab) : 0;

    NllStats nll;
    std::map<size_t, std::vector<ipc::TokenLogprobs>> done;  // finished chunks waiting for their turn
    size_t next_score = 0;
    const ChunkDone on_done = [&](size_t chunk, std::vector<ipc::TokenLogprobs> lps) {
        done[chunk] = std::move(lps);
        while (done.count(next_score) != 0) {  // in chunk order: the base file is chunk-major
            score_chunk(next_score, done[next_score], o.ctx, nll, sinks);
            done.erase(next_score++);
            std::fprintf(stderr, "[%zu]%.4f%s", next_score, nll.ppl(), next_score == chunks.size() ? "\n" : ",");
        }
    };
    const auto start = Clock::now();
    if (o.remote.url.empty()) {
        run_local_chunks(eo, checked, chunks, o.ctx, o.batch, top, on_done);
    } else {
        std::fprintf(stderr, "perplexity: %zu chunks of %d tokens, %d at once, on %s\n", chunks.size(), o.ctx,
                     std::max(1, o.batch / o.ctx), o.remote.url.c_str());
        run_remote_chunks(o.remote, chunks, std::max(1, o.batch / o.ctx), top, on_done);
    }
    const double secs = std::chrono::duration<double>(Clock::now() - start).count();
    if (sinks.writer) sinks.writer->close();
    fmt::print("{} chunks x {} tokens, {} scored: PPL = {:.4f} +/- {:.4f}\n", chunks.size(), o.ctx, nll.count,
               nll.ppl(), nll.ppl_stderr());
    fmt::print("{:.1f} tokens/s ({} tokens in {:.2f} s)\n", static_cast<double>(chunks.size()) * o.ctx / secs,
               chunks.size() * static_cast<size_t>(o.ctx), secs);
    if (sinks.writer) fmt::print("saved the top {} log-probabilities per position to {}\n", kBaseTopK, o.kl_base);
    if (sinks.base) print_kl(sinks.kl.summary());
    return 0;
}

}  // namespace

void add_perplexity_command(CLI::App& app, Action* action) {
    auto o = std::make_shared<PerplexityOptions>();
    EngineOptions& e = o->engine;
    CLI::App* sub = app.add_subcommand("perplexity", "Perplexity of a text through the engine (llama-perplexity)");
    sub->add_option("--model", e.model, "Hugging Face model directory")->required();
    sub->add_option("--file,-f", o->file, "the text (UTF-8)")->required();
    sub->add_option("--ctx,-c", o->ctx, "tokens per chunk; the second half of each is scored")->capture_default_str();
    sub->add_option("--batch,-b", o->batch, "tokens per engine step; batch / ctx chunks run at once")
        ->capture_default_str();
    sub->add_option("--chunks", o->max_chunks, "evaluate the first N chunks only (-1: all)")->capture_default_str();
    sub->add_option("--kl-divergence-base", o->kl_base,
                    "save the top log-probabilities of this run to FILE (or, with --kl-divergence, compare with it)");
    sub->add_flag("--kl-divergence", o->kl_divergence,
                  "compare this run with --kl-divergence-base: KL divergence, top-token agreement, delta p");
    sub->add_option("--url", o->remote.url,
                    "run the chunks on this `moeserve serve` (http://host:port), in whatever TP/DP/EP layout and "
                    "precision it serves; --model still names the tokenizer, and the engine flags below do not apply");
    sub->add_option("--api-key", o->remote.api_key, "with --url: the server's API key");
    sub->add_option("--served-model-name", o->remote.model, "with --url: the model to ask for (default: the first)");
    sub->add_option("--threads", e.threads, "compute threads (default: all cores)");
    sub->add_option("--quantization,-q", e.quantization,
                    "w8a8 | w8a8-all | fp8 | none | ascend; default: as the checkpoint (see generate --help)");
    sub->add_option("--kv-cache-dtype", e.kv_cache_dtype, "auto | bf16 | fp32 | fp8 (experimental)")
        ->capture_default_str();
    sub->add_option("--dtype", e.dtype, "auto | bfloat16 | float32 (weights widened at load)")->capture_default_str();
    sub->add_option("--max-model-len", e.max_model_len,
                    "longest sequence the model takes (default: min(max_position_embeddings, 4096)); --ctx <= it");
    sub->add_option("--kv-cache-memory", e.kv_cache_memory, "KV cache size, e.g. 1G");
    sub->add_option("--block-size", e.block_size, "KV cache block size in tokens")->capture_default_str();
    sub->callback([o, action] { *action = [o] { return run_perplexity(*o); }; });
}

}  // namespace moeserve::cli
