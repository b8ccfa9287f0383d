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

}  // namespace moeserve::ipc
