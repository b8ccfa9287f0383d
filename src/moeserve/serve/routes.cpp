// Route dispatch and access checks: on the HTTP thread, Host/Origin/auth/Content-Type checks,
// cheap routes answered at once; generation and tokenization run on a worker (WorkQueue), the
// generation lifecycle in generate_route.cpp.
#include "moeserve/serve/routes.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <random>

#include "moeserve/serve/access_log.h"
#include "moeserve/serve/openai/chat_messages.h"
#include "moeserve/serve/openai/parse.h"
#include "moeserve/serve/openai/render.h"
#include "moeserve/serve/route_util.h"

namespace moeserve::serve {

using openai::ApiError;
using OJson = nlohmann::ordered_json;

Router::Router(RouterConfig config, const tokenizer::Tokenizer& tokenizer, EngineClient& engines, Metrics& metrics,
               Logger& logger)
    : config_(std::move(config)),
      access_(config_.access),
      request_limits_{.max_model_len = config_.limits.max_model_len,
                      .vocab_size = config_.limits.vocab_size,
                      .max_logprobs = config_.limits.max_logprobs,
                      .eos_token_ids = config_.eos_token_ids},
      tokenizer_(tokenizer),
      engines_(engines),
      metrics_(metrics),
      logger_(logger),
      id_salt_(std::random_device{}()),
      responses_(std::make_shared<ResponseStore>(config_.responses_store_size)),
      workers_(config_.num_workers) {
    if (!config_.chat_template.empty()) {
        chat_template_ = tokenizer::ChatTemplate::parse(config_.chat_template);
        template_wants_argument_objects_ = openai::template_wants_argument_objects(config_.chat_template);
    } else if (tokenizer_.chat_template()) {
        chat_template_ = tokenizer::ChatTemplate::parse(*tokenizer_.chat_template());
        template_wants_argument_objects_ = openai::template_wants_argument_objects(*tokenizer_.chat_template());
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
    if (config_.access_log)
        responder =
            std::make_shared<AccessLogResponder>(std::move(responder), request, access_.client(request), logger_);
    guarded(request, responder, [&] { route(request, responder); });
}

std::string Router::route_path(const std::string& target) const {
    std::string path = target.substr(0, target.find('?'));
    const std::string& root = config_.root_path;
    if (!root.empty() && path.rfind(root, 0) == 0 && (path.size() == root.size() || path[root.size()] == '/')) {
        path = path.size() == root.size() ? "/" : path.substr(root.size());
    }
    return path;
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

void Router::reply_health(const std::shared_ptr<Responder>& responder) {
    // Unhealthy: why (an engine recovering, dead, starting or stalled), and the code a load
    // balancer can tell a restart in progress by.
    const std::string why = engines_.unhealthy_reason();
    if (why.empty()) return reply(responder, 200, kJsonMediaType, "{}");
    const bool recovering = engines_.num_recovering() > 0;
    return reply(responder, 503, kJsonMediaType,
                 openai::error_body(ApiError(503, "The engine is not running: " + why, "server_error", std::nullopt,
                                             recovering ? "engine_recovering" : "engine_unavailable")));
}

// GET /v1/models and /v1/models/{id}: the served name and its aliases.
void Router::reply_models(const std::string& path, const std::shared_ptr<Responder>& responder) {
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

// POST /tokenize: a prompt, or chat messages rendered by the chat template.
void Router::tokenize(const nlohmann::ordered_json& body, const std::shared_ptr<Responder>& responder) {
    const auto r = openai::parse_tokenize_request(body, config_.limits);
    warn_unknown_fields(r.unknown_fields, "/tokenize");
    const std::vector<int32_t> ids = r.prompt
                                         ? encode_prompt(*r.prompt, r.add_special_tokens, "prompt")
                                         : chat_prompt({&r.messages, r.add_generation_prompt, r.continue_final_message,
                                                        false, r.tools, r.chat_template_kwargs, ""})
                                               .ids;
    OJson strs = nullptr;
    if (r.return_token_strs) {  // the vocabulary's tokens, as transformers' convert_ids_to_tokens
        strs = OJson::array();
        for (int32_t id : ids) strs.push_back(tokenizer_.id_to_token(id).value_or(""));
    }
    reply(responder, 200, kJsonMediaType,
          dump(OJson{{"count", ids.size()},
                     {"max_model_len", config_.limits.max_model_len},
                     {"tokens", ids},
                     {"token_strs", strs}}));
}

void Router::route(HttpRequest& request, const std::shared_ptr<Responder>& responder) {
    const std::string path = route_path(request.target);
    access_.check(request, path);
    const bool get = request.method == "GET" || request.method == "HEAD", post = request.method == "POST";
    const auto method_check = [&](bool ok) {
        if (!ok)
            throw ApiError(405, fmt::format("Method {} is not allowed on {}", request.method, path),
                           "invalid_request_error", std::nullopt, "method_not_allowed");
    };
    // JSON routes take JSON only: a cross-site form or text/plain POST (no CORS preflight) is refused.
    const auto json_check = [&] { AccessPolicy::check_json(request); };
    if (path == "/health" || path == "/ping") {  // /ping: SageMaker's, GET or POST, as vLLM
        method_check(get || (post && path == "/ping"));
        return reply_health(responder);
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
        return reply_models(path, responder);
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
    if (path == "/v1/responses") {
        method_check(post);
        json_check();
        return defer(std::move(request), responder,
                     [this](const HttpRequest& r, const std::shared_ptr<Responder>& resp) {
                         responses(openai::parse_body(r.body), resp);
                     });
    }
    if (path.rfind("/v1/responses/", 0) == 0) {
        method_check(get);
        const std::string id = path.substr(std::string("/v1/responses/").size());
        return reply(responder, 200, kJsonMediaType, dump(stored_response(id).response));
    }
    if (path == "/tokenize") {
        method_check(post);
        json_check();
        return defer(std::move(request), responder,
                     [this](const HttpRequest& req, const std::shared_ptr<Responder>& resp) {
                         tokenize(openai::parse_body(req.body), resp);
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
