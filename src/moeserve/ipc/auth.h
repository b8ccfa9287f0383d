// Authentication of the engine sockets (ZeroMQ CURVE). Every deployment has one
// secret, the rank-plane key: the API server generates it for a single-node
// deployment and hands it to its rank processes in their environment; a
// multi-node deployment is given the same key on every node
// (MOESERVE_RANK_PLANE_KEY or --rank-plane-key-file). Two CURVE keypairs are
// derived from it: the server's (the API server's bound sockets prove they hold
// it) and the engines' (the server accepts only connections that prove they
// hold it). A peer without the key completes no handshake, so it can neither
// read requests nor send outputs, nor disturb a real engine.
#pragma once

#include <string>
#include <string_view>

namespace moeserve::ipc {

// The environment variable that carries the key to rank processes (never argv:
// ps shows that).
inline constexpr const char* kRankPlaneKeyEnv = "MOESERVE_RANK_PLANE_KEY";

struct CurveKeys {  // Z85 text, 40 characters each
    std::string server_public, server_secret;
    std::string client_public, client_secret;
};

// A fresh random key (64 hex characters).
std::string random_rank_plane_key();

// Raises Error(kInvalidArgument) for a key shorter than 32 characters
// (guessable).
CurveKeys derive_curve_keys(std::string_view rank_plane_key);

// PD disaggregation: the proof that a prefill instance of this deployment issued a KV transfer
// (endpoint, transfer id). The producer's API server puts it in its answer's kv_transfer_params;
// a consumer's API server fetches only transfers whose token verifies, so a client cannot make a
// decode instance dial an address of its choosing. HMAC-SHA-256 under a key derived from the
// rank-plane key (its own context string), as 64 hex characters. Same key rules as above.
std::string kv_transfer_token(std::string_view rank_plane_key, std::string_view endpoint, std::string_view transfer_id);
// Constant-time comparison against the token the key gives.
bool kv_transfer_token_valid(std::string_view rank_plane_key, std::string_view endpoint, std::string_view transfer_id,
                             std::string_view token);

}  // namespace moeserve::ipc
