#include "moeserve/serve/pd_proxy.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <thread>
#include <utility>

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
    std::mutex mutex;                  // calls
    std::vector<UpstreamCall*> calls;  // the ones running now (run_call's), for cancel()
    std::atomic<bool> disconnected{false};

    // Runs one upstream call, cancellable by the client's disconnect (from any thread).
    std::string run_call(UpstreamCall& c, const UpstreamRequest& r) {
        {
            std::lock_guard lock(mutex);
            calls.push_back(&c);
            if (disconnected) c.cancel();
        }
        std::string error = c.run(r);
        std::lock_guard lock(mutex);
        std::erase(calls, &c);
        return error;
    }
    void cancel() {
        disconnected = true;
        std::lock_guard lock(mutex);
        for (UpstreamCall* c : calls) c->cancel();
    }
};

// The prefill half of one request, streamed (PdProxyOptions::stream_kv): its call runs on its own
// thread; wait() returns once the prefill instance has named the transfers (the decode half may
// start now) or the call has ended. The destructor waits for the call.
struct PdProxy::StreamedPrefill {
    std::mutex mutex;
    std::condition_variable cv;
    bool named = false, ended = false;
    Json params;     // kv_transfer_params, once named
    int status = 0;  // the answer's, once it came
    std::string type, answer, error;
    bool answered = false;
    std::thread thread;

    ~StreamedPrefill() {
        if (thread.joinable()) thread.join();
    }
    // Reads SSE events out of `answer` as they arrive: the first one with kv_transfer_params names them.
    void on_body(std::string_view bytes) {
        std::lock_guard lock(mutex);
        answer.append(bytes);
        if (named || status != 200) return;
        for (size_t end; (end = answer.find("\n\n")) != std::string::npos;) {
            const std::string event = answer.substr(0, end);
            answer.erase(0, end + 2);
            if (event.rfind("data: {", 0) != 0) continue;
            Json j = Json::parse(event.substr(6), nullptr, false);
            if (j.is_object() && j.contains("kv_transfer_params")) {
                params = std::move(j["kv_transfer_params"]);
                named = true;
                cv.notify_all();
                return;
            }
        }
    }
    void wait() {
        std::unique_lock lock(mutex);
        cv.wait(lock, [this] { return named || ended; });
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
    std::string out;
    const auto counter = [&out](const char* name, const char* help, auto value) {
        out += fmt::format("# HELP {0} {1}\n# TYPE {0} counter\n{0} {2}\n", name, help, value);
    };
    counter("moeserve:proxy_requests_total", "Requests the proxy took.", num_requests_);
    counter("moeserve:proxy_failed_requests_total", "Requests that got no answer from any instance.", num_failed_);
    counter("moeserve:proxy_prefill_seconds_total",
            "Seconds from a request's arrival until its prefill instance named the KV transfer (streamed) or "
            "answered; divide by moeserve:proxy_prefills_total.",
            prefill_seconds_);
    counter("moeserve:proxy_prefills_total", "Requests whose prefill half named its KV transfer.", num_prefilled_);
    counter("moeserve:proxy_decode_first_byte_seconds_total",
            "Seconds from the decode call's start until the first bytes of its answer (a stream: the KV "
            "transfer's wait, then the first token); divide by moeserve:proxy_decodes_total.",
            decode_first_byte_seconds_);
    counter("moeserve:proxy_decodes_total", "Decode calls that answered.", num_decode_started_);
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

UpstreamRequest PdProxy::upstream(const Flow& flow, int instance, const std::string& body) const {
    std::lock_guard lock(mutex_);
    const Instance& in = instances_[static_cast<size_t>(instance)];
    UpstreamRequest r;
    r.host = in.host;
    r.port = in.port;
    r.method = flow.request.method == "HEAD" ? "GET" : flow.request.method;
    r.target = flow.request.target;
    r.body = body;
    r.authorization = flow.request.authorization;
    r.connect_timeout_ms = options_.connect_timeout_ms;
    r.idle_timeout_ms = options_.idle_timeout_ms;
    return r;
}

void PdProxy::fail(Flow& flow, int status, const std::string& message) {
    {
        std::lock_guard lock(mutex_);
        ++num_failed_;
    }
    flow.responder->respond(status, kJson, error_json(status, message));
}

void PdProxy::run(const std::shared_ptr<Flow>& flow) {
    Responder& out = *flow->responder;
    if (flow->request.method != "POST") {  // GET /v1/models: any decode instance answers for the deployment
        std::vector<int> tried;
        std::string last_error;
        for (int i; (i = pick(false, tried)) >= 0;) {
            tried.push_back(i);
            UpstreamCall call;
            int status = 0;
            std::string type, body;
            call.on_head = [&](int s, const std::string& t) { status = s, type = t; };
            call.on_body = [&](std::string_view b) { body.append(b); };
            last_error = flow->run_call(call, upstream(*flow, i, ""));
            if (last_error.empty()) return out.respond(status, type, body);
            if (flow->disconnected) return;
            mark_failed(i, last_error);
        }
        return fail(*flow, 503, "No decode instance answered: " + last_error);
    }
    Json body = Json::parse(flow->request.body, nullptr, false);
    if (!body.is_object()) {
        return out.respond(400, kJson,
                           error_json(400, "The request body is not a JSON object.", "invalid_request_error"));
    }
    std::unique_ptr<StreamedPrefill> streamed;  // joined last, after the decode half
    Json params;
    const double arrival = steady_seconds();
    int64_t prompt_tokens = static_cast<int64_t>(flow->request.body.size() / 4) + 1;  // ~4 bytes per token
    const bool named = options_.stream_kv ? prefill_streamed(flow, prefill_body(body, true), streamed, params)
                                          : prefill_whole(flow, prefill_body(body, false), params, prompt_tokens);
    if (!named) return;
    {
        std::lock_guard lock(mutex_);
        ++num_prefilled_;
        prefill_seconds_ += steady_seconds() - arrival;
    }
    // 2. The decode half: the client's own request, continuing from that KV.
    body["kv_transfer_params"] = std::move(params);
    decode(flow, body.dump(), output_tokens_of(body) + prompt_tokens);
}

// 1. The prefill half: the client's request cut to one token that only prefills for a decode instance.
std::string PdProxy::prefill_body(const Json& body, bool stream) {
    Json prefill = body;
    prefill.erase("max_completion_tokens");
    prefill.erase("stream_options");
    prefill["max_tokens"] = 1;
    prefill["stream"] = stream;
    if (prefill.contains("min_tokens") && prefill["min_tokens"].is_number_integer() &&
        prefill["min_tokens"].get<int64_t>() > 1)
        prefill["min_tokens"] = 1;  // the first token may not be EOS exactly when the client's min_tokens >= 1
    prefill["kv_transfer_params"] = {{"do_remote_decode", true}};
    return prefill.dump();
}

// The prefill instance's whole answer first (no overlap). False when the client has been answered.
bool PdProxy::prefill_whole(const std::shared_ptr<Flow>& flow, const std::string& prefill_body, Json& params,
                            int64_t& prompt_tokens) {
    std::vector<int> tried;
    std::string last_error, answer, answer_type;
    int status = 0;
    for (int i; (i = pick(true, tried)) >= 0;) {
        tried.push_back(i);
        UpstreamCall call;
        answer.clear();
        call.on_head = [&](int s, const std::string& t) { status = s, answer_type = t; };
        call.on_body = [&](std::string_view b) { answer.append(b); };
        add_load(i, prompt_tokens);
        last_error = flow->run_call(call, upstream(*flow, i, prefill_body));
        add_load(i, -prompt_tokens);
        if (flow->disconnected) return false;
        if (last_error.empty()) break;
        mark_failed(i, last_error);
        if (call.answered()) return fail(*flow, 502, "The prefill instance broke off: " + last_error), false;
    }
    if (!last_error.empty() || status == 0)
        return fail(*flow, 503, "No prefill instance answered: " + last_error), false;
    if (status != 200) return flow->responder->respond(status, answer_type, answer), false;  // the request's own fault
    Json prefilled = Json::parse(answer, nullptr, false);
    if (!prefilled.is_object() || !prefilled.contains("kv_transfer_params")) {
        fail(*flow, 502,
             "The prefill instance's answer has no kv_transfer_params (is it started with --kv-transfer-config and "
             "kv_role kv_producer?)");
        return false;
    }
    params = std::move(prefilled["kv_transfer_params"]);
    if (prefilled.contains("usage") && prefilled["usage"].value("prompt_tokens", 0) > 0)
        prompt_tokens = prefilled["usage"]["prompt_tokens"].get<int64_t>();
    return true;
}

// The prefill streamed: the decode half starts as soon as the prefill instance names the
// transfers, and its fetch follows the prefill's progress. False when the client has been answered.
bool PdProxy::prefill_streamed(const std::shared_ptr<Flow>& flow, const std::string& prefill_body,
                               std::unique_ptr<StreamedPrefill>& call_out, Json& params) {
    const int64_t estimated = static_cast<int64_t>(flow->request.body.size() / 4) + 1;
    std::vector<int> tried;
    std::string last_error;
    for (int i; (i = pick(true, tried)) >= 0;) {
        tried.push_back(i);
        auto p = std::make_unique<StreamedPrefill>();
        // The call outlives this function (it ends after the decode half has started): its own copies.
        p->thread = std::thread([this, flow, i, body = prefill_body, estimated, raw = p.get()] {
            UpstreamCall call;
            call.on_head = [raw](int s, const std::string& t) {
                std::lock_guard lock(raw->mutex);
                raw->status = s, raw->type = t, raw->answered = true;
            };
            call.on_body = [raw](std::string_view b) { raw->on_body(b); };
            add_load(i, estimated);
            const std::string error = flow->run_call(call, upstream(*flow, i, body));
            add_load(i, -estimated);
            std::lock_guard lock(raw->mutex);
            raw->error = error;
            raw->ended = true;
            raw->cv.notify_all();
        });
        p->wait();
        if (p->named) {
            params = p->params;
            call_out = std::move(p);
            return true;
        }
        p->thread.join();
        if (flow->disconnected) return false;
        if (p->error.empty() && p->status != 0) {
            if (p->status != 200) return flow->responder->respond(p->status, p->type, p->answer), false;
            fail(*flow, 502,
                 "The prefill instance's stream named no kv_transfer_params (is it started with --kv-transfer-config "
                 "and kv_role kv_producer?)");
            return false;
        }
        last_error = p->error;
        mark_failed(i, last_error);
        if (p->answered) return fail(*flow, 502, "The prefill instance broke off: " + last_error), false;
    }
    fail(*flow, 503, "No prefill instance answered: " + last_error);
    return false;
}

void PdProxy::decode(const std::shared_ptr<Flow>& flow, const std::string& decode_body, int64_t load) {
    Responder& out = *flow->responder;
    std::vector<int> tried;
    std::string last_error, answer, answer_type;
    int status = 0;
    for (int i; (i = pick(false, tried)) >= 0;) {
        tried.push_back(i);
        UpstreamCall call;
        bool streaming = false;
        answer.clear();
        const double started = steady_seconds();
        bool first_byte = true;
        call.on_head = [&](int s, const std::string& t) {
            status = s, answer_type = t;
            streaming = s == 200 && t.rfind("text/event-stream", 0) == 0;
            if (streaming) out.start_stream();
        };
        call.on_body = [&](std::string_view b) {
            if (std::exchange(first_byte, false)) {
                std::lock_guard lock(mutex_);
                ++num_decode_started_;
                decode_first_byte_seconds_ += steady_seconds() - started;
            }
            if (streaming) {
                out.send_chunk(std::string(b));
            } else {
                answer.append(b);
            }
        };
        add_load(i, load);
        last_error = flow->run_call(call, upstream(*flow, i, decode_body));
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
    fail(*flow, 503, "No decode instance answered: " + last_error);
}

}  // namespace moeserve::serve
