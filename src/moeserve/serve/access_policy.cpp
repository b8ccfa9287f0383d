#include "moeserve/serve/access_policy.h"

#include <fmt/format.h>

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

}  // namespace

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
