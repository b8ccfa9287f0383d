#include "moeserve/serve/pd_proxy.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <thread>

#include "moeserve/core/clock.h"
#include "moeserve/core/error.h"
#include "moeserve/serve/openai/render.h"
#include "moeserve/serve/upstream_call.h"

namespace moeserve::serve {

namespace {

using Json = nlohmann::json;
constexpr const char* kJson = "application/json";

std::string error_json(int status, const std::string& message, const char* type = "server_error") {
    return openai::error_body(openai::ApiError(status, message, type));
}

// The tokens a decode instance will owe for this request: max_tokens (or OpenAI's newer name), else
// a guess for requests that leave it open.
int64_t output_tokens_of(const Json& body) {
    for (const char* key : {"max_completion_tokens", "max_tokens"}) {
        if (body.contains(key) && body[key].is_number_integer()) return std::max<int64_t>(1, body[key].get<int64_t>());
    }
    return 256;
}

}  // namespace

struct PdProxy::Flow {
    HttpRequest request;
    std::shared_ptr<Responder> responder;
    std::mutex mutex;              // call
    UpstreamCall* call = nullptr;  // the one running now (run_call's), for cancel()
    std::atomic<bool> disconnected{false};

    // Runs one upstream call, cancellable by the client's disconnect.
    std::string run_call(UpstreamCall& c, const UpstreamRequest& r) {
        {
            std::lock_guard lock(mutex);
            call = &c;
            if (disconnected) c.cancel();
        }
        std::string error = c.run(r);
        std::lock_guard lock(mutex);
        call = nullptr;
        return error;
    }
    void cancel() {
        disconnected = true;
        std::lock_guard lock(mutex);
        if (call) call->cancel();
    }
};

PdProxy::PdProxy(PdProxyOptions options, Logger& logger)
    : options_(std::move(options)), access_(options_.access), logger_(logger) {
    const auto add = [this](const std::string& url, bool prefill) {
        const std::string prefix = "http://";
        std::string rest = url.rfind(prefix, 0) == 0 ? url.substr(prefix.size()) : "";
        while (!rest.empty() && rest.back() == '/') rest.pop_back();
        const size_t colon = rest.rfind(':');
        int port = 0;
        if (colon != std::string::npos && colon + 1 < rest.size()) {
            try {
                port = std::stoi(rest.substr(colon + 1));
            } catch (const std::exception&) {
                port = 0;
            }
        }
        if (rest.empty() || colon == std::string::npos || colon == 0 || port <= 0 || port > 65535 ||
            rest.find('/') != std::string::npos) {
            raise(ErrorCode::kInvalidArgument, "{} instance '{}': expected http://HOST:PORT",
                  prefill ? "prefill" : "decode", url);
        }
        Instance in;
        in.url = url;
        in.host = rest.substr(0, colon);
        if (in.host.size() > 2 && in.host.front() == '[' && in.host.back() == ']')
            in.host = in.host.substr(1, in.host.size() - 2);
        in.port = port;
        in.prefill = prefill;
        instances_.push_back(std::move(in));
    };
    if (options_.prefill_urls.empty() || options_.decode_urls.empty())
        raise(ErrorCode::kInvalidArgument, "the proxy needs at least one --prefill and one --decode instance");
    for (const auto& u : options_.prefill_urls) add(u, true);
    for (const auto& u : options_.decode_urls) add(u, false);
}

PdProxy::~PdProxy() {
    std::unique_lock lock(mutex_);
    for (auto& weak : flows_) {
        if (auto f = weak.lock()) f->cancel();
    }
    idle_cv_.wait(lock, [this] { return in_flight_ == 0; });
}

std::vector<PdProxy::Instance> PdProxy::instances() const {
    std::lock_guard lock(mutex_);
    return instances_;
}

int PdProxy::pick(bool prefill, const std::vector<int>& tried) {
    std::lock_guard lock(mutex_);
    const double now = steady_seconds();
    int best = -1;
    for (int i = 0; i < static_cast<int>(instances_.size()); ++i) {
        const Instance& in = instances_[static_cast<size_t>(i)];
        if (in.prefill != prefill || std::find(tried.begin(), tried.end(), i) != tried.end()) continue;
        const auto better = [&](const Instance& b) {
            const bool down = in.down_until > now, b_down = b.down_until > now;
            if (down != b_down) return !down;  // a reachable one first; a down one only as the last try
            return in.outstanding_tokens < b.outstanding_tokens;
        };
        if (best < 0 || better(instances_[static_cast<size_t>(best)])) best = i;
    }
    if (best >= 0) ++instances_[static_cast<size_t>(best)].requests;
    return best;
}

void PdProxy::add_load(int instance, int64_t tokens) {
    std::lock_guard lock(mutex_);
    instances_[static_cast<size_t>(instance)].outstanding_tokens += tokens;
}

void PdProxy::mark_failed(int instance, const std::string& why) {
    std::lock_guard lock(mutex_);
    Instance& in = instances_[static_cast<size_t>(instance)];
    ++in.failures;
    in.down_until = steady_seconds() + options_.down_ms / 1000.0;
    MOESERVE_LOG_W(logger_, "proxy", "%s instance %s failed (skipped for %d ms): %s", in.prefill ? "prefill" : "decode",
                   in.url.c_str(), options_.down_ms, why.c_str());
}

std::string PdProxy::metrics_text() const {
    std::lock_guard lock(mutex_);
    std::string out =
        "# HELP moeserve:proxy_requests_total Requests the proxy took.\n# TYPE moeserve:proxy_requests_total counter\n";
    out += fmt::format("moeserve:proxy_requests_total {}\n", num_requests_);
    out +=
        "# HELP moeserve:proxy_failed_requests_total Requests that got no answer from any instance.\n"
        "# TYPE moeserve:proxy_failed_requests_total counter\n";
    out += fmt::format("moeserve:proxy_failed_requests_total {}\n", num_failed_);
    out += "# TYPE moeserve:proxy_instance_outstanding_tokens gauge\n";
    for (const auto& in : instances_)
        out += fmt::format("moeserve:proxy_instance_outstanding_tokens{{role=\"{}\",url=\"{}\"}} {}\n",
                           in.prefill ? "prefill" : "decode", in.url, in.outstanding_tokens);
    out += "# TYPE moeserve:proxy_instance_requests_total counter\n";
    for (const auto& in : instances_)
        out += fmt::format("moeserve:proxy_instance_requests_total{{role=\"{}\",url=\"{}\"}} {}\n",
                           in.prefill ? "prefill" : "decode", in.url, in.requests);
    out += "# TYPE moeserve:proxy_instance_failures_total counter\n";
    for (const auto& in : instances_)
        out += fmt::format("moeserve:proxy_instance_failures_total{{role=\"{}\",url=\"{}\"}} {}\n",
                           in.prefill ? "prefill" : "decode", in.url, in.failures);
    return out;
}

std::optional<HttpError> PdProxy::check_head(const HttpRequest& head) const {
    return access_.check_head(head, head.target.substr(0, head.target.find('?')));
}

void PdProxy::handle(HttpRequest request, std::shared_ptr<Responder> responder) {
    const std::string path = request.target.substr(0, request.target.find('?'));
    // What `serve` refuses, the proxy refuses too (cross-site pages, DNS rebinding, no key).
    if (auto refused = access_.check_head(request, path)) {
        return responder->respond(refused->status, kJson, std::move(refused->body));
    }
    const bool get = request.method == "GET" || request.method == "HEAD";
    if (get && path == "/health") return responder->respond(200, "text/plain", "");
    if (get && path == "/metrics") return responder->respond(200, "text/plain; version=0.0.4", metrics_text());
    const bool generate = request.method == "POST" && (path == "/v1/completions" || path == "/v1/chat/completions");
    if (!generate && !(get && path == "/v1/models")) {
        return responder->respond(404, kJson, error_json(404, "Not found: " + path, "not_found_error"));
    }
    auto flow = std::make_shared<Flow>();
    flow->request = std::move(request);
    flow->responder = std::move(responder);
    {
        std::lock_guard lock(mutex_);
        if (in_flight_ >= options_.max_in_flight) {
            return flow->responder->respond(
                503, kJson,
                error_json(503,
                           fmt::format("The proxy has {} requests in flight (its limit).", options_.max_in_flight)));
        }
        ++in_flight_;
        ++num_requests_;
        std::erase_if(flows_, [](const std::weak_ptr<Flow>& w) { return w.expired(); });
        flows_.push_back(flow);
    }
    flow->responder->on_disconnect([weak = std::weak_ptr<Flow>(flow)] {
        if (auto f = weak.lock()) f->cancel();
    });
    std::thread([this, flow] {
        try {
            run(flow);
        } catch (const std::exception& e) {
            flow->responder->respond(500, kJson, error_json(500, std::string("proxy: ") + e.what()));
        }
        std::lock_guard lock(mutex_);
        --in_flight_;
        idle_cv_.notify_all();
    }).detach();
}

void PdProxy::run(const std::shared_ptr<Flow>& flow) {
    HttpRequest& req = flow->request;
    Responder& out = *flow->responder;
    const auto fail = [&](int status, const std::string& message) {
        {
            std::lock_guard lock(mutex_);
            ++num_failed_;
        }
        out.respond(status, kJson, error_json(status, message));
    };
    const auto upstream = [&](const Instance& in, const std::string& body) {
        UpstreamRequest r;
        r.host = in.host;
        r.port = in.port;
        r.method = req.method == "HEAD" ? "GET" : req.method;
        r.target = req.target;
        r.body = body;
        r.authorization = req.authorization;
        r.connect_timeout_ms = options_.connect_timeout_ms;
        r.idle_timeout_ms = options_.idle_timeout_ms;
        return r;
    };
    const auto instance = [this](int i) {
        std::lock_guard lock(mutex_);
        return instances_[static_cast<size_t>(i)];
    };

    if (req.method != "POST") {  // GET /v1/models: any decode instance answers for the deployment
        std::vector<int> tried;
        std::string last_error;
        for (int i; (i = pick(false, tried)) >= 0;) {
            tried.push_back(i);
            UpstreamCall call;
            int status = 0;
            std::string type, body;
            call.on_head = [&](int s, const std::string& t) { status = s, type = t; };
            call.on_body = [&](std::string_view b) { body.append(b); };
            last_error = flow->run_call(call, upstream(instance(i), ""));
            if (last_error.empty()) return out.respond(status, type, body);
            if (flow->disconnected) return;
            mark_failed(i, last_error);
        }
        return fail(503, "No decode instance answered: " + last_error);
    }

    Json body = Json::parse(req.body, nullptr, false);
    if (!body.is_object()) {
        return out.respond(400, kJson,
                           error_json(400, "The request body is not a JSON object.", "invalid_request_error"));
    }
    // 1. The prefill half.
    Json prefill = body;
    prefill.erase("max_completion_tokens");
    prefill.erase("stream_options");
    prefill["max_tokens"] = 1;
    prefill["stream"] = false;
    if (prefill.contains("min_tokens") && prefill["min_tokens"].is_number_integer() &&
        prefill["min_tokens"].get<int64_t>() > 1)
        prefill["min_tokens"] = 1;  // the first token may not be EOS exactly when the client's min_tokens >= 1
    prefill["kv_transfer_params"] = {{"do_remote_decode", true}};
    const std::string prefill_body = prefill.dump();
    const int64_t estimated_prompt = static_cast<int64_t>(req.body.size() / 4) + 1;  // ~4 bytes per token
    std::vector<int> tried;
    std::string last_error, answer, answer_type;
    int status = 0;
    for (int i; (i = pick(true, tried)) >= 0;) {
        tried.push_back(i);
        UpstreamCall call;
        answer.clear();
        call.on_head = [&](int s, const std::string& t) { status = s, answer_type = t; };
        call.on_body = [&](std::string_view b) { answer.append(b); };
        add_load(i, estimated_prompt);
        last_error = flow->run_call(call, upstream(instance(i), prefill_body));
        add_load(i, -estimated_prompt);
        if (flow->disconnected) return;
        if (last_error.empty()) break;
        mark_failed(i, last_error);
        if (call.answered()) return fail(502, "The prefill instance broke off: " + last_error);
    }
    if (!last_error.empty() || status == 0) return fail(503, "No prefill instance answered: " + last_error);
    if (status != 200) return out.respond(status, answer_type, answer);  // the request's own fault, as it said
    const Json prefilled = Json::parse(answer, nullptr, false);
    if (!prefilled.is_object() || !prefilled.contains("kv_transfer_params")) {
        return fail(502,
                    "The prefill instance's answer has no kv_transfer_params (is it started with "
                    "--kv-transfer-config and kv_role kv_producer?)");
    }
    // 2. The decode half: the client's own request, continuing from that KV.
    body["kv_transfer_params"] = prefilled["kv_transfer_params"];
    const std::string decode_body = body.dump();
    int64_t load = output_tokens_of(body);
    if (prefilled.contains("usage") && prefilled["usage"].value("prompt_tokens", 0) > 0)
        load += prefilled["usage"]["prompt_tokens"].get<int64_t>();
    tried.clear();
    for (int i; (i = pick(false, tried)) >= 0;) {
        tried.push_back(i);
        UpstreamCall call;
        bool streaming = false;
        answer.clear();
        call.on_head = [&](int s, const std::string& t) {
            status = s, answer_type = t;
            streaming = s == 200 && t.rfind("text/event-stream", 0) == 0;
            if (streaming) out.start_stream();
        };
        call.on_body = [&](std::string_view b) {
            if (streaming) {
                out.send_chunk(std::string(b));
            } else {
                answer.append(b);
            }
        };
        add_load(i, load);
        last_error = flow->run_call(call, upstream(instance(i), decode_body));
        add_load(i, -load);
        if (flow->disconnected) return;
        if (last_error.empty()) {
            if (streaming) return out.end_stream();
            return out.respond(status, answer_type, answer);
        }
        mark_failed(i, last_error);
        if (!call.answered()) continue;  // nothing reached the client: the next decode instance may take it
        {
            std::lock_guard lock(mutex_);
            ++num_failed_;
        }
        const std::string message = "The decode instance broke off: " + last_error;
        if (!streaming) return out.respond(502, kJson, error_json(502, message));
        out.send_chunk("data: " + error_json(502, message) + "\n\ndata: [DONE]\n\n");
        return out.end_stream();
    }
    fail(503, "No decode instance answered: " + last_error);
}

}  // namespace moeserve::serve
