#include "moeserve/cli/access_flags.h"

#include <cstdlib>

namespace moeserve::cli {

void add_access_flags(CLI::App* app, serve::AccessPolicyConfig& access) {
    app->add_option("--api-key", access.api_keys,
                    "require 'Authorization: Bearer KEY' on /v1; several keys allowed "
                    "(env: VLLM_API_KEY or MOESERVE_API_KEY, which ps does not show)")
        ->expected(1, -1);
    app->add_option("--allowed-hosts", access.allowed_hosts,
                    "Host/Origin names accepted besides loopback ones when --host is a "
                    "loopback address ('*' = any); with another --host, if given, the only ones accepted. "
                    "Behind a reverse proxy: the public name clients use")
        ->expected(1, -1);
    app->add_option("--forwarded-allow-ips", access.forwarded_allow_ips,
                    "proxies whose X-Forwarded-Host (checked instead of Host) and X-Forwarded-For (the access "
                    "log's client) are believed: IP addresses, '*' = any (uvicorn's flag)")
        ->expected(1, -1)
        ->delimiter(',')
        ->capture_default_str();
}

void resolve_api_keys(std::vector<std::string>& api_keys) {
    // env: VLLM_API_KEY or MOESERVE_API_KEY, the API key when --api-key is not given.
    if (api_keys.empty()) {
        for (const char* name : {"VLLM_API_KEY", "MOESERVE_API_KEY"}) {
            if (const char* key = std::getenv(name); key && *key) {
                api_keys.emplace_back(key);
                break;
            }
        }
    }
    for (const auto& k : api_keys) {
        if (k.empty()) throw CLI::ValidationError("--api-key", "an API key may not be empty");
    }
}

}  // namespace moeserve::cli
