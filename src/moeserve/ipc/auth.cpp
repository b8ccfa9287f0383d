// Key derivation with libsodium: BLAKE2b keyed by the deployment key, one
// context string per role, gives each role's 32-byte CURVE secret; the public
// key follows by scalar multiplication.
#include "moeserve/ipc/auth.h"

#include <sodium.h>
#include <zmq.h>

#include <array>

#include "moeserve/core/error.h"

namespace moeserve::ipc {
namespace {

constexpr size_t kMinKeyChars = 32;

void init_sodium() {
    if (sodium_init() < 0) raise(ErrorCode::kInternal, "libsodium could not be initialised");
}

std::string z85(const std::array<unsigned char, 32>& bytes) {
    char text[41];
    if (zmq_z85_encode(text, bytes.data(), bytes.size()) == nullptr) raise(ErrorCode::kInternal, "z85 encoding failed");
    return std::string(text, 40);
}

// secret = BLAKE2b-256(key = deployment key hash, message = role); public =
// secret * base point.
void derive(std::string_view key, const char* role, std::string& public_z85, std::string& secret_z85) {
    std::array<unsigned char, crypto_generichash_KEYBYTES> k{};
    crypto_generichash(k.data(), k.size(), reinterpret_cast<const unsigned char*>(key.data()), key.size(), nullptr, 0);
    std::array<unsigned char, 32> secret{}, pub{};
    const std::string_view r(role);
    crypto_generichash(secret.data(), secret.size(), reinterpret_cast<const unsigned char*>(r.data()), r.size(),
                       k.data(), k.size());
    crypto_scalarmult_base(pub.data(), secret.data());
    secret_z85 = z85(secret);
    public_z85 = z85(pub);
    sodium_memzero(k.data(), k.size());
    sodium_memzero(secret.data(), secret.size());
}

}  // namespace

std::string random_rank_plane_key() {
    init_sodium();
    std::array<unsigned char, 32> bytes{};
    randombytes_buf(bytes.data(), bytes.size());
    std::string hex(64, '0');
    sodium_bin2hex(hex.data(), hex.size() + 1, bytes.data(), bytes.size());
    return hex;
}

CurveKeys derive_curve_keys(std::string_view rank_plane_key) {
    if (rank_plane_key.size() < kMinKeyChars) {
        raise(ErrorCode::kInvalidArgument, "the rank-plane key ({}) must have at least {} characters; got {}",
              kRankPlaneKeyEnv, kMinKeyChars, rank_plane_key.size());
    }
    init_sodium();
    CurveKeys keys;
    derive(rank_plane_key, "moeserve rank plane: API server", keys.server_public, keys.server_secret);
    derive(rank_plane_key, "moeserve rank plane: engine", keys.client_public, keys.client_secret);
    return keys;
}

namespace {

using TransferTag = std::array<unsigned char, crypto_auth_hmacsha256_BYTES>;

// HMAC-SHA-256 of "endpoint \n transfer id" (neither may hold a newline, so the split is
// unambiguous) under BLAKE2b(deployment key hash, context).
TransferTag transfer_tag(std::string_view rank_plane_key, std::string_view endpoint, std::string_view transfer_id) {
    if (rank_plane_key.size() < kMinKeyChars) {
        raise(ErrorCode::kInvalidArgument, "the rank-plane key ({}) must have at least {} characters; got {}",
              kRankPlaneKeyEnv, kMinKeyChars, rank_plane_key.size());
    }
    init_sodium();
    std::array<unsigned char, crypto_generichash_KEYBYTES> k{};
    crypto_generichash(k.data(), k.size(), reinterpret_cast<const unsigned char*>(rank_plane_key.data()),
                       rank_plane_key.size(), nullptr, 0);
    std::array<unsigned char, crypto_auth_hmacsha256_KEYBYTES> mac_key{};
    const std::string_view context("moeserve kv transfer params");
    crypto_generichash(mac_key.data(), mac_key.size(), reinterpret_cast<const unsigned char*>(context.data()),
                       context.size(), k.data(), k.size());
    crypto_auth_hmacsha256_state state;
    crypto_auth_hmacsha256_init(&state, mac_key.data(), mac_key.size());
    const auto update = [&state](std::string_view part) {
        crypto_auth_hmacsha256_update(&state, reinterpret_cast<const unsigned char*>(part.data()), part.size());
    };
    update(endpoint);
    update("\n");
    update(transfer_id);
    TransferTag tag{};
    crypto_auth_hmacsha256_final(&state, tag.data());
    sodium_memzero(k.data(), k.size());
    sodium_memzero(mac_key.data(), mac_key.size());
    return tag;
}

}  // namespace

std::string kv_transfer_token(std::string_view rank_plane_key, std::string_view endpoint,
                              std::string_view transfer_id) {
    const TransferTag tag = transfer_tag(rank_plane_key, endpoint, transfer_id);
    std::string hex(tag.size() * 2, '0');
    sodium_bin2hex(hex.data(), hex.size() + 1, tag.data(), tag.size());
    return hex;
}

bool kv_transfer_token_valid(std::string_view rank_plane_key, std::string_view endpoint, std::string_view transfer_id,
                             std::string_view token) {
    if (token.size() != crypto_auth_hmacsha256_BYTES * 2) return false;
    if (endpoint.find('\n') != std::string_view::npos || transfer_id.find('\n') != std::string_view::npos) return false;
    const std::string want = kv_transfer_token(rank_plane_key, endpoint, transfer_id);
    return sodium_memcmp(want.data(), token.data(), want.size()) == 0;
}

}  // namespace moeserve::ipc
