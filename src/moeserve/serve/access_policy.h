// Who may ask what of an HTTP front (`serve`'s Router and `moeserve proxy`): the Host and Origin
// policy against DNS rebinding and cross-site pages, the API key, and JSON-only bodies. Checked
// from the request's headers alone, so the HTTP server can apply it before it reads a body
// (HttpServerOptions::header_check): a client without the key cannot make the server buffer
// anything.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "moeserve/serve/http_server.h"

namespace moeserve::serve {

struct AccessPolicyConfig {
    // Empty = no auth; else /v1/* needs "Authorization: Bearer <one of them>" (compared in
    // constant time).
    std::vector<std::string> api_keys;
    // Host (and Origin) header policy against DNS rebinding: with loopback_only (the server
    // listens on a loopback address) only loopback names and addresses plus allowed_hosts pass;
    // otherwise any host passes unless allowed_hosts is non-empty. "*" in allowed_hosts = any.
    bool loopback_only = true;
    std::vector<std::string> allowed_hosts;
    std::vector<std::string> allowed_origins;  // --allowed-origins as given: these Origins pass too ("*": any)
    // --forwarded-allow-ips (uvicorn's): peers whose X-Forwarded-Host and X-Forwarded-For are
    // believed (IP addresses, "*" = any). Behind such a proxy the host checked is the one the
    // client asked the proxy for, so a rebinding page cannot pass as the proxy's loopback Host.
    std::vector<std::string> forwarded_allow_ips = {"127.0.0.1", "::1"};
};

class AccessPolicy {
public:
    explicit AccessPolicy(AccessPolicyConfig config) : config_(std::move(config)) {}

    // Host, Origin, then the API key for /v1/* paths (path: the request's, without query and
    // root path). Throws openai::ApiError: 403 host_not_allowed / origin_not_allowed, 401.
    void check(const HttpRequest& request, const std::string& path) const;
    // A request with a body (or a Content-Type) must say application/json: a cross-site form or
    // text/plain POST, which needs no CORS preflight, is refused. Throws ApiError 415.
    static void check_json(const HttpRequest& request);
    // For HttpServerOptions::header_check: check() and, when a body follows, check_json(), as the
    // error answer (JSON) instead of an exception.
    std::optional<HttpError> check_head(const HttpRequest& head, const std::string& path) const;

    const AccessPolicyConfig& config() const { return config_; }

    // The Host policy in one phrase for the startup line: "Host: loopback names or a, b;
    // X-Forwarded-Host believed from 127.0.0.1, ::1".
    std::string describe() const;
    // The host the client asked for: X-Forwarded-Host's first entry from a trusted proxy, else Host.
    std::string requested_host(const HttpRequest& request) const;
    // Who sent the request (for the access log): X-Forwarded-For's first entry from a trusted
    // proxy, else the peer's "address:port".
    std::string client(const HttpRequest& request) const;

private:
    bool trusted_proxy(const HttpRequest& request) const;
    bool host_allowed(const std::string& host) const;

    AccessPolicyConfig config_;
};

}  // namespace moeserve::serve
