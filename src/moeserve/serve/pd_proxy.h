// PdProxy: the front of a PD-disaggregated deployment (`moeserve proxy`, docs/parallelism.md,
// "PD disaggregation"). Each completion or chat request is sent first to a prefill instance as
// its prefill half (max_tokens 1, kv_transfer_params {"do_remote_decode": true}), then the
// client's own request, with the kv_transfer_params the prefill named, to a decode instance,
// whose answer (JSON or SSE stream) is relayed to the client as it arrives. Streamed (the
// default), the prefill half is an SSE call whose first event names the transfer: the decode half
// starts then, and its KV fetch follows the prefill as it computes; else after the prefill's answer.
//
// Instances are picked by load: the tokens the proxy itself has outstanding on each (prompt
// tokens, estimated from the body until the prefill says; plus max_tokens on decode instances).
// An instance that cannot be reached is skipped for down_ms and the request tried on the next
// one (a prefill is safe to repeat; a decode only while the instance has answered nothing). Once
// a decode instance has answered, its failure ends the client's stream with an error event.
#pragma once

#include <atomic>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "moeserve/core/log.h"
#include "moeserve/serve/access_policy.h"
#include "moeserve/serve/http_server.h"
#include "moeserve/serve/upstream_call.h"

namespace moeserve::serve {

struct PdProxyOptions {
    std::vector<std::string> prefill_urls;  // http://host:port, several allowed
    std::vector<std::string> decode_urls;
    int connect_timeout_ms = 5000;
    int idle_timeout_ms = 600000;  // an upstream silent this long fails the request
    int down_ms = 5000;            // an unreachable instance is skipped this long
    int max_in_flight = 1024;      // requests at once; more get 503
    // Streams the prefill half: the decode instance starts fetching the prompt's KV as soon as
    // the prefill instance names the transfer, while it still prefills (false: after it has).
    bool stream_kv = true;
    // Who may use the proxy: the same Host / Origin / API key / JSON-body policy as `serve`
    // (access_policy.h); the client's Authorization is passed on to the instances as it came.
    AccessPolicyConfig access{};
};

class PdProxy {
public:
    // Raises Error(kInvalidArgument) naming a URL that is not http://host:port[/].
    PdProxy(PdProxyOptions options, Logger& logger);
    ~PdProxy();  // waits for the requests in flight to end (they are cancelled first)
    PdProxy(const PdProxy&) = delete;
    PdProxy& operator=(const PdProxy&) = delete;

    // The HttpServer handler: POST /v1/completions, /v1/chat/completions; GET /v1/models (from a
    // decode instance), /health, /metrics (the proxy's own counters). Thread-safe.
    void handle(HttpRequest request, std::shared_ptr<Responder> responder);
    // The HttpServer's header check (before a body is read): the access policy. Thread-safe.
    std::optional<HttpError> check_head(const HttpRequest& head) const;

    struct Instance {
        std::string url, host;
        int port = 0;
        bool prefill = false;
        int64_t outstanding_tokens = 0;
        int64_t requests = 0;  // sent (cumulative)
        int64_t failures = 0;  // unreachable or broken off (cumulative)
        double down_until = 0;
    };
    // A copy of every instance's state (tests, /metrics). Thread-safe.
    std::vector<Instance> instances() const;

private:
    struct Flow;
    struct StreamedPrefill;
    void run(const std::shared_ptr<Flow>& flow);
    static std::string prefill_body(const nlohmann::json& body, bool stream);
    bool prefill_whole(const std::shared_ptr<Flow>& flow, const std::string& prefill_body, nlohmann::json& params,
                       int64_t& prompt_tokens);
    bool prefill_streamed(const std::shared_ptr<Flow>& flow, const std::string& prefill_body,
                          std::unique_ptr<StreamedPrefill>& call, nlohmann::json& params);
    void decode(const std::shared_ptr<Flow>& flow, const std::string& decode_body, int64_t load);
    UpstreamRequest upstream(const Flow& flow, int instance, const std::string& body) const;
    void fail(Flow& flow, int status, const std::string& message);
    // The least-loaded reachable instance of that kind not in `tried`, or -1.
    int pick(bool prefill, const std::vector<int>& tried);
    void add_load(int instance, int64_t tokens);
    void mark_failed(int instance, const std::string& why);
    std::string metrics_text() const;

    PdProxyOptions options_;
    AccessPolicy access_;
    Logger& logger_;
    mutable std::mutex mutex_;
    std::vector<Instance> instances_;
    int in_flight_ = 0;
    std::condition_variable idle_cv_;
    std::vector<std::weak_ptr<Flow>> flows_;
    int64_t num_requests_ = 0, num_failed_ = 0;
    // Per request, summed: from its arrival until the prefill instance named the transfer
    // (streamed) or answered, and from the decode call's start until its first body bytes.
    int64_t num_prefilled_ = 0, num_decode_started_ = 0;
    double prefill_seconds_ = 0, decode_first_byte_seconds_ = 0;
};

}  // namespace moeserve::serve
