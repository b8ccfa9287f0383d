// `moeserve generate`: offline generation through the engine (EngineCore, as serve's ranks run
// it): one prompt, streamed to stdout as its tokens come out, then a line with prefill and
// decode speed; or, with --input/--output, a JSON-lines file of requests (generate_batch.h).
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>

#include "moeserve/cli/model_files.h"
#include "moeserve/cli/commands.h"
#include "moeserve/cli/engine_flags.h"
#include "moeserve/cli/generate_batch.h"
#include "moeserve/cli/generation_config.h"
#include "moeserve/cli/serve_layout.h"
#include "moeserve/core/error.h"
#include "moeserve/ipc/request_validation.h"
#include "moeserve/serve/engine_request.h"
#include "moeserve/serve/output_processor.h"
#include "moeserve/tokenizer/chat_prompt.h"
#include "moeserve/tokenizer/chat_template/chat_template.h"
#include "moeserve/tokenizer/tokenizer.h"

namespace moeserve::cli {

namespace {

struct GenerateOptions {
    std::string prompt;
    bool chat = false;
    int max_tokens = 64;
    float temperature = 0.0f;
    float top_p = 1.0f;
    int top_k = 0;
    float min_p = 0.0f;
    bool ignore_eos = false;
    bool max_num_seqs_given = false;  // single-prompt mode sizes the KV cache for one sequence unless told
    GenerateBatchOptions batch;       // --input / --output mode; batch.engine: the engine's flags (both modes)
    bool no_progress = false;
    int warmup = 0;  // untimed runs of the prompt first (single-prompt mode)
};

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

std::vector<int32_t> prompt_tokens(const GenerateOptions& o, const tokenizer::Tokenizer& tok) {
    if (!o.chat) return tok.encode(o.prompt, /*add_special_tokens=*/true);
    if (!tok.chat_template()) {
        raise(ErrorCode::kInvalidArgument, "--chat: {}/tokenizer_config.json has no chat_template",
              o.batch.engine.model);
    }
    const auto tmpl = tokenizer::ChatTemplate::parse(*tok.chat_template());
    const nlohmann::ordered_json messages = nlohmann::ordered_json::array({{{"role", "user"}, {"content", o.prompt}}});
    return tokenizer::encode_chat_prompt(tok, tmpl, messages, /*add_generation_prompt=*/true);
}

// `runs` untimed runs of the request before the timed one, as llama-bench warms up: the first
// forward of a process also grows its buffers and touches its weights' pages. Two tokens each (a
// prefill and a decode step), each under its own cache salt, so no run reuses another's KV blocks
// (with one salt, runs 2..K found their prompt cached and ran no prefill) and the timed run none.
void warm_up(OfflineEngine& e, const ipc::AddRequest& add, int runs) {
    for (int i = 0; i < runs; ++i) {
        ipc::AddRequest w = add;
        w.request_id = fmt::format("warmup-{}", i);
        w.sampling.max_tokens = std::min(w.sampling.max_tokens, 2);
        w.sampling.cache_salt = fmt::format("moeserve-generate-warmup-{}", i);
        e.core->add_request(w);
        while (e.core->has_unfinished_requests()) e.core->step();
    }
}

// One request through the engine: the prompt, then each step's new text as it comes out.
int run_generate(const GenerateOptions& o, const CheckedEngineOptions& checked) {
    const model::ModelSource& source = checked.source;
    EngineOptions eo = o.batch.engine;
    if (!o.max_num_seqs_given) eo.max_num_seqs = 1;  // one sequence: no KV blocks for others
    const int threads = offline_threads(eo);
    ThreadPool pool(threads);
    const auto load_start = Clock::now();
    const auto tok = load_model_tokenizer(eo.tokenizer, source);
    OfflineEngine e = load_offline_engine(eo, checked, pool);
    const double load_secs = seconds_since(load_start);
    std::fprintf(stderr, "moeserve: quantization: %s\n", e.model->info().quantization.c_str());

    const std::vector<int32_t> prompt = prompt_tokens(o, tok);
    // The server's builder of engine requests; the request's stream is Rng(--seed).
    serve::openai::GenerationParams params;
    params.temperature = o.temperature;
    params.top_p = o.top_p;
    params.top_k = o.top_k;
    params.min_p = o.min_p;
    params.max_tokens = o.max_tokens;
    params.seed = eo.seed;
    serve::openai::ModelLimits limits;
    limits.max_model_len = eo.max_model_len;
    serve::EngineRequestRules rules;
    rules.limits = &limits;
    ipc::AddRequest add = serve::choice_request(serve::build_engine_request(params, prompt, rules), params, 0, "0");
    // The request's rules and its stop ids (the EOS set unless --ignore-eos): ipc::validate_request.
    try {
        add = ipc::validate_request(
            std::move(add), o.ignore_eos,
            {.max_model_len = eo.max_model_len,
             .vocab_size = e.model->info().vocab_size,
             .eos_token_ids = model_eos_token_ids(source.config.json(), eo.model, tok.eos_token_id(),
                                                  read_generation_config("auto", eo.model, ""))});
    } catch (const ipc::InvalidRequest& err) {
        std::string flag = err.param();
        std::replace(flag.begin(), flag.end(), '_', '-');
        raise(ErrorCode::kInvalidArgument, "{} (--{})", err.what(), flag);
    }

    warm_up(e, add, o.warmup);
    serve::OutputProcessor processor(tok);
    processor.add_request(add.request_id, serve::OutputOptions{});
    e.core->add_request(add);
    std::fputs(o.prompt.c_str(), stdout);
    std::fflush(stdout);
    const auto prefill_start = Clock::now();
    auto decode_start = prefill_start;
    int64_t decode_expert_bytes = 0;  // routed expert bytes read before the decode
    double prefill_secs = 0;
    bool first = true;
    int generated = 0;  // the stop token not counted
    std::string finish = "length";
    while (e.core->has_unfinished_requests()) {
        const engine::StepOutcome step = e.core->step();
        for (const auto& d : processor.process(step.outputs).deltas) {
            if (first && !d.token_ids.empty()) {  // the first token comes from the prefill's logits
                prefill_secs = seconds_since(prefill_start);
                decode_start = Clock::now();
                decode_expert_bytes = e.model->routed_expert_bytes();
                first = false;
            }
            std::fputs(d.text.c_str(), stdout);
            std::fflush(stdout);
            generated += static_cast<int>(d.token_ids.size());
            if (!d.finished) continue;
            if (d.finish_reason == ipc::FinishReason::kError || d.finish_reason == ipc::FinishReason::kAbort)
                raise(ErrorCode::kInvalidArgument, "the engine rejected the request: {}", d.error);
            if (d.stop_token_id) --generated;
            if (d.finish_reason == ipc::FinishReason::kStop) finish = "stop";
        }
    }
    const double decode_secs = seconds_since(decode_start);
    const int decode_steps = std::max(generated - 1, 0);
    std::printf("\n");
    std::fprintf(
        stderr,
        "generate: load %.2f s | prompt %zu tokens, prefill %.1f tok/s | %d tokens generated, decode %.1f "
        "tok/s | finish=%s | threads=%d%s%s%s\n",
        load_secs, prompt.size(), static_cast<double>(prompt.size()) / prefill_secs, generated,
        decode_steps > 0 ? decode_steps / decode_secs : 0.0, finish.c_str(), threads,
        speculation_summary(e.core->stats()).c_str(),
        expert_bytes_summary(e.model->routed_expert_bytes() - decode_expert_bytes, decode_steps, "decoded token")
            .c_str(),
        decode_bytes_summary(e.model->info()).c_str());
    return 0;
}

int run_generate_command(GenerateOptions& o) {
    // as serve checks them: the same fault, the same words
    const CheckedEngineOptions checked = check_engine_options(o.batch.engine);
    if (o.batch.input.empty() == o.prompt.empty()) {
        raise(ErrorCode::kInvalidArgument, "generate needs either --prompt or --input (with --output), not {}",
              o.prompt.empty() ? "neither" : "both");
    }
    if (!o.prompt.empty()) return run_generate(o, checked);
    if (o.warmup > 0) raise(ErrorCode::kInvalidArgument, "--warmup times --prompt; it does not apply to --input");
    if (o.batch.output.empty()) raise(ErrorCode::kInvalidArgument, "--input needs --output FILE");
    o.batch.progress = !o.no_progress;
    return run_generate_batch(o.batch, checked);
}

}  // namespace

void add_generate_command(CLI::App& app, Action* action) {
    auto o = std::make_shared<GenerateOptions>();
    EngineOptions& e = o->batch.engine;
    e = engine_defaults(EngineCommand::kGenerate);
    CLI::App* sub = app.add_subcommand("generate", "Generate a completion offline (no server)");
    add_engine_flags(sub, e, EngineCommand::kGenerate);
    CLI::Option* max_num_seqs = sub->get_option("--max-num-seqs");
    sub->add_option("--prompt", o->prompt, "prompt text (single-prompt mode)");
    sub->add_option("--input", o->batch.input,
                    "JSON lines of requests, each a /v1/completions body with its prompt as \"prompt\" (text or "
                    "token ids), \"prompt_token_ids\" or chat \"messages\": the server's sampling fields (n, seed, "
                    "stop, logprobs, logit_bias, bad_words, ...; docs/serving.md) (batch mode through the engine)");
    sub->add_option("--output", o->batch.output, "JSON lines of results, in input order (batch mode)");
    sub->add_flag("--no-progress", o->no_progress, "no progress bar on stderr");
    sub->add_flag("--chat", o->chat, "render the prompt as a user message with the model's chat template");
    sub->add_option("--max-tokens", o->max_tokens, "tokens to generate")->capture_default_str();
    sub->add_option("--temperature", o->temperature, "0 = greedy")->capture_default_str();
    sub->add_option("--top-p", o->top_p)->capture_default_str();
    sub->add_option("--top-k", o->top_k, "0 = off")->capture_default_str();
    sub->add_option("--min-p", o->min_p)->capture_default_str();
    sub->add_flag("--ignore-eos", o->ignore_eos, "keep generating after an end-of-sequence token");
    sub->add_option("--warmup", o->warmup,
                    "untimed runs of the prompt (two tokens each) before the timed one, like llama-bench's "
                    "warmup (single-prompt mode)")
        ->capture_default_str()
        ->check(CLI::Range(0, 100));
    sub->callback([o, action, max_num_seqs] {
        o->max_num_seqs_given = max_num_seqs->count() > 0;
        *action = [o] { return run_generate_command(*o); };
    });
}

}  // namespace moeserve::cli
