// `moeserve generate`: offline generation for one prompt, streamed to stdout, then a line with
// prefill and decode speed; or, with --input/--output, a JSON-lines file of requests through the
// batched engine (generate_batch.h).
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <thread>

#include "moeserve/cli/commands.h"
#include "moeserve/cli/generate_batch.h"
#include "moeserve/cli/generation_config.h"
#include "moeserve/cli/serve_layout.h"
#include "moeserve/core/error.h"
#include "moeserve/core/rng.h"
#include "moeserve/ipc/request_validation.h"
#include "moeserve/kernels/cpu/sample.h"
#include "moeserve/model/registry.h"
#include "moeserve/model/sequence_runner.h"
#include "moeserve/tokenizer/chat_template/chat_template.h"
#include "moeserve/tokenizer/detokenizer.h"
#include "moeserve/tokenizer/tokenizer.h"

namespace moeserve::cli {

namespace {

struct GenerateOptions {
    std::string model;
    std::string prompt;
    bool chat = false;
    int max_tokens = 64;
    float temperature = 0.0f;
    float top_p = 1.0f;
    int top_k = 0;
    float min_p = 0.0f;
    uint64_t seed = 0;
    bool ignore_eos = false;
    int threads = 0;
    int64_t max_model_len = 4096;
    int64_t block_size = 16;
    GenerateBatchOptions batch;  // --input / --output mode
    bool no_prefix_caching = false;
    bool prefix_caching_flag = false;
    bool no_progress = false;
    std::string quantization;             // --quantization: "" (as the checkpoint), w8a8, fp8, none
    std::string kv_cache_dtype = "auto";  // --kv-cache-dtype: auto (the checkpoint's: bf16) | bf16 | fp32
};

int run_generate_command(GenerateOptions& o) {
    if (o.batch.input.empty() == o.prompt.empty()) {
        raise(ErrorCode::kInvalidArgument, "generate needs either --prompt or --input (with --output), not {}",
              o.prompt.empty() ? "neither" : "both");
    }
    if (o.prompt.empty()) {
        if (o.batch.output.empty()) raise(ErrorCode::kInvalidArgument, "--input needs --output FILE");
        o.batch.model = o.model;
        o.batch.engine.max_model_len = o.max_model_len;
        o.batch.engine.block_size = static_cast<int32_t>(o.block_size);
        o.batch.engine.seed = o.seed;
        o.batch.engine.threads = o.threads;
        o.batch.engine.quantization = o.quantization;
        o.batch.engine.kv_cache_dtype = o.kv_cache_dtype;
        o.batch.engine.enable_prefix_caching = !o.no_prefix_caching;
        o.batch.progress = !o.no_progress;
        return run_generate_batch(o.batch);
    }
    return -1;  // single-prompt mode
}

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

std::vector<int32_t> prompt_tokens(const GenerateOptions& o, const tokenizer::Tokenizer& tok) {
    if (!o.chat) return tok.encode(o.prompt, /*add_special_tokens=*/true);
    if (!tok.chat_template()) {
        raise(ErrorCode::kInvalidArgument, "--chat: {}/tokenizer_config.json has no chat_template", o.model);
    }
    const auto tmpl = tokenizer::ChatTemplate::parse(*tok.chat_template());
    nlohmann::ordered_json extra = nlohmann::ordered_json::object();
    if (tok.bos_token()) extra["bos_token"] = *tok.bos_token();
    if (tok.eos_token()) extra["eos_token"] = *tok.eos_token();
    const nlohmann::ordered_json messages = nlohmann::ordered_json::array({{{"role", "user"}, {"content", o.prompt}}});
    // As transformers' apply_chat_template: the template adds any BOS itself.
    return tok.encode(tokenizer::render_chat(tmpl, messages, true, extra), /*add_special_tokens=*/false);
}

int run_generate(const GenerateOptions& o) {
    const int threads = o.threads > 0 ? o.threads : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
    ThreadPool pool(threads);
    const auto load_start = Clock::now();
    const auto tok = tokenizer::Tokenizer::from_dir(o.model);
    auto model = model::load_model(
        o.model, pool,
        model::LoadOptions{
            .max_model_len = o.max_model_len, .quantization = o.quantization, .kv_cache_dtype = o.kv_cache_dtype});
    const double load_secs = seconds_since(load_start);
    std::fprintf(stderr, "moeserve: quantization: %s\n", model->info().quantization.c_str());

    const std::vector<int32_t> prompt = prompt_tokens(o, tok);
    // The request's rules and its stop ids (the EOS set unless --ignore-eos): ipc::validate_request.
    ipc::AddRequest request;
    request.prompt_token_ids = prompt;
    request.sampling.temperature = o.temperature;
    request.sampling.top_p = o.top_p;
    request.sampling.top_k = o.top_k;
    request.sampling.min_p = o.min_p;
    request.sampling.max_tokens = o.max_tokens;
    try {
        request = ipc::validate_request(
            std::move(request), o.ignore_eos,
            {.max_model_len = o.max_model_len,
             .vocab_size = model->info().vocab_size,
             .eos_token_ids = model_eos_token_ids(read_model_config(o.model), o.model, tok.eos_token_id(),
                                                  read_generation_config("auto", o.model, ""))});
    } catch (const ipc::InvalidRequest& e) {
        std::string flag = e.param();
        std::replace(flag.begin(), flag.end(), '_', '-');
        raise(ErrorCode::kInvalidArgument, "{} (--{})", e.what(), flag);
    }
    const std::vector<int32_t>& stop_ids = request.sampling.stop_token_ids;

    model::SequenceRunner runner(*model, o.max_model_len, o.block_size);
    kernels::cpu::SamplingSettings sampling{o.temperature, o.top_k, o.top_p, o.min_p};
    kernels::cpu::SampleScratch scratch;
    Rng rng(o.seed);
    tokenizer::IncrementalDetokenizer detok(tok, /*skip_special_tokens=*/true);
    const int64_t vocab = model->info().vocab_size;

    const auto prefill_start = Clock::now();
    std::vector<float> logits = runner.append(prompt);
    const double prefill_secs = seconds_since(prefill_start);
    std::fputs(o.prompt.c_str(), stdout);
    std::fflush(stdout);

    const auto decode_start = Clock::now();
    int generated = 0;
    std::string finish = "length";
    for (; generated < o.max_tokens; ++generated) {
        const int32_t next = kernels::cpu::sample_token(logits.data(), vocab, sampling, rng, scratch);
        if (std::find(stop_ids.begin(), stop_ids.end(), next) != stop_ids.end()) {
            finish = "stop";
            break;
        }
        std::fputs(detok.push(next).c_str(), stdout);
        std::fflush(stdout);
        if (generated + 1 < o.max_tokens) logits = runner.append(std::span<const int32_t>(&next, 1));
    }
    std::fputs(detok.flush().c_str(), stdout);
    const double decode_secs = seconds_since(decode_start);
    // The first generated token comes from the prefill's logits; decode steps = generated - 1.
    const int decode_steps = std::max(generated - 1, 0);
    std::printf("\n");
    std::fprintf(stderr,
                 "generate: load %.2f s | prompt %zu tokens, prefill %.1f tok/s | %d tokens generated, decode %.1f "
                 "tok/s | finish=%s | threads=%d\n",
                 load_secs, prompt.size(), static_cast<double>(prompt.size()) / prefill_secs, generated,
                 decode_steps > 0 ? decode_steps / decode_secs : 0.0, finish.c_str(), threads);
    return 0;
}

}  // namespace

void add_generate_command(CLI::App& app, Action* action) {
    auto o = std::make_shared<GenerateOptions>();
    CLI::App* sub = app.add_subcommand("generate", "Generate a completion offline (no server)");
    sub->add_option("--model", o->model, "Hugging Face model directory")->required();
    sub->add_option("--prompt", o->prompt, "prompt text (single-prompt mode)");
    sub->add_option("--input", o->batch.input,
                    "JSON lines of requests: {\"prompt\"|\"prompt_token_ids\"|\"messages\", max_tokens, temperature, "
                    "top_p, top_k, min_p, seed, n, stop, stop_token_ids, ignore_eos, min_tokens, presence_penalty, "
                    "frequency_penalty, repetition_penalty, logprobs, prompt_logprobs, skip_special_tokens, "
                    "include_stop_str_in_output} (batch mode through the engine)");
    sub->add_option("--output", o->batch.output, "JSON lines of results, in input order (batch mode)");
    sub->add_option("--max-num-seqs", o->batch.engine.max_num_seqs, "running requests at once")->capture_default_str();
    sub->add_option("--max-num-batched-tokens", o->batch.engine.max_num_batched_tokens, "tokens per engine step")
        ->capture_default_str();
    sub->add_option("--gpu-memory-utilization", o->batch.engine.gpu_memory_utilization,
                    "share of total RAM for weights + KV cache")
        ->capture_default_str();
    sub->add_option("--kv-cache-memory", o->batch.engine.kv_cache_memory, "KV cache bytes (overrides the utilization)");
    sub->add_flag("--enable-prefix-caching", o->prefix_caching_flag, "reuse KV blocks of shared prefixes (default)");
    sub->add_flag("--no-enable-prefix-caching", o->no_prefix_caching, "turn prefix caching off");
    sub->add_flag("--no-progress", o->no_progress, "no progress bar on stderr");
    sub->add_flag("--chat", o->chat, "render the prompt as a user message with the model's chat template");
    sub->add_option("--max-tokens", o->max_tokens, "tokens to generate")->capture_default_str();
    sub->add_option("--temperature", o->temperature, "0 = greedy")->capture_default_str();
    sub->add_option("--top-p", o->top_p)->capture_default_str();
    sub->add_option("--top-k", o->top_k, "0 = off")->capture_default_str();
    sub->add_option("--min-p", o->min_p)->capture_default_str();
    sub->add_option("--seed", o->seed)->capture_default_str();
    sub->add_flag("--ignore-eos", o->ignore_eos, "keep generating after an end-of-sequence token");
    sub->add_option("--threads", o->threads, "compute threads (default: all cores)");
    sub->add_option("--quantization", o->quantization,
                    "w8a8 (int8 weights + per-token int8 activations; quantizes bf16/FP8 checkpoints at load), "
                    "w8a8-all (lm_head in int8 too), fp8 (FP8 checkpoint -> bf16), none, ascend (a ModelSlim "
                    "checkpoint, as stored); default: as the checkpoint (quant_model_description.json, else "
                    "config.json's quantization_config)");
    sub->add_option("--kv-cache-dtype", o->kv_cache_dtype,
                    "auto (the checkpoint's dtype: bf16) | bf16 | fp32: element type of the KV / MLA latent cache")
        ->capture_default_str();
    sub->add_option("--max-model-len", o->max_model_len, "longest sequence (prompt + output)")->capture_default_str();
    sub->add_option("--block-size", o->block_size, "KV cache block size in tokens")->capture_default_str();
    sub->callback([o, action] {
        *action = [o] {
            const int rc = run_generate_command(*o);
            return rc >= 0 ? rc : run_generate(*o);
        };
    });
}

}  // namespace moeserve::cli
