#include "moeserve/cli/kv_transfer_config.h"

#include <nlohmann/json.hpp>

#include "moeserve/cli/json_flag.h"
#include "moeserve/core/error.h"
#include "moeserve/ipc/auth.h"

namespace moeserve::cli {

namespace {

using Json = nlohmann::json;

[[noreturn]] void bad(const std::string& what) { raise(ErrorCode::kInvalidArgument, "--kv-transfer-config: {}", what); }

int int_field(const Json& o, const char* key, int fallback, int min, int max) {
    const auto it = o.find(key);
    if (it == o.end() || it->is_null()) return fallback;
    if (!it->is_number_integer() || it->get<int64_t>() < min || it->get<int64_t>() > max)
        bad(fmt::format("'{}' must be an integer in [{}, {}]", key, min, max));
    return it->get<int>();
}

std::string string_field(const Json& o, const char* key, const std::string& fallback) {
    const auto it = o.find(key);
    if (it == o.end() || it->is_null()) return fallback;
    if (!it->is_string()) bad(fmt::format("'{}' must be a string", key));
    return it->get<std::string>();
}

}  // namespace

engine::KvTransferConfig parse_kv_transfer_config(const std::string& text) {
    engine::KvTransferConfig c;
    if (text.empty()) return c;
    const Json j = parse_json_object_flag("--kv-transfer-config", text);
    const std::string connector = string_field(j, "kv_connector", "");
    if (connector != kKvConnectorName) {
        bad(fmt::format("kv_connector '{}' is not available here; this engine's connector is \"{}\"", connector,
                        kKvConnectorName));
    }
    const std::string role = string_field(j, "kv_role", "");
    using Role = engine::KvTransferConfig::Role;
    if (role == "kv_producer") {
        c.role = Role::kProducer;
    } else if (role == "kv_consumer") {
        c.role = Role::kConsumer;
    } else if (role == "kv_both") {
        c.role = Role::kBoth;
    } else {
        bad(fmt::format("kv_role '{}': expected kv_producer, kv_consumer or kv_both", role));
    }
    c.bind_host = string_field(j, "kv_ip", c.bind_host);
    c.port = int_field(j, "kv_port", c.port, 0, 65535);
    const auto extra = j.find("kv_connector_extra_config");
    if (extra != j.end() && !extra->is_null()) {
        if (!extra->is_object()) bad("'kv_connector_extra_config' must be an object");
        c.advertise_host = string_field(*extra, "advertise_host", "");
        c.timeout_ms = int_field(*extra, "timeout_ms", c.timeout_ms, 100, 3600000);
        c.hold_ms = int_field(*extra, "hold_ms", c.hold_ms, 100, 86400000);
    }
    if (c.produces() && c.advertise_host.empty() && (c.bind_host == "0.0.0.0" || c.bind_host == "*")) {
        bad("kv_ip 0.0.0.0 listens everywhere but is no address to dial: set "
            "kv_connector_extra_config.advertise_host to this host's address");
    }
    return c;
}

engine::KvTransferConfig rank_kv_transfer_config(const std::string& text) {
    engine::KvTransferConfig config = parse_kv_transfer_config(text);
    const char* key = std::getenv(ipc::kRankPlaneKeyEnv);
    config.rank_plane_key = key ? key : "";
    return config;
}

}  // namespace moeserve::cli
