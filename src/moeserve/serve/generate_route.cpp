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
#include "moeserve/serve/engine_request.h"
#include "moeserve/serve/route_util.h"
#include "moeserve/serve/routes.h"
#include "moeserve/serve/stream.h"
#include "moeserve/tokenizer/chat_prompt.h"

namespace moeserve::serve {

using openai::ApiError;
using OJson = nlohmann::ordered_json;

namespace {

// One choice of a request: one engine request (a prompt x one of its n samples) and what its
// answer has gathered so far.
struct Choice {
    std::string engine_id;
    size_t prompt = 0;          // index into Job::prompt_ids
    int64_t prompt_tokens = 0;  // as the engine counts them
    std::string echo;           // text the answer starts with (completions with echo)
    std::unique_ptr<ChoiceStream> stream;
    std::unique_ptr<openai::ChatOutput> chat_output;  // chat
    openai::ToolParseResult parsed;                   // chat, non-streaming
    openai::ChoiceData result;                        // accumulated (non-streaming)
    int64_t chars_sent = 0;                           // completions, streaming: characters sent (text_offset)
    double first_token_time = 0;                      // 0 = none yet
    double last_token_time = 0;                       // inter-token latency
    double queue_seconds = 0;                         // as the engine reported
    int64_t cached_tokens = 0;
    bool first_chunk_sent = false;
    std::string kv_endpoint;  // where a producer request's KV waits
};

}  // namespace

// One HTTP generation request: its choices (prompt x n), each an engine request.
struct Router::Job {
    bool chat = false;
    openai::ResponseMeta meta;
    openai::GenerationParams params;
    openai::ToolRequest tools;               // chat; chat_options points here
    openai::ChatOutputOptions chat_options;  // chat
    std::shared_ptr<Responder> responder;
    std::vector<Choice> choices;
    std::vector<std::vector<int32_t>> prompt_ids;  // per prompt (echo logprobs, prompt_logprobs)
    bool echo_logprobs = false;                    // completions with echo and logprobs: entries of the prompt first
    bool echo_only = false;                        // max_tokens 0 with echo: the prompt, nothing generated
    bool kv_params_sent = false;                   // streamed: the event naming the transfers went out
    size_t num_finished = 0;
    std::atomic<bool> done{false};
    double arrival = 0;
    std::atomic<bool> disconnected{false};

    // The engine ids of the first `count` choices (all by default).
    std::vector<std::string> engine_ids(size_t count = SIZE_MAX) const {
        std::vector<std::string> ids;
        for (size_t c = 0; c < choices.size() && c < count; ++c) ids.push_back(choices[c].engine_id);
        return ids;
    }
};

namespace {

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
    const auto arguments =
        (own ? openai::template_wants_argument_objects(in.chat_template) : template_wants_argument_objects_)
            ? openai::ToolArguments::kObject
            : openai::ToolArguments::kText;
    // Assistant turns with tool_calls and no content: DeepSeek-V3's template renders the calls only
    // when content is none, Qwen3's fails on none; try none first, then vLLM's "".
    OJson messages;
    std::string text;
    const bool try_null = openai::has_tool_calls_without_content(*in.messages);
    if (try_null) {
        messages = openai::prepare_chat_messages(in.messages, openai::NullContent::kKeepWithToolCalls, arguments);
        try {
            text = tokenizer::render_chat_prompt(tokenizer_, *tmpl, messages, in.add_generation_prompt, extra);
        } catch (const Error&) {
            messages = OJson();
        }
    }
    if (messages.is_null()) {
        messages = openai::prepare_chat_messages(in.messages, openai::NullContent::kEmpty, arguments);
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

// A request's prompts, as step 1 of generate reads them.
struct Router::Prompts {
    std::vector<std::vector<int32_t>> ids;           // one per completion prompt, one for chat
    std::vector<std::string> echo_texts;             // per prompt: what an echoed answer starts with ("" = none)
    std::vector<std::optional<std::string>> logged;  // --enable-log-requests: the text, if any
    std::vector<int32_t> grammar_after;              // reasoning: the grammar starts after </think>
};

void Router::generate(const OJson& body, bool chat, const std::shared_ptr<Responder>& responder) {
    if (draining_) throw ApiError(503, "The server is shutting down.", "server_error", std::nullopt, "shutting_down");
    auto job = std::make_shared<Job>();
    job->chat = chat;
    job->responder = responder;
    job->arrival = steady_seconds();
    // Engine request ids are ours (unique); the response id may be the client's request_id.
    const std::string engine_base = new_request_id(chat ? "chatcmpl" : "cmpl");
    job->meta = {engine_base, unix_seconds(), config_.limits.served_model_name};
    // 1. The request's fields and its prompts as token ids; what this server refuses.
    Prompts prompts = chat ? parse_chat_request(body, *job) : parse_completion_request(body, *job);
    check_request_rules(*job, prompts);
    // 2. One engine request per (prompt, n).
    std::vector<ipc::AddRequest> adds = prepare_engine_requests(body, *job, std::move(prompts), engine_base);
    // 3. Hand over to the engines. From here on, outputs arrive on the engine-client thread.
    submit(job, std::move(adds));
}

void Router::check_fan_out(size_t num_prompts, int32_t n) const {
    const size_t choices = num_prompts * static_cast<size_t>(std::max(1, n));
    if (choices > static_cast<size_t>(config_.max_choices_per_request)) {
        throw ApiError(400,
                       fmt::format("This request asks for {} sequences ({} prompts x n={}); the limit is {} "
                                   "(--max-choices-per-request).",
                                   choices, num_prompts, n, config_.max_choices_per_request),
                       "invalid_request_error", "n");
    }
}

Router::Prompts Router::parse_chat_request(const OJson& body, Job& job) {
    auto r = openai::parse_chat_request(body, config_.limits);
    warn_unknown_fields(r.unknown_fields, "/v1/chat/completions");
    job.params = std::move(r.params);
    job.tools = std::move(r.tools);
    check_fan_out(1, job.params.n);
    using ToolChoice = openai::ToolRequest::Choice;
    if (job.tools.choice == ToolChoice::kAuto && config_.tool_call_parser.empty()) {
        throw ApiError(400, "\"auto\" tool choice requires --enable-auto-tool-choice and --tool-call-parser to be set",
                       "invalid_request_error", "tool_choice");
    }
    ChatPromptInput in{&r.messages,
                       r.add_generation_prompt,
                       r.continue_final_message,
                       r.add_special_tokens,
                       job.tools.choice == ToolChoice::kNone ? OJson() : job.tools.tools,
                       r.chat_template_kwargs,
                       r.chat_template};
    ChatPrompt prompt = chat_prompt(in);
    Prompts out;
    auto& o = job.chat_options;
    o.tools = &job.tools;
    o.tool_parser = config_.tool_call_parser;
    const bool harmony = config_.reasoning_format == openai::ReasoningParser::Format::kGptOss;
    if (config_.reasoning_format) {
        o.reasoning = *config_.reasoning_format;
        o.reasoning_start = openai::ReasoningParser::start_of(prompt.text);
        if (harmony && !job.params.grammar.empty()) {
            // A structured output constrains the final channel's text, after its header.
            out.grammar_after = tokenizer_.encode(std::string(openai::kHarmonyFinalHeader), false);
        } else if (o.reasoning_start != openai::ReasoningParser::Start::kContent && !job.params.grammar.empty()) {
            out.grammar_after = tokenizer_.encode(std::string(openai::kThinkEnd), false);
        }
    }
    // Parsers whose markers are special tokens need them in the text (vLLM turns
    // skip_special_tokens off for these too).
    const bool auto_calls = job.tools.choice == ToolChoice::kAuto;
    if (harmony || (auto_calls && openai::tool_parser_reads_special_tokens(config_.tool_call_parser))) {
        job.params.skip_special_tokens = false;
    }
    out.ids.push_back(std::move(prompt.ids));
    if (config_.log_requests) out.logged.push_back(std::move(prompt.text));
    // chat echo (vLLM): the answer starts with the last message when it is the assistant's.
    const auto& last = r.messages.back();
    out.echo_texts.push_back(r.echo && last.value("role", "") == "assistant" && last.contains("content") &&
                                     last["content"].is_string()
                                 ? last["content"].get<std::string>()
                                 : "");
    return out;
}

Router::Prompts Router::parse_completion_request(const OJson& body, Job& job) {
    auto r = openai::parse_completion_request(body, config_.limits);
    warn_unknown_fields(r.unknown_fields, "/v1/completions");
    job.params = std::move(r.params);
    check_fan_out(r.prompts.size(), job.params.n);
    Prompts out;
    for (auto& p : r.prompts) {
        if (config_.log_requests) out.logged.push_back(p.text);
        if (p.text) {
            out.ids.push_back(encode_prompt(*p.text, true, "prompt"));
            out.echo_texts.push_back(r.echo ? *p.text : "");
        } else {
            out.echo_texts.push_back(r.echo ? tokenizer_.decode(p.token_ids) : "");
            out.ids.push_back(std::move(p.token_ids));
        }
    }
    job.echo_only = r.echo && job.params.max_tokens && *job.params.max_tokens == 0;
    job.echo_logprobs = r.echo && job.params.logprobs.has_value();
    return out;
}

void Router::check_request_rules(Job& job, Prompts& prompts) const {
    const auto& params = job.params;
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
    if (!params.request_id.empty())
        job.meta.id = fmt::format("{}-{}", job.chat ? "chatcmpl" : "cmpl", params.request_id);
    for (auto& ids : prompts.ids) truncate_prompt(params, ids);
}

std::vector<ipc::AddRequest> Router::prepare_engine_requests(const OJson& body, Job& job, Prompts prompts,
                                                             const std::string& engine_base) {
    // The model's defaults where the request is silent.
    auto& params = job.params;
    const auto& g = config_.generation_defaults;
    const auto absent = [&body](const char* key) { return !body.contains(key) || body[key].is_null(); };
    if (g.temperature && absent("temperature")) params.temperature = *g.temperature;
    if (g.top_p && absent("top_p")) params.top_p = *g.top_p;
    if (g.top_k && absent("top_k")) params.top_k = std::max(0, *g.top_k);
    if (g.min_p && absent("min_p")) params.min_p = *g.min_p;
    if (g.repetition_penalty && absent("repetition_penalty")) params.repetition_penalty = *g.repetition_penalty;
    const EngineRequestRules rules{.limits = &config_.limits,
                                   .default_max_tokens = g.max_tokens,
                                   .chat = job.chat,
                                   .echo_only = job.echo_only,
                                   .echo_logprobs = job.echo_logprobs,
                                   .bad_words = bad_words_token_ids(tokenizer_, params.bad_words),
                                   .grammar_after = std::move(prompts.grammar_after)};
    std::vector<ipc::AddRequest> adds;
    const auto& p = job.params;
    for (size_t i = 0; i < prompts.ids.size(); ++i) {
        const ipc::AddRequest a =
            validated(build_engine_request(p, prompts.ids[i], rules), p.ignore_eos, request_limits_, job.chat);
        if (config_.log_requests) {  // vLLM's line, once per prompt (its n choices share it)
            const std::string line = request_log_line(fmt::format("{}-{}", engine_base, adds.size()), prompts.logged[i],
                                                      prompts.ids[i], p, a.sampling.max_tokens, config_.max_log_len);
            MOESERVE_LOG_I(logger_, "api", "%s", line.c_str());
        }
        for (int32_t k = 0; k < p.n; ++k) {
            ipc::AddRequest choice = choice_request(a, p, k, fmt::format("{}-{}", engine_base, adds.size()));
            Choice& added = job.choices.emplace_back();
            added.engine_id = choice.request_id;
            added.prompt = i;
            added.prompt_tokens = static_cast<int64_t>(prompts.ids[i].size());
            added.echo = prompts.echo_texts[i];
            adds.push_back(std::move(choice));
        }
    }
    job.prompt_ids = std::move(prompts.ids);
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
        Choice& choice = job.choices[c];
        choice.stream = std::make_unique<ChoiceStream>(tokenizer_, job.params);
        if (job.chat) choice.chat_output = std::make_unique<openai::ChatOutput>(job.chat_options);
        choice.result.index = static_cast<int32_t>(c);
        choice.result.has_logprobs = p.logprobs.has_value();
        choice.result.has_reasoning = job.chat && job.chat_options.reasoning.has_value();
    }
    return adds;
}

void Router::submit(const std::shared_ptr<Job>& job, std::vector<ipc::AddRequest> adds) {
    const std::shared_ptr<Responder>& responder = job->responder;
    const auto& p = job->params;
    std::weak_ptr<Job> weak = job;
    responder->on_disconnect([this, weak] {
        if (auto j = weak.lock()) {
            j->disconnected = true;
            engines_.abort(j->engine_ids());
        }
    });
    if (p.stream) {
        // A stream's status is sent before any output: refuse it while no engine can take it.
        if (!engines_.accepting())
            throw ApiError(503, "The engine is not running.", "server_error", std::nullopt, "engine_unavailable");
        metrics_.on_http_status(200);
        responder->start_stream();
    }
    for (size_t c = 0; c < adds.size(); ++c) {
        const bool sent =
            engines_.add(std::move(adds[c]), [this, job, c](const ipc::RequestOutput& out) { on_output(job, c, out); });
        if (!sent) {
            job->done = true;  // later (abort) outputs are ignored
            engines_.abort(job->engine_ids(c));
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
    if (job->disconnected) engines_.abort(job->engine_ids());
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
    for (const Choice& choice : job.choices) {
        const std::string& endpoint = choice.kv_endpoint;
        const std::string& id = choice.engine_id;
        transfers.push_back({{"endpoint", endpoint},
                             {"id", id},
                             {"token", ipc::kv_transfer_token(config_.kv_transfer_key, endpoint, id)}});
    }
    return {{"do_remote_prefill", true}, {"transfers", std::move(transfers)}};
}

// What one engine output adds to a choice's answer.
struct Router::OutputPiece {
    ChoiceStream::Delta delta;
    std::vector<openai::TokenLogprob> prompt_entries;  // echo + logprobs: the prompt's own entries, first
    OJson prompt_logprobs;                             // vLLM's prompt_logprobs field
    openai::ChatDelta chat;                            // chat: the delta's reasoning, content and tool calls
    bool finished = false;
};

namespace {

// Auto and required tool calls end a stopped chat answer with finish_reason "tool_calls" (vLLM).
std::string answer_finish_reason(bool chat, const Choice& choice) {
    const ChoiceStream& stream = *choice.stream;
    if (chat && stream.finish_reason() == "stop" && choice.chat_output->calls_made() &&
        !choice.chat_output->named_choice()) {
        return "tool_calls";
    }
    return stream.finish_reason();
}

}  // namespace

void Router::on_output(const std::shared_ptr<Job>& job, size_t c, const ipc::RequestOutput& out) {
    if (job->done) return;
    Choice& choice = job->choices[c];
    ChoiceStream& stream = *choice.stream;
    if (stream.finished()) return;  // after a stop string: the engine's abort output
    if (out.finish_reason == ipc::FinishReason::kError) return on_engine_error(job, c, out);
    if (out.num_cached_tokens > 0) choice.cached_tokens = out.num_cached_tokens;
    if (!out.kv_transfer_endpoint.empty()) choice.kv_endpoint = out.kv_transfer_endpoint;
    send_kv_transfer_params(*job);
    choice.queue_seconds = out.queue_seconds;
    ChoiceStream::Delta delta = stream.push(out);
    if (!out.new_token_ids.empty()) {
        const double now = steady_seconds();
        if (choice.last_token_time > 0) metrics_.on_inter_token(now - choice.last_token_time);
        choice.last_token_time = now;
        if (choice.first_token_time == 0) choice.first_token_time = now;
    }
    if (stream.stopped_by_string()) engines_.abort({choice.engine_id});
    const bool first = !choice.first_chunk_sent;
    if (job->echo_only) {  // nothing generated is shown
        delta.text.clear();
        delta.logprobs.clear();
    }
    OutputPiece piece = output_piece(*job, c, std::move(delta));
    const bool finished = piece.finished;
    if (job->params.stream) {
        send_chunk(*job, c, std::move(piece), first);
    } else {
        gather(*job, c, std::move(piece));
    }
    if (finished) finish_choice(job, c);
}

void Router::on_engine_error(const std::shared_ptr<Job>& job, size_t c, const ipc::RequestOutput& out) {
    const Choice& choice = job->choices[c];
    const bool engine_down = !engines_.healthy();
    MOESERVE_LOG_E(logger_, "api", "request %s failed: %s", out.request_id.c_str(), out.error.c_str());
    metrics_.on_request_finished({ipc::finish_reason_name(out.finish_reason), choice.prompt_tokens,
                                  choice.stream->num_tokens(), 0, steady_seconds() - job->arrival});
    if (out.overloaded) return fail_job(job, 503, out.error, "queue_timeout");
    fail_job(job, engine_down ? 503 : 500,
             (engine_down ? "The engine is not running: " : "The engine failed the request: ") + out.error,
             engine_down ? "engine_unavailable" : nullptr);
}

void Router::send_kv_transfer_params(Job& job) {
    if (!job.params.stream || !job.params.kv_transfer.produce || job.kv_params_sent) return;
    if (std::any_of(job.choices.begin(), job.choices.end(), [](const Choice& o) { return o.kv_endpoint.empty(); }))
        return;
    job.kv_params_sent = true;
    if (!job.disconnected) {
        job.responder->send_chunk(openai::sse_event(
            {{"id", job.meta.id}, {"choices", OJson::array()}, {"kv_transfer_params", kv_transfer_params(job)}}));
    }
}

Router::OutputPiece Router::output_piece(const Job& job, size_t c, ChoiceStream::Delta delta) const {
    const Choice& choice = job.choices[c];
    OutputPiece piece;
    if (delta.prompt_logprobs) {
        if (job.params.prompt_logprobs) piece.prompt_logprobs = prompt_logprobs_json(*delta.prompt_logprobs);
        if (job.echo_logprobs) {
            const auto& ids = job.prompt_ids[choice.prompt];
            openai::TokenLogprob head = choice.stream->logprob_text({ids.front(), 0, 0, {}});
            head.unknown = true;
            piece.prompt_entries.push_back(std::move(head));
            for (const auto& e : *delta.prompt_logprobs) {
                openai::TokenLogprob t = choice.stream->logprob_text(e);
                t.top.resize(std::min<size_t>(t.top.size(), static_cast<size_t>(*job.params.logprobs)));
                piece.prompt_entries.push_back(std::move(t));
            }
        }
    }
    piece.finished = choice.stream->finished();
    if (job.chat) {
        openai::ChatOutput& chat_out = *choice.chat_output;
        piece.chat = chat_out.push(delta.text);
        if (piece.finished) {
            openai::ChatDelta rest = chat_out.finish();
            piece.chat.reasoning += rest.reasoning;
            piece.chat.content += rest.content;
            piece.chat.tool_calls.insert(piece.chat.tool_calls.end(), rest.tool_calls.begin(), rest.tool_calls.end());
        }
    }
    piece.delta = std::move(delta);
    return piece;
}

void Router::send_chunk(Job& job, size_t c, OutputPiece piece, bool first) {
    Choice& choice = job.choices[c];
    const ChoiceStream& stream = *choice.stream;
    openai::ChoiceData d;
    d.index = choice.result.index;
    d.has_logprobs = choice.result.has_logprobs;
    d.prompt_logprobs = std::move(piece.prompt_logprobs);
    d.logprobs = std::move(piece.prompt_entries);
    for (auto& lp : piece.delta.logprobs) d.logprobs.push_back(std::move(lp));
    if (job.chat) {
        d.text = std::move(piece.chat.content);
        d.reasoning = std::move(piece.chat.reasoning);
        d.tool_call_deltas = std::move(piece.chat.tool_calls);
    } else {
        d.text = piece.delta.text;
    }
    if (first && !choice.echo.empty()) d.text = choice.echo + d.text;
    d.text_offset = choice.chars_sent;
    if (piece.finished) {
        d.finish_reason = answer_finish_reason(job.chat, choice);
        d.stop_reason = stream.stop_reason();
    }
    if (job.params.continuous_usage_stats) {
        d.usage = openai::Usage{choice.prompt_tokens, job.echo_only ? 0 : stream.num_tokens(), choice.cached_tokens};
    }
    const bool has_news = !d.text.empty() || !d.reasoning.empty() || !d.tool_call_deltas.empty() || d.finish_reason ||
                          !d.logprobs.empty() || !d.prompt_logprobs.is_null();
    if (!has_news && !(first && job.chat)) return;
    choice.first_chunk_sent = true;
    for (const auto& lp : d.logprobs) choice.chars_sent += openai::utf8_length(lp.token);
    if (d.logprobs.empty()) choice.chars_sent += openai::utf8_length(d.text);
    if (!job.disconnected) {
        job.responder->send_chunk(openai::sse_event(job.chat ? openai::chat_chunk(job.meta, d, first)
                                                             : openai::completion_chunk(job.meta, d)));
    }
}

void Router::gather(Job& job, size_t c, OutputPiece piece) {
    Choice& choice = job.choices[c];
    openai::ChoiceData& result = choice.result;
    for (auto& lp : piece.prompt_entries) result.logprobs.push_back(std::move(lp));
    for (auto& lp : piece.delta.logprobs) result.logprobs.push_back(std::move(lp));
    if (!piece.prompt_logprobs.is_null()) result.prompt_logprobs = std::move(piece.prompt_logprobs);
    if (job.chat) {
        result.reasoning += piece.chat.reasoning;
        choice.parsed.add({std::move(piece.chat.content), std::move(piece.chat.tool_calls)});
    }
}

void Router::finish_choice(const std::shared_ptr<Job>& job, size_t c) {
    Choice& choice = job->choices[c];
    const ChoiceStream& stream = *choice.stream;
    openai::ChoiceData& result = choice.result;
    const double now = steady_seconds();
    const double ttft = choice.first_token_time > 0 ? choice.first_token_time - job->arrival : 0;
    const int64_t num_generated = job->echo_only ? 0 : stream.num_tokens();
    if (config_.log_requests)
        MOESERVE_LOG_I(
            logger_, "api", "request %s finished: reason=%s prompt_tokens=%lld output_tokens=%lld ttft=%.3fs e2e=%.3fs",
            choice.engine_id.c_str(), stream.finish_reason().c_str(), static_cast<long long>(choice.prompt_tokens),
            static_cast<long long>(num_generated), ttft, now - job->arrival);
    const double decode = choice.first_token_time > 0 ? choice.last_token_time - choice.first_token_time : 0;
    metrics_.on_request_finished({stream.finish_reason(), choice.prompt_tokens, num_generated, ttft, now - job->arrival,
                                  choice.queue_seconds, decode, job->params.max_tokens.value_or(0)});
    if (job->chat) {
        result.text = choice.echo + choice.parsed.content;
        result.tool_calls = std::move(choice.parsed.calls);
    } else {
        result.text = choice.echo + (job->echo_only ? "" : stream.text());
    }
    result.finish_reason = answer_finish_reason(job->chat, choice);
    result.stop_reason = stream.stop_reason();
    if (++job->num_finished == job->choices.size()) finish_job(job);
}

void Router::finish_job(const std::shared_ptr<Job>& job) {
    job->done = true;
    openai::Usage usage;
    std::vector<bool> counted(job->prompt_ids.size(), false);
    for (const Choice& choice : job->choices) {
        const size_t prompt = choice.prompt;
        if (!counted[prompt]) {  // each prompt once, however many choices share it (as vLLM)
            counted[prompt] = true;
            usage.prompt_tokens += choice.prompt_tokens;
            usage.cached_tokens += choice.cached_tokens;
        }
        if (!job->echo_only) usage.completion_tokens += choice.stream->num_tokens();
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
    std::vector<openai::ChoiceData> results;
    for (Choice& choice : job->choices) results.push_back(std::move(choice.result));
    OJson body = job->chat ? openai::chat_response(job->meta, results, usage)
                           : openai::completion_response(job->meta, results, usage);
    if (job->params.kv_transfer.produce) body["kv_transfer_params"] = kv_transfer_params(*job);
    reply(job->responder, 200, kJsonMediaType, dump(body));
}

void Router::fail_job(const std::shared_ptr<Job>& job, int status, const std::string& message, const char* code) {
    job->done = true;
    engines_.abort(job->engine_ids());
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
