// Route dispatch and access checks: on the HTTP thread, Host/Origin/auth/Content-Type checks,
// cheap routes answered at once; generation and tokenization run on a worker (WorkQueue), the
// generation lifecycle in generate_route.cpp.
#include "moeserve/serve/routes.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <random>

#include "moeserve/serve/openai/parse.h"
#include "moeserve/serve/openai/render.h"
#include "moeserve/serve/route_util.h"

namespace moeserve::serve {

using openai::ApiError;
using OJson = nlohmann::ordered_json;

Router::Router(RouterConfig config, const tokenizer::Tokenizer& tokenizer, EngineClient& engines, Metrics& metrics,
               Logger& logger)
    : config_(std::move(config)),
      request_limits_{.max_model_len = config_.limits.max_model_len,
                      .vocab_size = config_.limits.vocab_size,
                      .max_logprobs = config_.limits.max_logprobs,
                      .eos_token_ids = config_.eos_token_ids},
      tokenizer_(tokenizer),
      engines_(engines),
      metrics_(metrics),
      logger_(logger),
      id_salt_(std::random_device{}()),
      workers_(config_.num_workers) {
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
        diff |=
            static_cast<unsigned char>(i < a.size() ? a[i] : 0) ^ static_cast<unsigned char>(i < b.size() ? b[i] : 0);
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
    if (colon != std::string::npos && host.find(':', colon + 1) == std::string::npos)
        return lower(host.substr(0, colon));
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
        reply(responder, e.status(), kJsonMediaType, openai::error_body(e));
    } catch (const Error& e) {
        reply(responder, 400, kJsonMediaType, openai::error_body(ApiError(400, e.what())));
    } catch (const std::exception& e) {
        MOESERVE_LOG_E(logger_, "api", "%s %s: internal error: %s", request.method.c_str(), request.target.c_str(),
                       e.what());
        reply(responder, 500, kJsonMediaType,
              openai::error_body(ApiError(500, std::string("internal error: ") + e.what(), "server_error")));
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
        throw ApiError(403,
                       fmt::format("Host '{}' is not allowed: this server answers loopback names only; "
                                   "name other hosts with --allowed-hosts.",
                                   request.host),
                       "invalid_request_error", std::nullopt, "host_not_allowed");
    }
    if (!request.origin.empty()) {
        const size_t scheme = request.origin.find("://");
        const std::string origin_host =
            scheme == std::string::npos ? request.origin : request.origin.substr(scheme + 3);
        const auto& origins = config_.allowed_origins;
        const bool listed = std::find(origins.begin(), origins.end(), "*") != origins.end() ||
                            std::find(origins.begin(), origins.end(), request.origin) != origins.end();
        if (!listed && !host_allowed(origin_host)) {
            throw ApiError(403,
                           fmt::format("Cross-origin requests from '{}' are not allowed; name the origin with "
                                       "--allowed-origins (or its host with --allowed-hosts).",
                                       request.origin),
                           "invalid_request_error", std::nullopt, "origin_not_allowed");
        }
    }
    if (path.rfind("/v1/", 0) == 0 && !config_.api_keys.empty()) {
        const std::string_view prefix = "Bearer ";
        const std::string_view auth = request.authorization;
        const std::string_view given =
            auth.substr(0, prefix.size()) == prefix ? auth.substr(prefix.size()) : std::string_view();
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
        throw ApiError(400,
                       fmt::format("This model's maximum context length is {} tokens; the prompt has {} bytes, "
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
        if (!ok)
            throw ApiError(405, fmt::format("Method {} is not allowed on {}", request.method, path),
                           "invalid_request_error", std::nullopt, "method_not_allowed");
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
        return reply(responder, ok ? 200 : 503, kJsonMediaType,
                     ok ? "{}"
                        : openai::error_body(ApiError(503, "The engine is not running.", "server_error", std::nullopt,
                                                      "engine_unavailable")));
    }
    if (path == "/load") {  // vLLM's: requests in flight (it counts them with --enable-server-load-tracking)
        method_check(get);
        return reply(responder, 200, kJsonMediaType, dump(OJson{{"server_load", engines_.num_in_flight()}}));
    }
    if (path == "/version") {
        method_check(get);
        return reply(responder, 200, kJsonMediaType, dump(OJson{{"version", config_.version}}));
    }
    if (path == "/metrics") {
        method_check(get);
        return reply(responder, 200, "text/plain; version=0.0.4; charset=utf-8",
                     metrics_.render(engines_.stats(), engines_.num_in_flight()));
    }
    if (path == "/v1/models" || path.rfind("/v1/models/", 0) == 0) {
        method_check(get);
        const auto model = [&](const std::string& id) {
            return OJson{{"id", id},
                         {"object", "model"},
                         {"created", unix_seconds()},
                         {"owned_by", "moeserve"},
                         {"root", config_.model_path},
                         {"parent", nullptr},
                         {"max_model_len", config_.limits.max_model_len}};
        };
        std::vector<std::string> names = {config_.limits.served_model_name};
        names.insert(names.end(), config_.limits.model_aliases.begin(), config_.limits.model_aliases.end());
        if (path == "/v1/models") {
            OJson data = OJson::array();
            for (const auto& n : names) data.push_back(model(n));
            return reply(responder, 200, kJsonMediaType, dump(OJson{{"object", "list"}, {"data", data}}));
        }
        const std::string id = path.substr(std::string("/v1/models/").size());
        if (std::find(names.begin(), names.end(), id) == names.end()) {
            throw ApiError(404, fmt::format("The model `{}` does not exist.", id), "invalid_request_error", "model",
                           "model_not_found");
        }
        return reply(responder, 200, kJsonMediaType, dump(model(id)));
    }
    if (path == "/v1/completions" || path == "/v1/chat/completions") {
        method_check(post);
        json_check();
        const bool chat = path == "/v1/chat/completions";
        return defer(std::move(request), responder,
                     [this, chat](const HttpRequest& r, const std::shared_ptr<Responder>& resp) {
                         generate(openai::parse_body(r.body), chat, resp);
                     });
    }
    if (path == "/tokenize") {
        method_check(post);
        json_check();
        return defer(std::move(request), responder,
                     [this](const HttpRequest& req, const std::shared_ptr<Responder>& resp) {
                         const auto r = openai::parse_tokenize_request(openai::parse_body(req.body), config_.limits);
                         warn_unknown_fields(r.unknown_fields, "/tokenize");
                         const std::vector<int32_t> ids =
                             r.prompt ? encode_prompt(*r.prompt, r.add_special_tokens, "prompt")
                                      : chat_prompt({&r.messages, r.add_generation_prompt, r.continue_final_message,
                                                     false, r.tools, r.chat_template_kwargs, ""})
                                            .ids;
                         OJson strs = nullptr;
                         if (r.return_token_strs) {  // the vocabulary's tokens, as transformers' convert_ids_to_tokens
                             strs = OJson::array();
                             for (int32_t id : ids) strs.push_back(tokenizer_.id_to_token(id).value_or(""));
                         }
                         reply(resp, 200, kJsonMediaType,
                               dump(OJson{{"count", ids.size()},
                                          {"max_model_len", config_.limits.max_model_len},
                                          {"tokens", ids},
                                          {"token_strs", strs}}));
                     });
    }
    if (path == "/detokenize") {
        method_check(post);
        json_check();
        return defer(std::move(request), responder,
                     [this](const HttpRequest& req, const std::shared_ptr<Responder>& resp) {
                         const auto r = openai::parse_detokenize_request(openai::parse_body(req.body), config_.limits);
                         reply(resp, 200, kJsonMediaType, dump(OJson{{"prompt", tokenizer_.decode(r.tokens)}}));
                     });
    }
    throw ApiError(404, fmt::format("Route {} {} not found", request.method, path), "invalid_request_error",
                   std::nullopt, "not_found");
}

}  // namespace moeserve::serve
