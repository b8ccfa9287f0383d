// vLLM's --kv-transfer-config JSON, read for this engine's PD disaggregation
// (docs/parallelism.md, "PD disaggregation"):
//   {"kv_connector": "MoeserveConnector", "kv_role": "kv_producer" | "kv_consumer" | "kv_both",
//    "kv_ip": "127.0.0.1", "kv_port": 0,
//    "kv_connector_extra_config": {"advertise_host": "...", "timeout_ms": 30000, "hold_ms": 120000}}
#pragma once

#include <string>

#include "moeserve/engine/kv_transfer/kv_transfer_agent.h"

namespace moeserve::cli {

// The connector name this engine implements (vLLM's are other engines' transports).
inline constexpr const char* kKvConnectorName = "MoeserveConnector";

// Empty text = no transfer (Role::kNone). Raises Error(kInvalidArgument) with one sentence
// naming the field for malformed JSON, an unknown connector or role, or bad numbers. The
// rank-plane key is not part of it (the caller sets it).
engine::KvTransferConfig parse_kv_transfer_config(const std::string& text);

// A rank's: parse_kv_transfer_config, with the deployment's rank-plane key from the environment
// (never argv, which ps shows).
engine::KvTransferConfig rank_kv_transfer_config(const std::string& text);

}  // namespace moeserve::cli
