#include "moeserve/serve/access_policy.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cctype>
#include <string_view>

#include "moeserve/serve/openai/protocol.h"
#include "moeserve/serve/openai/render.h"

namespace moeserve::serve {

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

// The first entry of a comma-separated header (the one the first proxy wrote), trimmed.
std::string first_entry(const std::string& list) {
    std::string entry = list.substr(0, list.find(','));
    entry.erase(entry.find_last_not_of(" \t") + 1);
    entry.erase(0, entry.find_first_not_of(" \t"));
    return entry;
}

}  // namespace

bool AccessPolicy::trusted_proxy(const HttpRequest& request) const {
    std::string peer = request.peer_address;
    if (peer.rfind("::ffff:", 0) == 0) peer = peer.substr(7);  // an IPv4 peer on a dual-stack socket
    for (const auto& ip : config_.forwarded_allow_ips) {
        if (ip == "*" || ip == peer) return true;
    }
    return false;
}

std::string AccessPolicy::describe() const {
    const auto& hosts = config_.allowed_hosts;
    const bool any = std::find(hosts.begin(), hosts.end(), "*") != hosts.end();
    std::string who;
    if (any || (!config_.loopback_only && hosts.empty()))
        who = "any";
    else if (config_.loopback_only)
        who = hosts.empty() ? "loopback names only (--allowed-hosts adds others)"
                            : fmt::format("loopback names or {}", fmt::join(hosts, ", "));
    else
        who = fmt::format("{} only", fmt::join(hosts, ", "));
    const auto& proxies = config_.forwarded_allow_ips;
    return fmt::format("Host: {}; X-Forwarded-Host believed from {}", who,
                       proxies.empty() ? "no one" : fmt::format("{}", fmt::join(proxies, ", ")));
}

std::string AccessPolicy::requested_host(const HttpRequest& request) const {
    if (!request.forwarded_host.empty() && trusted_proxy(request)) return first_entry(request.forwarded_host);
    return request.host;
}

std::string AccessPolicy::client(const HttpRequest& request) const {
    if (!request.forwarded_for.empty() && trusted_proxy(request)) return first_entry(request.forwarded_for);
    return request.peer_address.find(':') == std::string::npos
               ? fmt::format("{}:{}", request.peer_address, request.peer_port)
               : fmt::format("[{}]:{}", request.peer_address, request.peer_port);
}

bool AccessPolicy::host_allowed(const std::string& host) const {
    const std::string name = host_name(host);
    for (const auto& allowed : config_.allowed_hosts) {
        if (allowed == "*" || lower(allowed) == name) return true;
    }
    if (config_.loopback_only) return is_loopback_name(name);
    return config_.allowed_hosts.empty();
}

void AccessPolicy::check(const HttpRequest& request, const std::string& path) const {
    using openai::ApiError;
    const std::string host = requested_host(request);
    if (!host.empty() && !host_allowed(host)) {
        throw ApiError(403,
                       fmt::format("{} '{}' is not allowed: {}; name other hosts with --allowed-hosts.",
                                   host == request.host ? "Host" : "X-Forwarded-Host", host,
                                   config_.loopback_only ? "this server answers loopback names only"
                                                         : "it is not one of --allowed-hosts"),
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

void AccessPolicy::check_json(const HttpRequest& request) {
    if ((!request.body.empty() || !request.content_type.empty()) && !is_json_media_type(request.content_type)) {
        throw openai::ApiError(415,
                               fmt::format("Content-Type must be application/json; got '{}'.", request.content_type),
                               "invalid_request_error", std::nullopt, "unsupported_media_type");
    }
}

std::optional<HttpError> AccessPolicy::check_head(const HttpRequest& head, const std::string& path) const {
    try {
        check(head, path);
        check_json(head);
    } catch (const openai::ApiError& e) {
        return HttpError{e.status(), openai::error_body(e)};
    }
    return std::nullopt;
}

}  // namespace moeserve::serve
