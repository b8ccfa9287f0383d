// The flags of who may use an HTTP front, shared by `serve` and `proxy` (serve/access_policy.h
// applies them): --api-key (or VLLM_API_KEY / MOESERVE_API_KEY), --allowed-hosts and
// --forwarded-allow-ips.
#pragma once

#include <CLI/CLI.hpp>

#include <string>
#include <vector>

#include "moeserve/serve/access_policy.h"

namespace moeserve::cli {

void add_access_flags(CLI::App* app, serve::AccessPolicyConfig& access);
// In the command's callback: the key from the environment when --api-key is not given; an empty
// key is a CLI::ValidationError.
void resolve_api_keys(std::vector<std::string>& api_keys);

}  // namespace moeserve::cli
