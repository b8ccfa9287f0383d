// Offline batch generation: parse the JSON-lines input at the edge into engine requests (token
// ids + sampling) and text options, drive EngineCore::step until all finish, and write the
// outputs in input order with a progress bar and a throughput line on stderr.
#include "moeserve/cli/model_files.h"
#include "moeserve/cli/generate_batch.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <thread>

#include "moeserve/cli/generation_config.h"
#include "moeserve/cli/serve_layout.h"
#include "moeserve/cli/speculative_config.h"
#include "moeserve/core/error.h"
#include "moeserve/engine/engine_core.h"
#include "moeserve/ipc/request_validation.h"
#include "moeserve/model/kv_cache.h"
#include "moeserve/model/registry.h"
#include "moeserve/serve/engine_request.h"
#include "moeserve/serve/openai/parse.h"
#include "moeserve/serve/output_processor.h"
#include "moeserve/tokenizer/chat_prompt.h"
#include "moeserve/tokenizer/chat_template/chat_template.h"
#include "moeserve/tokenizer/tokenizer.h"

namespace moeserve::cli {

namespace {

using Json = nlohmann::ordered_json;
using Clock = std::chrono::steady_clock;

// One input line, parsed.
struct Item {
    Json prompt;  // echoed back: the prompt string, the token ids or the messages
    std::vector<int32_t> prompt_token_ids;
    serve::openai::GenerationParams params;  // as /v1/completions reads its body (openai/parse.h)
    std::string at;                          // file:line, for errors
};

// One of the n samples of an item, as it accumulates.
struct Sample {
    std::string text;
    std::vector<int32_t> token_ids;
    std::vector<ipc::TokenLogprobs> logprobs;
    ipc::FinishReason finish = ipc::FinishReason::kNone;
    std::optional<std::string> stop_string;
    std::optional<int32_t> stop_token_id;
    std::string error;
};

struct ItemResult {
    std::vector<Sample> samples;
    std::optional<std::vector<ipc::TokenLogprobs>> prompt_logprobs;
    int32_t num_prompt_tokens = 0, num_cached_tokens = 0;
};

std::string where(const std::string& file, size_t line) { return fmt::format("{}:{}", file, line); }

// A line's "messages" rendered with the chat template and encoded.
std::vector<int32_t> chat_prompt_tokens(const Json& messages, const tokenizer::Tokenizer& tok, const std::string& at,
                                        const std::optional<tokenizer::ChatTemplate>& tmpl) {
    if (!tmpl)
        raise(ErrorCode::kInvalidArgument, "{}: \"messages\" needs a chat_template in tokenizer_config.json", at);
    if (!messages.is_array()) raise(ErrorCode::kInvalidArgument, "{}: \"messages\" must be an array", at);
    return tokenizer::encode_chat_prompt(tok, *tmpl, messages, /*add_generation_prompt=*/true);
}

// A line as a /v1/completions body (its prompt under "prompt"), read by the routes' reader, so a
// field means here what it means to the server. What a line cannot ask of an offline batch
// (several prompts, echo, streaming, KV transfer, structured outputs) is refused naming the line.
Item parse_item(const Json& j, const tokenizer::Tokenizer& tok, const std::optional<tokenizer::ChatTemplate>& tmpl,
                const serve::openai::ModelLimits& limits, const std::string& at) {
    if (!j.is_object()) raise(ErrorCode::kInvalidArgument, "{}: expected a JSON object, got {}", at, j.type_name());
    const int given = int(j.contains("prompt")) + int(j.contains("prompt_token_ids")) + int(j.contains("messages"));
    if (given != 1) {
        raise(ErrorCode::kInvalidArgument,
              "{}: each line needs exactly one of \"prompt\", \"prompt_token_ids\" or \"messages\"; got {}", at, given);
    }
    Item it;
    it.at = at;
    Json body = j;
    for (const char* key : {"prompt", "prompt_token_ids", "messages"}) {
        if (!j.contains(key)) continue;
        it.prompt = j[key];
        body.erase(key);
        body["prompt"] = std::string_view(key) == "messages" ? Json(chat_prompt_tokens(j[key], tok, at, tmpl)) : j[key];
    }
    serve::openai::CompletionRequest r;
    try {
        r = serve::openai::parse_completion_request(body, limits);
    } catch (const serve::openai::ApiError& e) {
        raise(ErrorCode::kInvalidArgument, "{}: {}", at, e.what());
    }
    if (!r.unknown_fields.empty())
        raise(ErrorCode::kInvalidArgument, "{}: unknown field '{}'", at, r.unknown_fields[0]);
    const auto refuse = [&at](const char* what) {
        raise(ErrorCode::kInvalidArgument, "{}: {} is not supported by generate --input (use `moeserve serve`)", at,
              what);
    };
    if (r.prompts.size() != 1) refuse("a list of prompts (one prompt per line)");
    if (r.echo) refuse("echo");
    if (r.params.stream) refuse("stream");
    if (r.params.kv_transfer.produce || !r.params.kv_transfer.transfers.empty()) refuse("kv_transfer_params");
    if (!r.params.grammar.empty()) refuse("structured output");
    it.params = std::move(r.params);
    serve::openai::PromptInput& prompt = r.prompts[0];
    it.prompt_token_ids = prompt.text ? tok.encode(*prompt.text, true) : std::move(prompt.token_ids);
    serve::truncate_prompt(it.params, it.prompt_token_ids);
    return it;
}

std::vector<Item> read_items(const std::string& path, const tokenizer::Tokenizer& tok,
                             const serve::openai::ModelLimits& limits) {
    std::ifstream in(path);
    if (!in) raise(ErrorCode::kNotFound, "--input {}: cannot open the file", path);
    std::optional<tokenizer::ChatTemplate> tmpl;
    if (tok.chat_template()) tmpl = tokenizer::ChatTemplate::parse(*tok.chat_template());
    std::vector<Item> items;
    std::string line;
    for (size_t n = 1; std::getline(in, line); ++n) {
        if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
        Json j;
        try {
            j = Json::parse(line);
        } catch (const nlohmann::json::parse_error& e) {
            raise(ErrorCode::kInvalidArgument, "{}: not valid JSON ({})", where(path, n), e.what());
        }
        items.push_back(parse_item(j, tok, tmpl, limits, where(path, n)));
    }
    if (items.empty()) raise(ErrorCode::kInvalidArgument, "--input {}: no requests in the file", path);
    return items;
}

// Every line's engine request, checked before any runs: the server's builder and its rules
// (ipc::validate_request against the model), an error naming the line.
std::vector<ipc::AddRequest> engine_requests(const std::vector<Item>& items, const tokenizer::Tokenizer& tok,
                                             const serve::openai::ModelLimits& read_limits,
                                             const ipc::RequestLimits& limits, bool priority_scheduling) {
    std::vector<ipc::AddRequest> adds;
    for (const Item& item : items) {
        if (item.params.priority != 0 && !priority_scheduling) {
            raise(ErrorCode::kInvalidArgument, "{}: priority {} needs --scheduling-policy priority", item.at,
                  item.params.priority);
        }
        serve::EngineRequestRules rules;
        rules.limits = &read_limits;
        rules.bad_words = serve::bad_words_token_ids(tok, item.params.bad_words);
        try {
            adds.push_back(ipc::validate_request(serve::build_engine_request(item.params, item.prompt_token_ids, rules),
                                                 item.params.ignore_eos, limits));
        } catch (const ipc::InvalidRequest& err) {
            raise(ErrorCode::kInvalidArgument, "{}: {}", item.at, err.what());
        }
    }
    return adds;
}

Json logprobs_json(const std::vector<ipc::TokenLogprobs>& lps, const tokenizer::Tokenizer& tok) {
    Json out = Json::array();
    for (const auto& lp : lps) {
        Json top = Json::array();
        for (const auto& [id, logprob] : lp.top) {
            top.push_back({{"token_id", id}, {"token", tok.id_to_token(id).value_or("")}, {"logprob", logprob}});
        }
        out.push_back({{"token_id", lp.token_id},
                       {"token", tok.id_to_token(lp.token_id).value_or("")},
                       {"logprob", lp.logprob},
                       {"rank", lp.rank},
                       {"top_logprobs", top}});
    }
    return out;
}

Json result_json(size_t index, const Item& item, const ItemResult& r, const tokenizer::Tokenizer& tok) {
    Json outputs = Json::array();
    for (size_t i = 0; i < r.samples.size(); ++i) {
        const Sample& s = r.samples[i];
        Json o = {{"index", i}, {"text", s.text}, {"token_ids", s.token_ids}};
        const std::string finish = ipc::finish_reason_name(s.finish);
        o["finish_reason"] = finish.empty() ? Json(nullptr) : Json(finish);
        if (s.stop_string)
            o["stop_reason"] = *s.stop_string;
        else if (s.stop_token_id)
            o["stop_reason"] = *s.stop_token_id;
        if (item.params.logprobs) o["logprobs"] = logprobs_json(s.logprobs, tok);
        if (!s.error.empty()) o["error"] = s.error;
        outputs.push_back(std::move(o));
    }
    Json line = {{"index", index},
                 {"prompt", item.prompt},
                 {"outputs", outputs},
                 {"num_prompt_tokens", r.num_prompt_tokens},
                 {"num_cached_tokens", r.num_cached_tokens}};
    if (r.prompt_logprobs) {
        Json lp = logprobs_json(*r.prompt_logprobs, tok);
        lp.insert(lp.begin(), Json(nullptr));  // the first prompt token has no logprob (as vLLM)
        line["prompt_logprobs"] = lp;
    }
    return line;
}

void draw_progress(size_t done, size_t total, double secs, int64_t out_tokens) {
    constexpr int kWidth = 30;
    const int filled = static_cast<int>(kWidth * done / std::max<size_t>(total, 1));
    std::fprintf(stderr, "\r[%s%s] %zu/%zu requests | %.1f s | %.1f output tok/s ", std::string(filled, '=').c_str(),
                 std::string(kWidth - filled, ' ').c_str(), done, total, secs,
                 secs > 0 ? static_cast<double>(out_tokens) / secs : 0.0);
}

// Sample k of an item's result takes one output delta of its engine request.
void add_delta(ItemResult& r, size_t k, const serve::TextDelta& d) {
    Sample& s = r.samples[k];
    s.text += d.text;
    s.token_ids.insert(s.token_ids.end(), d.token_ids.begin(), d.token_ids.end());
    s.logprobs.insert(s.logprobs.end(), d.logprobs.begin(), d.logprobs.end());
    r.num_prompt_tokens = d.num_prompt_tokens;
    if (k == 0) r.num_cached_tokens = d.num_cached_tokens;
    if (d.prompt_logprobs && k == 0) r.prompt_logprobs = d.prompt_logprobs;
    if (d.finished) {
        s.finish = d.finish_reason;
        s.stop_string = d.stop_string;
        s.stop_token_id = d.stop_token_id;
        s.error = d.error;
    }
}

}  // namespace

int offline_threads(const EngineOptions& o) {
    return o.threads > 0 ? o.threads : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
}

OfflineEngine load_offline_engine(const EngineOptions& o, const CheckedEngineOptions& checked, ThreadPool& pool) {
    OfflineEngine e;
    const model::ModelSource& source = checked.source;
    const engine::SpeculativeConfig& speculative = checked.speculative;
    e.model = model::load_model(source, pool,
                                model::LoadOptions{.max_model_len = o.max_model_len,
                                                   .dtype = o.dtype,
                                                   .quantization = o.quantization,
                                                   .kv_cache_dtype = o.kv_cache_dtype,
                                                   .draft_head = speculative.uses_draft_head()});
    const std::string kv_warning =
        model::kv_cache_dtype_warning(model::parse_kv_cache_dtype(o.kv_cache_dtype, DType::kBF16));
    if (!kv_warning.empty()) std::fprintf(stderr, "moeserve: warning: %s\n", kv_warning.c_str());
    e.config = make_engine_config(o, speculative, e.model->info(), total_ram_bytes());
    e.core = std::make_unique<engine::EngineCore>(*e.model, pool, e.config);
    return e;
}

int run_generate_batch(const GenerateBatchOptions& o, const CheckedEngineOptions& checked) {
    const model::ModelSource& source = checked.source;
    const int threads = offline_threads(o.engine);
    ThreadPool pool(threads);
    const auto tok = load_model_tokenizer(o.engine.tokenizer, source);
    // The reader's limits: token ids, logprobs and lengths are checked per engine request below,
    // once the model is known.
    serve::openai::ModelLimits read_limits;
    read_limits.max_model_len = o.engine.max_model_len;
    read_limits.max_logprobs = std::numeric_limits<int32_t>::max();
    const std::vector<Item> items = read_items(o.input, tok, read_limits);
    std::ofstream out(o.output);
    if (!out) raise(ErrorCode::kIo, "--output {}: cannot create the file", o.output);
    OfflineEngine e = load_offline_engine(o.engine, checked, pool);
    engine::EngineCore& core = *e.core;
    const engine::EngineConfig& config = e.config;
    const model::Model* model = e.model.get();
    std::fprintf(
        stderr, "generate: %zu requests, KV cache %d blocks of %d tokens (%.1f MiB), prefix caching %s\n", items.size(),
        config.num_blocks - 1, config.block_size,
        static_cast<double>(int64_t{config.num_blocks} * config.block_size * model->info().kv_bytes_per_token) /
            (1 << 20),
        config.enable_prefix_caching ? "on" : "off");

    // Every line is checked before any runs; the EOS set (config.json, the tokenizer's EOS,
    // generation_config.json) joins each request's stop ids unless it asks for ignore_eos.
    const ipc::RequestLimits limits{
        .max_model_len = o.engine.max_model_len,
        .vocab_size = model->info().vocab_size,
        .max_logprobs = static_cast<int32_t>(model->info().vocab_size),
        .eos_token_ids = model_eos_token_ids(source.config.json(), o.engine.model, tok.eos_token_id(),
                                             read_generation_config("auto", o.engine.model, ""))};
    const std::vector<ipc::AddRequest> adds =
        engine_requests(items, tok, read_limits, limits, o.engine.scheduling_policy == "priority");
    // n > 1 fans out into n engine requests "<index>-<i>" that share the prompt's blocks.
    serve::OutputProcessor processor(tok);
    std::vector<ItemResult> results(items.size());
    std::unordered_map<std::string, std::pair<size_t, size_t>> owner;  // engine id -> (item, sample)
    int64_t num_input_tokens = 0;
    for (size_t i = 0; i < items.size(); ++i) {
        const serve::openai::GenerationParams& p = items[i].params;
        results[i].samples.resize(static_cast<size_t>(p.n));
        for (int32_t k = 0; k < p.n; ++k) {
            const std::string id = fmt::format("{}-{}", i, k);
            owner[id] = {i, static_cast<size_t>(k)};
            processor.add_request(id,
                                  serve::OutputOptions{p.stop, p.include_stop_str_in_output, p.skip_special_tokens});
            core.add_request(serve::choice_request(adds[i], p, k, id));
            num_input_tokens += static_cast<int64_t>(items[i].prompt_token_ids.size());
        }
    }
    const auto start = Clock::now();
    auto last_draw = start;
    size_t num_done = 0;
    int64_t num_output_tokens = 0;
    const size_t total = owner.size();
    while (core.has_unfinished_requests()) {
        const engine::StepOutcome step = core.step();
        const auto processed = processor.process(step.outputs);
        if (!processed.engine_aborts.empty()) core.abort(ipc::Abort{processed.engine_aborts});
        for (const auto& d : processed.deltas) {
            const auto [item, k] = owner.at(d.request_id);
            add_delta(results[item], k, d);
            num_output_tokens += static_cast<int64_t>(d.token_ids.size());
            num_done += d.finished ? 1 : 0;
        }
        const auto now = Clock::now();
        if (o.progress && (now - last_draw > std::chrono::milliseconds(200) || num_done == total)) {
            draw_progress(num_done, total, std::chrono::duration<double>(now - start).count(), num_output_tokens);
            last_draw = now;
        }
    }
    const double secs = std::chrono::duration<double>(Clock::now() - start).count();
    for (size_t i = 0; i < items.size(); ++i) out << result_json(i, items[i], results[i], tok).dump() << '\n';
    const ipc::Stats st = core.stats();
    if (o.progress) std::fputc('\n', stderr);
    std::fprintf(
        stderr,
        "generate: %zu requests in %.2f s: %.2f requests/s, input %.1f tok/s, output %.1f tok/s | prefix cache "
        "hit rate %.1f%% | %lld preemptions | %lld steps | threads=%d%s%s\n",
        total, secs, static_cast<double>(total) / secs, static_cast<double>(num_input_tokens) / secs,
        static_cast<double>(num_output_tokens) / secs,
        st.prefix_cache_queries > 0
            ? 100.0 * static_cast<double>(st.prefix_cache_hits) / static_cast<double>(st.prefix_cache_queries)
            : 0.0,
        static_cast<long long>(st.num_preemptions), static_cast<long long>(st.num_steps), threads,
        speculation_summary(st).c_str(),
        expert_bytes_summary(e.model->routed_expert_bytes(), num_output_tokens, "output token (prefill included)")
            .c_str());
    return 0;
}

std::string speculation_summary(const ipc::Stats& st) {
    if (st.spec_num_draft_tokens == 0) return "";
    std::string per_position;
    for (int64_t accepted : st.spec_num_accepted_tokens_per_pos) {
        per_position += fmt::format("{}{:.2f}", per_position.empty() ? "" : "/",
                                    static_cast<double>(accepted) / static_cast<double>(st.spec_num_drafts));
    }
    return fmt::format(
        " | drafts: {} of {} accepted ({:.1f}%), per position {}, budget now {}, {} steps", st.spec_num_accepted_tokens,
        st.spec_num_draft_tokens,
        100.0 * static_cast<double>(st.spec_num_accepted_tokens) / static_cast<double>(st.spec_num_draft_tokens),
        per_position, st.spec_draft_budget, st.num_steps);
}

std::string decode_bytes_summary(const model::ModelInfo& info) {
    if (info.active_weight_bytes_per_token <= 0) return "";
    return fmt::format(" | a decoded token reads {:.2f} MB of weights + {:.2f} kB of KV per context token",
                       static_cast<double>(info.active_weight_bytes_per_token) / 1e6,
                       static_cast<double>(info.kv_bytes_per_token) / 1e3);
}

std::string expert_bytes_summary(int64_t bytes, int64_t tokens, const char* per) {
    if (bytes <= 0 || tokens <= 0) return "";
    return fmt::format(" | routed experts read {:.2f} MB per {}",
                       static_cast<double>(bytes) / 1e6 / static_cast<double>(tokens), per);
}

}  // namespace moeserve::cli
