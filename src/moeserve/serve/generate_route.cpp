// The generation routes' request lifecycle (/v1/completions, /v1/chat/completions):
//   worker thread (WorkQueue): parse -> fan-out limit -> chat history + template -> tokenize ->
//                ipc::validate_request (one per prompt) -> (stream) send headers ->
//                EngineClient::add (one engine request per prompt x n)
//   engine-client thread: outputs -> ChoiceStream (text) -> chat: ChatOutput (reasoning, tool
//                calls) -> SSE chunk / final JSON, metrics, log line
//   client disconnect (HTTP thread): abort the job's engine requests.
#include <fmt/format.h>

#include <algorithm>

#include "moeserve/ipc/auth.h"
#include "moeserve/serve/request_log.h"
#include "moeserve/serve/openai/chat_messages.h"
#include "moeserve/serve/openai/chat_output.h"
#include "moeserve/serve/openai/parse.h"
#include "moeserve/serve/openai/render.h"
#include "moeserve/serve/route_util.h"
#include "moeserve/serve/routes.h"
#include "moeserve/serve/stream.h"
#include "moeserve/tokenizer/chat_prompt.h"

namespace moeserve::serve {

using openai::ApiError;
using OJson = nlohmann::ordered_json;

// One HTTP generation request: its choices (prompt x n), each an engine request.
struct Router::Job {
    bool chat = false;
    openai::ResponseMeta meta;
    openai::GenerationParams params;
    openai::ToolRequest tools;               // chat; chat_options points here
    openai::ChatOutputOptions chat_options;  // chat
    std::shared_ptr<Responder> responder;
    std::vector<std::string> engine_ids;  // per choice
    std::vector<std::unique_ptr<ChoiceStream>> streams;
    std::vector<std::unique_ptr<openai::ChatOutput>> chat_outputs;  // chat: per choice
    std::vector<openai::ToolParseResult> parsed;                    // chat, non-streaming: per choice
    std::vector<openai::ChoiceData> results;                        // per choice: accumulated (non-streaming)
    std::vector<int64_t> prompt_tokens;                             // per choice
    std::vector<size_t> prompt_of_choice;
    std::vector<std::vector<int32_t>> prompt_ids;  // per prompt (echo logprobs, prompt_logprobs)
    std::vector<std::string> echo;                 // per choice: text the answer starts with
    bool echo_logprobs = false;                    // completions with echo and logprobs: entries of the prompt first
    bool echo_only = false;                        // max_tokens 0 with echo: the prompt, nothing generated
    std::vector<int64_t> chars_sent;               // completions, streaming: characters sent (text_offset)
    std::vector<double> first_token_time;          // per choice, 0 = none yet
    std::vector<double> last_token_time;           // per choice: inter-token latency
    std::vector<double> queue_seconds;             // per choice, as the engine reported
    std::vector<int64_t> cached_tokens;
    std::vector<bool> first_chunk_sent;
    std::vector<std::string> kv_endpoints;  // per choice: where a producer request's KV waits
    bool kv_params_sent = false;            // streamed: the event naming the transfers went out
    size_t num_finished = 0;
    std::atomic<bool> done{false};
    double arrival = 0;
    std::atomic<bool> disconnected{false};
};

namespace {

// vLLM's bad_words: each word as it would start a text and as a new word after a space (when
// that is a different, equally long token sequence).
std::vector<std::vector<int32_t>> bad_words_token_ids(const tokenizer::Tokenizer& tokenizer,
                                                      const std::vector<std::string>& words) {
    std::vector<std::vector<int32_t>> out;
    for (const auto& word : words) {
        std::string trimmed = word;
        trimmed.erase(0, trimmed.find_first_not_of(' '));
        const auto plain = tokenizer.encode(trimmed, false);
        if (!plain.empty()) out.push_back(plain);
        const auto spaced = tokenizer.encode(" " + trimmed, false);
        if (!spaced.empty() && !plain.empty() && spaced[0] != plain[0] && spaced.size() == plain.size()) {
            out.push_back(spaced);
        }
    }
    return out;
}

// ipc::validate_request, its error as a 400 naming the field as this route calls it.
ipc::AddRequest validated(ipc::AddRequest add, bool ignore_eos, const ipc::RequestLimits& limits, bool chat) {
    try {
        return ipc::validate_request(std::move(add), ignore_eos, limits);
    } catch (const ipc::InvalidRequest& e) {
        std::string param = e.param();
        if (chat && param == "prompt") param = "messages";
        if (chat && param == "logprobs") param = "top_logprobs";
        throw ApiError(400, e.what(), "invalid_request_error", param);
    }
}

}  // namespace

void Router::warn_unknown_fields(const std::vector<std::string>& fields, const char* route) {
    for (const auto& f : fields) {
        std::lock_guard lock(warned_mutex_);
        if (!warned_fields_.insert(f).second) continue;
        MOESERVE_LOG_W(logger_, "api", "%s: ignoring the request field '%s' (unknown here; logged once)", route,
                       f.c_str());
    }
}

Router::ChatPrompt Router::chat_prompt(const ChatPromptInput& in) const {
    std::optional<tokenizer::ChatTemplate> own;
    if (!in.chat_template.empty()) {
        try {
            own = tokenizer::ChatTemplate::parse(in.chat_template);
        } catch (const Error& e) {
            throw ApiError(400, std::string("'chat_template' is not a valid template: ") + e.what(),
                           "invalid_request_error", "chat_template");
        }
    }
    const tokenizer::ChatTemplate* tmpl = own ? &*own : chat_template_ ? &*chat_template_ : nullptr;
    if (!tmpl) throw ApiError(400, "This model's tokenizer_config.json has no chat_template; use /v1/completions.");
    OJson extra = in.kwargs.is_object() ? in.kwargs : OJson::object();
    for (const char* reserved : {"messages", "add_generation_prompt", "tools"}) {  // request fields
        if (extra.contains(reserved)) {
            throw ApiError(400,
                           fmt::format("chat_template_kwargs may not set '{}'; pass it as a request field.", reserved),
                           "invalid_request_error", fmt::format("chat_template_kwargs.{}", reserved));
        }
    }
    if (in.tools.is_array() && !in.tools.empty()) extra["tools"] = in.tools;
    // Assistant turns with tool_calls and no content: DeepSeek-V3's template renders the calls only
    // when content is none, Qwen3's fails on none; try none first, then vLLM's "".
    OJson messages;
    std::string text;
    const bool try_null = openai::has_tool_calls_without_content(*in.messages);
    if (try_null) {
        messages = openai::prepare_chat_messages(in.messages, openai::NullContent::kKeepWithToolCalls);
        try {
            text = tokenizer::render_chat_prompt(tokenizer_, *tmpl, messages, in.add_generation_prompt, extra);
        } catch (const Error&) {
            messages = OJson();
        }
    }
    if (messages.is_null()) {
        messages = openai::prepare_chat_messages(in.messages);
        text = tokenizer::render_chat_prompt(tokenizer_, *tmpl, messages, in.add_generation_prompt, extra);
    }
    if (in.continue_final_message) {
        // As vLLM: cut everything the template appended after the final message's content.
        const auto& last = messages.back();
        const auto content = last.find("content");
        if (content != last.end() && content->is_string() && !content->get<std::string>().empty()) {
            const size_t pos = text.rfind(content->get<std::string>());
            if (pos != std::string::npos) text.resize(pos + content->get<std::string>().size());
        }
    }
    // As transformers' apply_chat_template: the template adds any BOS itself (unless the request
    // asks for the tokenizer's special tokens too, vLLM's add_special_tokens).
    ChatPrompt out;
    out.ids = encode_prompt(text, in.add_special_tokens, "messages");
    out.text = std::move(text);
    return out;
}

void Router::generate(const OJson& body, bool chat, const std::shared_ptr<Responder>& responder) {
    const auto check_fan_out = [this](size_t num_prompts, int32_t n) {
        const size_t choices = num_prompts * static_cast<size_t>(std::max(1, n));
        if (choices > static_cast<size_t>(config_.max_choices_per_request)) {
            throw ApiError(400,
                           fmt::format("This request asks for {} sequences ({} prompts x n={}); the limit is {} "
                                       "(--max-choices-per-request).",
                                       choices, num_prompts, n, config_.max_choices_per_request),
                           "invalid_request_error", "n");
        }
    };
    if (draining_) throw ApiError(503, "The server is shutting down.", "server_error", std::nullopt, "shutting_down");
    auto job = std::make_shared<Job>();
    job->chat = chat;
    job->responder = responder;
    job->arrival = steady_seconds();
    // Engine request ids are ours (unique); the response id may be the client's request_id.
    const std::string engine_base = new_request_id(chat ? "chatcmpl" : "cmpl");
    job->meta = {engine_base, unix_seconds(), config_.limits.served_model_name};

    // 1. Prompts as token ids (one per completion prompt, one for chat).
    std::vector<std::vector<int32_t>> prompts;
    std::vector<std::string> prompt_texts;
    std::vector<std::optional<std::string>> logged_prompts;  // --enable-log-requests: the text, if any
    bool echo = false;
    std::vector<int32_t> grammar_after;  // reasoning: the grammar starts after </think>
    if (chat) {
        auto r = openai::parse_chat_request(body, config_.limits);
        warn_unknown_fields(r.unknown_fields, "/v1/chat/completions");
        job->params = std::move(r.params);
        job->tools = std::move(r.tools);
        check_fan_out(1, job->params.n);
        using Choice = openai::ToolRequest::Choice;
        if (job->tools.choice == Choice::kAuto && config_.tool_call_parser.empty()) {
            throw ApiError(400,
                           "\"auto\" tool choice requires --enable-auto-tool-choice and --tool-call-parser to be set",
                           "invalid_request_error", "tool_choice");
        }
        ChatPromptInput in{&r.messages,
                           r.add_generation_prompt,
                           r.continue_final_message,
                           r.add_special_tokens,
                           job->tools.choice == Choice::kNone ? OJson() : job->tools.tools,
                           r.chat_template_kwargs,
                           r.chat_template};
        ChatPrompt prompt = chat_prompt(in);
        auto& o = job->chat_options;
        o.tools = &job->tools;
        o.tool_parser = config_.tool_call_parser;
        if (config_.reasoning_format) {
            o.reasoning = *config_.reasoning_format;
            o.reasoning_start = openai::ReasoningParser::start_of(prompt.text);
            if (o.reasoning_start != openai::ReasoningParser::Start::kContent && !job->params.grammar.empty()) {
                grammar_after = tokenizer_.encode(std::string(openai::kThinkEnd), false);
            }
        }
        prompts.push_back(std::move(prompt.ids));
        if (config_.log_requests) logged_prompts.push_back(std::move(prompt.text));
        // chat echo (vLLM): the answer starts with the last message when it is the assistant's.
        const auto& last = r.messages.back();
        prompt_texts.push_back(r.echo && last.value("role", "") == "assistant" && last.contains("content") &&
                                       last["content"].is_string()
                                   ? last["content"].get<std::string>()
                                   : "");
        echo = r.echo;
    } else {
        auto r = openai::parse_completion_request(body, config_.limits);
        warn_unknown_fields(r.unknown_fields, "/v1/completions");
        job->params = std::move(r.params);
        echo = r.echo;
        check_fan_out(r.prompts.size(), job->params.n);
        for (auto& p : r.prompts) {
            if (config_.log_requests) logged_prompts.push_back(p.text);
            if (p.text) {
                prompts.push_back(encode_prompt(*p.text, true, "prompt"));
                prompt_texts.push_back(*p.text);
            } else {
                prompt_texts.push_back(echo ? tokenizer_.decode(p.token_ids) : "");
                prompts.push_back(std::move(p.token_ids));
            }
        }
        job->echo_only = echo && job->params.max_tokens && *job->params.max_tokens == 0;
        job->echo_logprobs = echo && job->params.logprobs.has_value();
    }
    auto& params = job->params;
    if (params.priority != 0 && !config_.priority_scheduling) {  // vLLM's check
        throw ApiError(
            400,
            fmt::format("Got priority {} but Priority scheduling is not enabled (--scheduling-policy priority).",
                        params.priority),
            "invalid_request_error", "priority");
    }
    const auto& kv = params.kv_transfer;
    if (kv.produce && !config_.kv_producer) {
        throw ApiError(400,
                       "kv_transfer_params.do_remote_decode: this instance does not prefill for others (start it with "
                       "--kv-transfer-config and kv_role kv_producer or kv_both)",
                       "invalid_request_error", "kv_transfer_params");
    }
    if (!kv.transfers.empty() && !config_.kv_consumer) {
        throw ApiError(400,
                       "kv_transfer_params.do_remote_prefill: this instance does not decode for others (start it with "
                       "--kv-transfer-config and kv_role kv_consumer or kv_both)",
                       "invalid_request_error", "kv_transfer_params");
    }
    for (const auto& source : kv.transfers) {  // only transfers a producer of this deployment issued
        if (!ipc::kv_transfer_token_valid(config_.kv_transfer_key, source.endpoint, source.id, source.token)) {
            throw ApiError(400,
                           "kv_transfer_params.transfers: a token does not match its endpoint and id (pass the answer "
                           "of a prefill instance of this deployment, with the same rank-plane key, unchanged)",
                           "invalid_request_error", "kv_transfer_params");
        }
    }
    if (!params.request_id.empty()) job->meta.id = fmt::format("{}-{}", chat ? "chatcmpl" : "cmpl", params.request_id);
    if (params.truncate_prompt_tokens) {
        for (auto& ids : prompts) {
            const auto keep = static_cast<size_t>(*params.truncate_prompt_tokens);
            if (ids.size() > keep) ids.erase(ids.begin(), ids.end() - static_cast<std::ptrdiff_t>(keep));
        }
    }
    // 2. The model's defaults where the request is silent, validate lengths, then build one
    // engine request per (prompt, n).
    const auto& g = config_.generation_defaults;
    const auto absent = [&body](const char* key) { return !body.contains(key) || body[key].is_null(); };
    if (g.temperature && absent("temperature")) params.temperature = *g.temperature;
    if (g.top_p && absent("top_p")) params.top_p = *g.top_p;
    if (g.top_k && absent("top_k")) params.top_k = std::max(0, *g.top_k);
    if (g.min_p && absent("min_p")) params.min_p = *g.min_p;
    if (g.repetition_penalty && absent("repetition_penalty")) params.repetition_penalty = *g.repetition_penalty;
    const auto bad_words = bad_words_token_ids(tokenizer_, params.bad_words);
    std::vector<ipc::AddRequest> adds;
    const auto& p = job->params;
    for (size_t i = 0; i < prompts.size(); ++i) {
        openai::GenerationParams sized = p;
        if (job->echo_only) sized.max_tokens = 1;  // vLLM: one token runs, none is returned
        if (!sized.max_tokens && g.max_tokens) {
            const int64_t room = config_.limits.max_model_len - static_cast<int64_t>(prompts[i].size());
            sized.max_tokens = static_cast<int32_t>(std::max<int64_t>(1, std::min<int64_t>(*g.max_tokens, room)));
        }
        // The prompt's engine request; its n choices differ only in their id and seed.
        ipc::AddRequest a;
        a.prompt_token_ids = prompts[i];
        a.priority = p.priority;
        auto& s = a.sampling;
        s.temperature = p.temperature;
        s.top_p = p.top_p;
        s.top_k = p.top_k < 0 ? 0 : p.top_k;
        s.min_p = p.min_p;
        s.presence_penalty = p.presence_penalty;
        s.frequency_penalty = p.frequency_penalty;
        s.repetition_penalty = p.repetition_penalty;
        s.max_tokens = openai::resolve_max_tokens(static_cast<int64_t>(prompts[i].size()), sized, config_.limits, chat);
        s.min_tokens = p.min_tokens;
        s.stop_token_ids = p.stop_token_ids;
        s.logprobs = p.logprobs;
        // Echo with logprobs needs the prompt's entries; prompt_logprobs asks for them itself.
        s.prompt_logprobs = p.prompt_logprobs;
        if (job->echo_logprobs) s.prompt_logprobs = std::max(p.prompt_logprobs.value_or(0), *p.logprobs);
        s.grammar = p.grammar;
        s.grammar_after_token_ids = grammar_after;
        s.logit_bias = p.logit_bias;
        s.allowed_token_ids = p.allowed_token_ids;
        s.bad_words_token_ids = bad_words;
        s.cache_salt = p.cache_salt;
        a = validated(std::move(a), p.ignore_eos, request_limits_, chat);
        if (config_.log_requests) {  // vLLM's line, once per prompt (its n choices share it)
            const std::string line = request_log_line(fmt::format("{}-{}", engine_base, adds.size()), logged_prompts[i],
                                                      prompts[i], p, a.sampling.max_tokens, config_.max_log_len);
            MOESERVE_LOG_I(logger_, "api", "%s", line.c_str());
        }
        for (int32_t k = 0; k < p.n; ++k) {
            ipc::AddRequest choice = a;
            choice.request_id = fmt::format("{}-{}", engine_base, adds.size());
            if (p.seed) choice.sampling.seed = *p.seed + static_cast<uint64_t>(k);
            job->engine_ids.push_back(choice.request_id);
            job->prompt_tokens.push_back(static_cast<int64_t>(prompts[i].size()));
            job->prompt_of_choice.push_back(i);
            job->echo.push_back(echo ? prompt_texts[i] : "");
            adds.push_back(std::move(choice));
        }
    }
    job->prompt_ids = std::move(prompts);
    const size_t num_choices = adds.size();
    if (!p.kv_transfer.transfers.empty() && p.kv_transfer.transfers.size() != num_choices) {
        throw ApiError(
            400,
            fmt::format("kv_transfer_params.transfers has {} entries, this request has {} choices (prompts x "
                        "n); pass the prefill instance's answer to the same request",
                        p.kv_transfer.transfers.size(), num_choices),
            "invalid_request_error", "kv_transfer_params");
    }
    for (size_t c = 0; c < num_choices; ++c) {
        adds[c].kv_transfer.produce = p.kv_transfer.produce;
        if (!p.kv_transfer.transfers.empty()) {
            adds[c].kv_transfer.remote_endpoint = p.kv_transfer.transfers[c].endpoint;
            adds[c].kv_transfer.remote_transfer_id = p.kv_transfer.transfers[c].id;
        }
    }
    job->kv_endpoints.assign(num_choices, "");
    for (size_t c = 0; c < num_choices; ++c) {
        job->streams.push_back(std::make_unique<ChoiceStream>(tokenizer_, job->params));
        if (chat) job->chat_outputs.push_back(std::make_unique<openai::ChatOutput>(job->chat_options));
        openai::ChoiceData d;
        d.index = static_cast<int32_t>(c);
        d.has_logprobs = p.logprobs.has_value();
        d.has_reasoning = chat && job->chat_options.reasoning.has_value();
        job->results.push_back(std::move(d));
    }
    job->parsed.resize(num_choices);
    job->chars_sent.assign(num_choices, 0);
    job->first_token_time.assign(num_choices, 0);
    job->last_token_time.assign(num_choices, 0);
    job->queue_seconds.assign(num_choices, 0);
    job->cached_tokens.assign(num_choices, 0);
    job->first_chunk_sent.assign(num_choices, false);

    // 3. Hand over to the engines. From here on, outputs arrive on the engine-client thread.
    std::weak_ptr<Job> weak = job;
    responder->on_disconnect([this, weak] {
        if (auto j = weak.lock()) {
            j->disconnected = true;
            engines_.abort(j->engine_ids);
        }
    });
    if (p.stream) {
        // A stream's status is sent before any output: refuse it while no engine can take it.
        if (!engines_.accepting())
            throw ApiError(503, "The engine is not running.", "server_error", std::nullopt, "engine_unavailable");
        metrics_.on_http_status(200);
        responder->start_stream();
    }
    for (size_t c = 0; c < num_choices; ++c) {
        const bool sent =
            engines_.add(std::move(adds[c]), [this, job, c](const ipc::RequestOutput& out) { on_output(job, c, out); });
        if (!sent) {
            job->done = true;  // later (abort) outputs are ignored
            engines_.abort(
                std::vector<std::string>(job->engine_ids.begin(), job->engine_ids.begin() + static_cast<long>(c)));
            if (p.stream) {
                responder->send_chunk("data: " +
                                      openai::error_body(ApiError(503, "The engine is not running.", "server_error",
                                                                  std::nullopt, "engine_unavailable")) +
                                      "\n\n" + openai::sse_done());
                responder->end_stream();
                return;
            }
            throw ApiError(503, "The engine is not running.", "server_error", std::nullopt, "engine_unavailable");
        }
    }
    // This runs on a worker, not the connection's strand: a client that left while the requests
    // were being added had its abort run before they existed. The disconnect handler sets the
    // flag before it aborts, so one of the two aborts sees every request.
    if (job->disconnected) engines_.abort(job->engine_ids);
}

OJson Router::prompt_logprobs_json(const std::vector<ipc::TokenLogprobs>& entries) const {
    // vLLM's shape: null for the first prompt token, then {token id: {logprob, rank, decoded_token}}
    // with the prompt's token and the top-k.
    OJson out = OJson::array({nullptr});
    const auto text = [this](int32_t id) { return tokenizer_.decode(std::span<const int32_t>(&id, 1)); };
    for (const auto& e : entries) {
        OJson m = OJson::object();
        m[std::to_string(e.token_id)] = {
            {"logprob", std::max(e.logprob, -9999.0f)}, {"rank", e.rank}, {"decoded_token", text(e.token_id)}};
        for (size_t k = 0; k < e.top.size(); ++k) {
            const auto& [id, lp] = e.top[k];
            const std::string key = std::to_string(id);
            if (!m.contains(key))
                m[key] = {{"logprob", std::max(lp, -9999.0f)},
                          {"rank", static_cast<int>(k) + 1},
                          {"decoded_token", text(id)}};
        }
        out.push_back(std::move(m));
    }
    return out;
}

OJson Router::kv_transfer_params(const Job& job) const {
    OJson transfers = OJson::array();
    for (size_t c = 0; c < job.engine_ids.size(); ++c) {
        const std::string& endpoint = job.kv_endpoints[c];
        const std::string& id = job.engine_ids[c];
        transfers.push_back({{"endpoint", endpoint},
                             {"id", id},
                             {"token", ipc::kv_transfer_token(config_.kv_transfer_key, endpoint, id)}});
    }
    return {{"do_remote_prefill", true}, {"transfers", std::move(transfers)}};
}

void Router::on_output(const std::shared_ptr<Job>& job, size_t c, const ipc::RequestOutput& out) {
    if (job->done) return;
    auto& stream = *job->streams[c];
    if (stream.finished()) return;  // after a stop string: the engine's abort output
    if (out.finish_reason == ipc::FinishReason::kError) {
        const bool engine_down = !engines_.healthy();
        MOESERVE_LOG_E(logger_, "api", "request %s failed: %s", out.request_id.c_str(), out.error.c_str());
        metrics_.on_request_finished({ipc::finish_reason_name(out.finish_reason), job->prompt_tokens[c],
                                      stream.num_tokens(), 0, steady_seconds() - job->arrival});
        if (out.overloaded) return fail_job(job, 503, out.error, "queue_timeout");
        return fail_job(job, engine_down ? 503 : 500,
                        (engine_down ? "The engine is not running: " : "The engine failed the request: ") + out.error,
                        engine_down ? "engine_unavailable" : nullptr);
    }
    if (out.num_cached_tokens > 0) job->cached_tokens[c] = out.num_cached_tokens;
    if (!out.kv_transfer_endpoint.empty()) job->kv_endpoints[c] = out.kv_transfer_endpoint;
    if (job->params.stream && job->params.kv_transfer.produce && !job->kv_params_sent &&
        std::none_of(job->kv_endpoints.begin(), job->kv_endpoints.end(), [](const auto& e) { return e.empty(); })) {
        // Streaming the prefill half: the decode half may start fetching while this prompt runs.
        job->kv_params_sent = true;
        if (!job->disconnected) {
            job->responder->send_chunk(openai::sse_event(
                {{"id", job->meta.id}, {"choices", OJson::array()}, {"kv_transfer_params", kv_transfer_params(*job)}}));
        }
    }
    job->queue_seconds[c] = out.queue_seconds;
    auto delta = stream.push(out);
    if (!out.new_token_ids.empty()) {
        const double now = steady_seconds();
        if (job->last_token_time[c] > 0) metrics_.on_inter_token(now - job->last_token_time[c]);
        job->last_token_time[c] = now;
        if (job->first_token_time[c] == 0) job->first_token_time[c] = now;
    }
    if (stream.stopped_by_string()) engines_.abort({job->engine_ids[c]});
    auto& result = job->results[c];
    const bool first = !job->first_chunk_sent[c];
    if (job->echo_only) {  // nothing generated is shown
        delta.text.clear();
        delta.logprobs.clear();
    }
    // The prompt's own entries come first (echo + logprobs; vLLM's prompt_logprobs field).
    std::vector<openai::TokenLogprob> prompt_entries;
    OJson prompt_lps;
    if (delta.prompt_logprobs) {
        if (job->params.prompt_logprobs) prompt_lps = prompt_logprobs_json(*delta.prompt_logprobs);
        if (job->echo_logprobs) {
            const auto& ids = job->prompt_ids[job->prompt_of_choice[c]];
            openai::TokenLogprob head = stream.logprob_text({ids.front(), 0, 0, {}});
            head.unknown = true;
            prompt_entries.push_back(std::move(head));
            for (const auto& e : *delta.prompt_logprobs) {
                openai::TokenLogprob t = stream.logprob_text(e);
                t.top.resize(std::min<size_t>(t.top.size(), static_cast<size_t>(*job->params.logprobs)));
                prompt_entries.push_back(std::move(t));
            }
        }
    }
    const bool finished = stream.finished();
    openai::ChatDelta chat_delta;
    if (job->chat) {
        auto& chat_out = *job->chat_outputs[c];
        chat_delta = chat_out.push(delta.text);
        if (finished) {
            openai::ChatDelta rest = chat_out.finish();
            chat_delta.reasoning += rest.reasoning;
            chat_delta.content += rest.content;
            chat_delta.tool_calls.insert(chat_delta.tool_calls.end(), rest.tool_calls.begin(), rest.tool_calls.end());
        }
    }
    // Auto and required calls end a stopped answer with finish_reason "tool_calls" (vLLM).
    const auto finish_reason = [&]() -> std::string {
        if (job->chat && stream.finish_reason() == "stop" && job->chat_outputs[c]->calls_made() &&
            !job->chat_outputs[c]->named_choice()) {
            return "tool_calls";
        }
        return stream.finish_reason();
    };
    if (job->params.stream) {
        openai::ChoiceData d;
        d.index = result.index;
        d.has_logprobs = result.has_logprobs;
        d.prompt_logprobs = std::move(prompt_lps);
        d.logprobs = std::move(prompt_entries);
        for (auto& lp : delta.logprobs) d.logprobs.push_back(std::move(lp));
        if (job->chat) {
            d.text = std::move(chat_delta.content);
            d.reasoning = std::move(chat_delta.reasoning);
            d.tool_call_deltas = std::move(chat_delta.tool_calls);
        } else {
            d.text = delta.text;
        }
        if (first && !job->echo[c].empty()) d.text = job->echo[c] + d.text;
        d.text_offset = job->chars_sent[c];
        if (finished) {
            d.finish_reason = finish_reason();
            d.stop_reason = stream.stop_reason();
        }
        if (job->params.continuous_usage_stats) {
            d.usage =
                openai::Usage{job->prompt_tokens[c], job->echo_only ? 0 : stream.num_tokens(), job->cached_tokens[c]};
        }
        const bool has_news = !d.text.empty() || !d.reasoning.empty() || !d.tool_call_deltas.empty() ||
                              d.finish_reason || !d.logprobs.empty() || !d.prompt_logprobs.is_null();
        if (has_news || (first && job->chat)) {
            job->first_chunk_sent[c] = true;
            for (const auto& lp : d.logprobs) job->chars_sent[c] += openai::utf8_length(lp.token);
            if (d.logprobs.empty()) job->chars_sent[c] += openai::utf8_length(d.text);
            if (!job->disconnected) {
                job->responder->send_chunk(openai::sse_event(job->chat ? openai::chat_chunk(job->meta, d, first)
                                                                       : openai::completion_chunk(job->meta, d)));
            }
        }
    } else {
        for (auto& lp : prompt_entries) result.logprobs.push_back(std::move(lp));
        for (auto& lp : delta.logprobs) result.logprobs.push_back(std::move(lp));
        if (!prompt_lps.is_null()) result.prompt_logprobs = std::move(prompt_lps);
        if (job->chat) {
            result.reasoning += chat_delta.reasoning;
            job->parsed[c].add({std::move(chat_delta.content), std::move(chat_delta.tool_calls)});
        }
    }
    if (!finished) return;
    const double now = steady_seconds();
    const double ttft = job->first_token_time[c] > 0 ? job->first_token_time[c] - job->arrival : 0;
    const int64_t num_generated = job->echo_only ? 0 : stream.num_tokens();
    if (config_.log_requests)
        MOESERVE_LOG_I(
            logger_, "api", "request %s finished: reason=%s prompt_tokens=%lld output_tokens=%lld ttft=%.3fs e2e=%.3fs",
            job->engine_ids[c].c_str(), stream.finish_reason().c_str(), static_cast<long long>(job->prompt_tokens[c]),
            static_cast<long long>(num_generated), ttft, now - job->arrival);
    const double decode = job->first_token_time[c] > 0 ? job->last_token_time[c] - job->first_token_time[c] : 0;
    metrics_.on_request_finished({stream.finish_reason(), job->prompt_tokens[c], num_generated, ttft,
                                  now - job->arrival, job->queue_seconds[c], decode,
                                  job->params.max_tokens.value_or(0)});
    if (job->chat) {
        result.text = job->echo[c] + job->parsed[c].content;
        result.tool_calls = std::move(job->parsed[c].calls);
    } else {
        result.text = job->echo[c] + (job->echo_only ? "" : stream.text());
    }
    result.finish_reason = finish_reason();
    result.stop_reason = stream.stop_reason();
    if (++job->num_finished == job->streams.size()) finish_job(job);
}

void Router::finish_job(const std::shared_ptr<Job>& job) {
    job->done = true;
    openai::Usage usage;
    std::vector<bool> counted(job->prompt_tokens.size(), false);
    for (size_t c = 0; c < job->streams.size(); ++c) {
        const size_t prompt = job->prompt_of_choice[c];
        if (!counted[prompt]) {  // each prompt once, however many choices share it (as vLLM)
            counted[prompt] = true;
            usage.prompt_tokens += job->prompt_tokens[c];
            usage.cached_tokens += job->cached_tokens[c];
        }
        if (!job->echo_only) usage.completion_tokens += job->streams[c]->num_tokens();
    }
    job->responder->note_usage(usage.prompt_tokens, usage.completion_tokens);
    if (job->params.stream) {
        std::string tail;
        if (job->params.include_usage) tail += openai::sse_event(openai::usage_chunk(job->meta, usage, job->chat));
        tail += openai::sse_done();
        job->responder->send_chunk(std::move(tail));
        job->responder->end_stream();
        return;
    }
    OJson body = job->chat ? openai::chat_response(job->meta, job->results, usage)
                           : openai::completion_response(job->meta, job->results, usage);
    if (job->params.kv_transfer.produce) body["kv_transfer_params"] = kv_transfer_params(*job);
    reply(job->responder, 200, kJsonMediaType, dump(body));
}

void Router::fail_job(const std::shared_ptr<Job>& job, int status, const std::string& message, const char* code) {
    job->done = true;
    engines_.abort(job->engine_ids);
    const ApiError error(status, message, "server_error", std::nullopt,
                         code ? std::optional<std::string>(code) : std::nullopt);
    if (job->params.stream) {
        job->responder->send_chunk("data: " + openai::error_body(error) + "\n\n" + openai::sse_done());
        job->responder->end_stream();
    } else {
        reply(job->responder, status, kJsonMediaType, openai::error_body(error));
    }
}

}  // namespace moeserve::serve
