// Route dispatch, access checks, and the generation routes' request lifecycle:
//   HTTP thread: Host/Origin/auth/Content-Type checks; cheap routes answered at once
//   worker thread (WorkQueue): parse -> fan-out limit -> tokenize -> validate length ->
//                (stream) send headers -> EngineClient::add (one engine request per prompt x n)
//   engine-client thread: outputs -> ChoiceStream -> SSE chunk / final JSON, metrics, log line
//   client disconnect (HTTP thread): abort the job's engine requests.
#include "moeserve/serve/routes.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <random>

#include "moeserve/serve/openai/parse.h"
#include "moeserve/serve/openai/render.h"
#include "moeserve/serve/stream.h"

namespace moeserve::serve {

using openai::ApiError;
using OJson = nlohmann::ordered_json;

namespace {

constexpr const char* kJson = "application/json";

double steady_seconds() {
    return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

int64_t unix_seconds() {
    return std::chrono::duration_cast<std::chrono::seconds>(
               std::chrono::system_clock::now().time_since_epoch()).count();
}

std::string dump(const OJson& j) { return j.dump(-1, ' ', false, OJson::error_handler_t::replace); }

}  // namespace

// One HTTP generation request: its choices (prompt x n), each an engine request.
struct Router::Job {
    bool chat = false;
    openai::ResponseMeta meta;
    openai::GenerationParams params;
    std::shared_ptr<Responder> responder;
    std::vector<std::string> engine_ids;          // per choice
    std::vector<std::unique_ptr<ChoiceStream>> streams;
    std::vector<openai::ChoiceData> results;      // per choice: accumulated (non-streaming)
    std::vector<int64_t> prompt_tokens;           // per choice
    std::vector<size_t> prompt_of_choice;
    std::vector<std::string> echo;                // per choice: prompt text to echo
    std::vector<double> first_token_time;         // per choice, 0 = none yet
    std::vector<int64_t> cached_tokens;
    std::vector<bool> first_chunk_sent;
    size_t num_finished = 0;
    std::atomic<bool> done{false};
    double arrival = 0;
    std::atomic<bool> disconnected{false};
};

Router::Router(RouterConfig config, const tokenizer::Tokenizer& tokenizer, EngineClient& engines,
               Metrics& metrics, Logger& logger)
    : config_(std::move(config)), tokenizer_(tokenizer), engines_(engines), metrics_(metrics),
      logger_(logger), id_salt_(std::random_device{}()), workers_(config_.num_workers) {
    if (!config_.chat_template.empty()) {
        chat_template_ = tokenizer::ChatTemplate::parse(config_.chat_template);
    } else if (tokenizer_.chat_template()) {
        chat_template_ = tokenizer::ChatTemplate::parse(*tokenizer_.chat_template());
    }
    // Every token decodes to at most max_token bytes; Unicode normalization before the model
    // can shrink text at most 3x (decomposed Hangul to a syllable), so a text of more than
    // max_model_len * max_token * 4 bytes cannot fit, however it is split.
    size_t max_token = 1;
    std::string bytes;
    for (int32_t id = 0; id < tokenizer_.vocab_size(); ++id) {
        bytes.clear();
        if (tokenizer_.append_token_bytes(id, false, false, bytes)) max_token = std::max(max_token, bytes.size());
    }
    max_prompt_bytes_ = static_cast<size_t>(config_.limits.max_model_len) * max_token * 4;
}

Router::~Router() = default;

std::string Router::new_request_id(const char* prefix) {
    return fmt::format("{}-{:08x}{:x}", prefix, static_cast<uint32_t>(id_salt_), next_id_.fetch_add(1));
}

void Router::reply(const std::shared_ptr<Responder>& responder, int status, std::string content_type,
                   std::string body) {
    metrics_.on_http_status(status);
    responder->respond(status, std::move(content_type), std::move(body));
}

namespace {

bool constant_time_equal(std::string_view a, std::string_view b) {
    size_t diff = a.size() ^ b.size();
    const size_t n = std::max(a.size(), b.size());
    for (size_t i = 0; i < n; ++i) {
        diff |= static_cast<unsigned char>(i < a.size() ? a[i] : 0) ^ static_cast<unsigned char>(i < b.size() ? b[i] : 0);
    }
    return diff == 0;
}

std::string lower(std::string s) {
    for (auto& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    return s;
}

// "Host: name[:port]" or "[v6]:port" -> the name, lower case.
std::string host_name(const std::string& host) {
    if (!host.empty() && host[0] == '[') return lower(host.substr(1, host.find(']') - 1));
    const size_t colon = host.find(':');
    if (colon != std::string::npos && host.find(':', colon + 1) == std::string::npos) return lower(host.substr(0, colon));
    return lower(host);
}

bool is_loopback_name(const std::string& name) {
    if (name == "localhost" || name == "::1" || name == "0:0:0:0:0:0:0:1") return true;
    if (name.size() > 10 && name.compare(name.size() - 10, 10, ".localhost") == 0) return true;
    if (name.rfind("127.", 0) != 0) return false;
    return name.find_first_not_of("0123456789.") == std::string::npos;
}

// "application/json" or "application/json; charset=utf-8" (case-insensitive).
bool is_json_media_type(const std::string& content_type) {
    std::string media = lower(content_type.substr(0, content_type.find(';')));
    media.erase(media.find_last_not_of(" \t") + 1);
    media.erase(0, media.find_first_not_of(" \t"));
    return media == "application/json";
}

}  // namespace

template <typename F>
void Router::guarded(const HttpRequest& request, const std::shared_ptr<Responder>& responder, F&& fn) {
    try {
        fn();
    } catch (const ApiError& e) {
        reply(responder, e.status(), kJson, openai::error_body(e));
    } catch (const Error& e) {
        reply(responder, 400, kJson, openai::error_body(ApiError(400, e.what())));
    } catch (const std::exception& e) {
        MOESERVE_LOG_E(logger_, "api", "%s %s: internal error: %s", request.method.c_str(),
                       request.target.c_str(), e.what());
        reply(responder, 500, kJson, openai::error_body(ApiError(500, std::string("internal error: ") + e.what(), "server_error")));
    }
}

template <typename F>
void Router::defer(HttpRequest request, std::shared_ptr<Responder> responder, F fn) {
    workers_.post([this, request = std::move(request), responder = std::move(responder), fn = std::move(fn)] {
        guarded(request, responder, [&] { fn(request, responder); });
    });
}

void Router::handle(HttpRequest request, std::shared_ptr<Responder> responder) {
    guarded(request, responder, [&] { route(request, responder); });
}

bool Router::host_allowed(const std::string& host) const {
    const std::string name = host_name(host);
    for (const auto& allowed : config_.allowed_hosts) {
        if (allowed == "*" || lower(allowed) == name) return true;
    }
    if (config_.loopback_only) return is_loopback_name(name);
    return config_.allowed_hosts.empty();
}

// The Host / Origin policy (DNS rebinding, cross-site requests), then auth: before any work.
void Router::check_access(const HttpRequest& request, const std::string& path) const {
    if (!request.host.empty() && !host_allowed(request.host)) {
        throw ApiError(403, fmt::format("Host '{}' is not allowed: this server answers loopback names only; "
                                        "name other hosts with --allowed-hosts.", request.host),
                       "invalid_request_error", std::nullopt, "host_not_allowed");
    }
    if (!request.origin.empty()) {
        const size_t scheme = request.origin.find("://");
        const std::string origin_host = scheme == std::string::npos ? request.origin : request.origin.substr(scheme + 3);
        if (!host_allowed(origin_host)) {
            throw ApiError(403, fmt::format("Cross-origin requests from '{}' are not allowed; name the host with --allowed-hosts.", request.origin),
                           "invalid_request_error", std::nullopt, "origin_not_allowed");
        }
    }
    if (path.rfind("/v1/", 0) == 0 && !config_.api_keys.empty()) {
        const std::string_view prefix = "Bearer ";
        const std::string_view auth = request.authorization;
        const std::string_view given = auth.substr(0, prefix.size()) == prefix ? auth.substr(prefix.size()) : std::string_view();
        bool ok = false;
        for (const auto& key : config_.api_keys) ok |= constant_time_equal(given, key);  // no early exit
        if (!ok) {
            throw ApiError(401, "Incorrect API key provided. Send it as 'Authorization: Bearer <key>'.",
                           "invalid_request_error", std::nullopt, "invalid_api_key");
        }
    }
}

std::vector<int32_t> Router::encode_prompt(const std::string& text, bool add_special_tokens, const char* param) const {
    if (text.size() > max_prompt_bytes_) {
        throw ApiError(400, fmt::format("This model's maximum context length is {} tokens; the prompt has {} bytes, "
                                        "more than any {}-token text can have.",
                                        config_.limits.max_model_len, text.size(), config_.limits.max_model_len),
                       "invalid_request_error", param);
    }
    return tokenizer_.encode(text, add_special_tokens);
}

void Router::route(HttpRequest& request, const std::shared_ptr<Responder>& responder) {
    std::string path = request.target.substr(0, request.target.find('?'));
    const std::string& root = config_.root_path;
    if (!root.empty() && path.rfind(root, 0) == 0 && (path.size() == root.size() || path[root.size()] == '/')) {
        path = path.size() == root.size() ? "/" : path.substr(root.size());
    }
    check_access(request, path);
    const bool get = request.method == "GET" || request.method == "HEAD", post = request.method == "POST";
    const auto method_check = [&](bool ok) {
        if (!ok) throw ApiError(405, fmt::format("Method {} is not allowed on {}", request.method, path), "invalid_request_error", std::nullopt, "method_not_allowed");
    };
    // JSON routes take JSON only: a cross-site form or text/plain POST (no CORS preflight) is refused.
    const auto json_check = [&] {
        if ((!request.body.empty() || !request.content_type.empty()) && !is_json_media_type(request.content_type)) {
            throw ApiError(415, fmt::format("Content-Type must be application/json; got '{}'.", request.content_type),
                           "invalid_request_error", std::nullopt, "unsupported_media_type");
        }
    };
    if (path == "/health" || path == "/ping") {  // /ping: SageMaker's, GET or POST, as vLLM
        method_check(get || (post && path == "/ping"));
        const bool ok = engines_.healthy();
        return reply(responder, ok ? 200 : 503, kJson, ok ? "{}" : openai::error_body(ApiError(503, "The engine is not running.", "server_error", std::nullopt, "engine_unavailable")));
    }
    if (path == "/version") {
        method_check(get);
        return reply(responder, 200, kJson, dump(OJson{{"version", config_.version}}));
    }
    if (path == "/metrics") {
        method_check(get);
        return reply(responder, 200, "text/plain; version=0.0.4; charset=utf-8",
                     metrics_.render(engines_.stats(), engines_.num_in_flight()));
    }
    if (path == "/v1/models" || path.rfind("/v1/models/", 0) == 0) {
        method_check(get);
        const auto model = [&](const std::string& id) {
            return OJson{{"id", id}, {"object", "model"}, {"created", unix_seconds()}, {"owned_by", "moeserve"},
                         {"root", config_.model_path}, {"parent", nullptr}, {"max_model_len", config_.limits.max_model_len}};
        };
        std::vector<std::string> names = {config_.limits.served_model_name};
        names.insert(names.end(), config_.limits.model_aliases.begin(), config_.limits.model_aliases.end());
        if (path == "/v1/models") {
            OJson data = OJson::array();
            for (const auto& n : names) data.push_back(model(n));
            return reply(responder, 200, kJson, dump(OJson{{"object", "list"}, {"data", data}}));
        }
        const std::string id = path.substr(std::string("/v1/models/").size());
        if (std::find(names.begin(), names.end(), id) == names.end()) {
            throw ApiError(404, fmt::format("The model `{}` does not exist.", id), "invalid_request_error", "model", "model_not_found");
        }
        return reply(responder, 200, kJson, dump(model(id)));
    }
    if (path == "/v1/completions" || path == "/v1/chat/completions") {
        method_check(post);
        json_check();
        const bool chat = path == "/v1/chat/completions";
        return defer(std::move(request), responder, [this, chat](const HttpRequest& r, const std::shared_ptr<Responder>& resp) {
            generate(openai::parse_body(r.body), chat, resp);
        });
    }
    if (path == "/tokenize") {
        method_check(post);
        json_check();
        return defer(std::move(request), responder, [this](const HttpRequest& req, const std::shared_ptr<Responder>& resp) {
            const auto r = openai::parse_tokenize_request(openai::parse_body(req.body), config_.limits);
            const std::vector<int32_t> ids =
                r.prompt ? encode_prompt(*r.prompt, r.add_special_tokens, "prompt")
                         : chat_prompt(r.messages, r.add_generation_prompt, r.continue_final_message,
                                       nullptr, r.chat_template_kwargs);
            reply(resp, 200, kJson, dump(OJson{{"count", ids.size()}, {"max_model_len", config_.limits.max_model_len}, {"tokens", ids}, {"token_strs", nullptr}}));
        });
    }
    if (path == "/detokenize") {
        method_check(post);
        json_check();
        return defer(std::move(request), responder, [this](const HttpRequest& req, const std::shared_ptr<Responder>& resp) {
            const auto r = openai::parse_detokenize_request(openai::parse_body(req.body), config_.limits);
            reply(resp, 200, kJson, dump(OJson{{"prompt", tokenizer_.decode(r.tokens)}}));
        });
    }
    throw ApiError(404, fmt::format("Route {} {} not found", request.method, path),
                   "invalid_request_error", std::nullopt, "not_found");
}

std::vector<int32_t> Router::chat_prompt(const OJson& messages, bool add_generation_prompt,
                                         bool continue_final_message, const OJson& tools,
                                         const OJson& kwargs) const {
    if (!chat_template_) {
        throw ApiError(400, "This model's tokenizer_config.json has no chat_template; use /v1/completions.");
    }
    OJson extra = kwargs.is_object() ? kwargs : OJson::object();
    for (const char* reserved : {"messages", "add_generation_prompt", "tools"}) {  // validated above
        if (extra.contains(reserved)) {
            throw ApiError(400, fmt::format("chat_template_kwargs may not set '{}'; pass it as a request field.", reserved),
                           "invalid_request_error", fmt::format("chat_template_kwargs.{}", reserved));
        }
    }
    if (tokenizer_.bos_token()) extra["bos_token"] = *tokenizer_.bos_token();
    if (tokenizer_.eos_token()) extra["eos_token"] = *tokenizer_.eos_token();
    if (tools.is_array()) extra["tools"] = tools;
    std::string text = tokenizer::render_chat(*chat_template_, messages, add_generation_prompt, extra);
    if (continue_final_message) {
        // As vLLM: cut everything the template appended after the final message's content.
        const auto& last = messages.back();
        const auto content = last.find("content");
        if (content != last.end() && content->is_string() && !content->get<std::string>().empty()) {
            const size_t pos = text.rfind(content->get<std::string>());
            if (pos != std::string::npos) text.resize(pos + content->get<std::string>().size());
        }
    }
    // As transformers' apply_chat_template: the template adds any BOS itself.
    return encode_prompt(text, /*add_special_tokens=*/false, "messages");
}

void Router::generate(const OJson& body, bool chat, const std::shared_ptr<Responder>& responder) {
    const auto check_fan_out = [this](size_t num_prompts, int32_t n) {
        const size_t choices = num_prompts * static_cast<size_t>(std::max(1, n));
        if (choices > static_cast<size_t>(config_.max_choices_per_request)) {
            throw ApiError(400, fmt::format("This request asks for {} sequences ({} prompts x n={}); the limit is {} "
                                            "(--max-choices-per-request).", choices, num_prompts, n, config_.max_choices_per_request),
                           "invalid_request_error", "n");
        }
    };
    if (draining_) throw ApiError(503, "The server is shutting down.", "server_error", std::nullopt, "shutting_down");
    auto job = std::make_shared<Job>();
    job->chat = chat;
    job->responder = responder;
    job->arrival = steady_seconds();
    job->meta = {new_request_id(chat ? "chatcmpl" : "cmpl"), unix_seconds(), config_.limits.served_model_name};

    // 1. Prompts as token ids (one per completion prompt, one for chat).
    std::vector<std::vector<int32_t>> prompts;
    std::vector<std::string> prompt_texts;
    bool echo = false;
    if (chat) {
        auto r = openai::parse_chat_request(body, config_.limits);
        job->params = std::move(r.params);
        check_fan_out(1, job->params.n);
        prompts.push_back(chat_prompt(r.messages, r.add_generation_prompt, r.continue_final_message, r.tools, r.chat_template_kwargs));
        prompt_texts.emplace_back();
    } else {
        auto r = openai::parse_completion_request(body, config_.limits);
        job->params = std::move(r.params);
        echo = r.echo;
        check_fan_out(r.prompts.size(), job->params.n);
        for (auto& p : r.prompts) {
            if (p.text) {
                prompts.push_back(encode_prompt(*p.text, true, "prompt"));
                prompt_texts.push_back(*p.text);
            } else {
                prompt_texts.push_back(echo ? tokenizer_.decode(p.token_ids) : "");
                prompts.push_back(std::move(p.token_ids));
            }
        }
    }
    // 2. The model's defaults where the request is silent, validate lengths, then build one
    // engine request per (prompt, n).
    const auto& g = config_.generation_defaults;
    const auto absent = [&body](const char* key) { return !body.contains(key) || body[key].is_null(); };
    auto& params = job->params;
    if (g.temperature && absent("temperature")) params.temperature = *g.temperature;
    if (g.top_p && absent("top_p")) params.top_p = *g.top_p;
    if (g.top_k && absent("top_k")) params.top_k = std::max(0, *g.top_k);
    if (g.min_p && absent("min_p")) params.min_p = *g.min_p;
    if (g.repetition_penalty && absent("repetition_penalty")) params.repetition_penalty = *g.repetition_penalty;
    std::vector<ipc::AddRequest> adds;
    const auto& p = job->params;
    for (size_t i = 0; i < prompts.size(); ++i) {
        if (prompts[i].empty()) throw ApiError(400, "The prompt is empty after tokenization.", "invalid_request_error", chat ? "messages" : "prompt");
        openai::GenerationParams sized = p;
        if (!p.max_tokens && g.max_tokens) {
            const int64_t room = config_.limits.max_model_len - static_cast<int64_t>(prompts[i].size());
            sized.max_tokens = static_cast<int32_t>(std::max<int64_t>(1, std::min<int64_t>(*g.max_tokens, room)));
        }
        const int32_t max_tokens = openai::resolve_max_tokens(static_cast<int64_t>(prompts[i].size()), sized, config_.limits, chat);
        for (int32_t k = 0; k < p.n; ++k) {
            ipc::AddRequest a;
            a.request_id = fmt::format("{}-{}", job->meta.id, adds.size());
            a.prompt_token_ids = prompts[i];
            a.arrival_time = job->arrival;
            auto& s = a.sampling;
            s.temperature = p.temperature;
            s.top_p = p.top_p;
            s.top_k = p.top_k < 0 ? 0 : p.top_k;
            s.min_p = p.min_p;
            s.presence_penalty = p.presence_penalty;
            s.frequency_penalty = p.frequency_penalty;
            s.repetition_penalty = p.repetition_penalty;
            if (p.seed) s.seed = *p.seed + static_cast<uint64_t>(k);
            s.max_tokens = max_tokens;
            s.min_tokens = p.min_tokens;
            s.stop_token_ids = p.stop_token_ids;
            if (!p.ignore_eos) {
                s.stop_token_ids.insert(s.stop_token_ids.end(), config_.eos_token_ids.begin(), config_.eos_token_ids.end());
            }
            s.ignore_eos = p.ignore_eos;
            s.logprobs = p.logprobs;
            s.grammar = p.grammar;
            job->engine_ids.push_back(a.request_id);
            job->prompt_tokens.push_back(static_cast<int64_t>(prompts[i].size()));
            job->prompt_of_choice.push_back(i);
            job->echo.push_back(echo ? prompt_texts[i] : "");
            adds.push_back(std::move(a));
        }
    }
    const size_t num_choices = adds.size();
    for (size_t c = 0; c < num_choices; ++c) {
        job->streams.push_back(std::make_unique<ChoiceStream>(tokenizer_, job->params));
        openai::ChoiceData d;
        d.index = static_cast<int32_t>(c);
        d.has_logprobs = p.logprobs.has_value();
        job->results.push_back(std::move(d));
    }
    job->first_token_time.assign(num_choices, 0);
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
        if (!engines_.healthy()) throw ApiError(503, "The engine is not running.", "server_error", std::nullopt, "engine_unavailable");
        metrics_.on_http_status(200);
        responder->start_stream();
    }
    for (size_t c = 0; c < num_choices; ++c) {
        const bool sent = engines_.add(std::move(adds[c]), [this, job, c](const ipc::RequestOutput& out) { on_output(job, c, out); });
        if (!sent) {
            job->done = true;  // later (abort) outputs are ignored
            engines_.abort(std::vector<std::string>(job->engine_ids.begin(), job->engine_ids.begin() + static_cast<long>(c)));
            if (p.stream) {
                responder->send_chunk("data: " + openai::error_body(ApiError(503, "The engine is not running.", "server_error", std::nullopt, "engine_unavailable")) + "\n\n" + openai::sse_done());
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

void Router::on_output(const std::shared_ptr<Job>& job, size_t c, const ipc::RequestOutput& out) {
    if (job->done) return;
    auto& stream = *job->streams[c];
    if (stream.finished()) return;  // after a stop string: the engine's abort output
    if (out.finish_reason == ipc::FinishReason::kError) {
        const bool engine_down = !engines_.healthy();
        MOESERVE_LOG_E(logger_, "api", "request %s failed: %s", out.request_id.c_str(), out.error.c_str());
        metrics_.on_request_finished({"error", job->prompt_tokens[c], stream.num_tokens(), 0, steady_seconds() - job->arrival});
        if (out.overloaded) return fail_job(job, 503, out.error, "queue_timeout");
        return fail_job(job, engine_down ? 503 : 500, (engine_down ? "The engine is not running: " : "The engine failed the request: ") + out.error,
                        engine_down ? "engine_unavailable" : nullptr);
    }
    if (out.num_cached_tokens > 0) job->cached_tokens[c] = out.num_cached_tokens;
    auto delta = stream.push(out);
    if (job->first_token_time[c] == 0 && stream.num_tokens() > 0) job->first_token_time[c] = steady_seconds();
    if (stream.stopped_by_string()) engines_.abort({job->engine_ids[c]});
    auto& result = job->results[c];
    if (job->params.stream) {
        openai::ChoiceData d;
        d.index = result.index;
        d.text = delta.text;
        d.has_logprobs = result.has_logprobs;
        d.logprobs = std::move(delta.logprobs);
        d.text_offset = static_cast<int64_t>(stream.released() - delta.text.size());
        if (!job->first_chunk_sent[c] && !job->echo[c].empty()) d.text = job->echo[c] + d.text;
        if (stream.finished()) {
            d.finish_reason = stream.finish_reason();
            d.stop_reason = stream.stop_reason();
        }
        const bool first = !job->first_chunk_sent[c];
        if (!d.text.empty() || d.finish_reason || !d.logprobs.empty() || (first && job->chat)) {
            job->first_chunk_sent[c] = true;
            if (!job->disconnected) {
                job->responder->send_chunk(openai::sse_event(job->chat ? openai::chat_chunk(job->meta, d, first) : openai::completion_chunk(job->meta, d)));
            }
        }
    } else {
        for (auto& lp : delta.logprobs) result.logprobs.push_back(std::move(lp));
    }
    if (!stream.finished()) return;
    const double now = steady_seconds();
    const double ttft = job->first_token_time[c] > 0 ? job->first_token_time[c] - job->arrival : 0;
    if (config_.log_requests) MOESERVE_LOG_I(logger_, "api", "request %s finished: reason=%s prompt_tokens=%lld output_tokens=%lld ttft=%.3fs e2e=%.3fs",
                   job->engine_ids[c].c_str(), stream.finish_reason().c_str(), static_cast<long long>(job->prompt_tokens[c]),
                   static_cast<long long>(stream.num_tokens()), ttft, now - job->arrival);
    metrics_.on_request_finished({stream.finish_reason(), job->prompt_tokens[c], stream.num_tokens(), ttft, now - job->arrival});
    result.text = job->echo[c] + stream.text();
    result.finish_reason = stream.finish_reason();
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
        usage.completion_tokens += job->streams[c]->num_tokens();
    }
    if (job->params.stream) {
        std::string tail;
        if (job->params.include_usage) tail += openai::sse_event(openai::usage_chunk(job->meta, usage, job->chat));
        tail += openai::sse_done();
        job->responder->send_chunk(std::move(tail));
        job->responder->end_stream();
        return;
    }
    const OJson body = job->chat ? openai::chat_response(job->meta, job->results, usage)
                                 : openai::completion_response(job->meta, job->results, usage);
    reply(job->responder, 200, kJson, dump(body));
}

void Router::fail_job(const std::shared_ptr<Job>& job, int status, const std::string& message, const char* code) {
    job->done = true;
    engines_.abort(job->engine_ids);
    const ApiError error(status, message, "server_error", std::nullopt, code ? std::optional<std::string>(code) : std::nullopt);
    if (job->params.stream) {
        job->responder->send_chunk("data: " + openai::error_body(error) + "\n\n" + openai::sse_done());
        job->responder->end_stream();
    } else {
        reply(job->responder, status, kJson, openai::error_body(error));
    }
}

}  // namespace moeserve::serve
