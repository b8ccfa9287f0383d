// Rng: a small, seedable, platform-independent generator (xoshiro256**, seeded by splitmix64),
// so a seed gives the same weights and samples on every machine. Not thread-safe: one per user.
#pragma once

#include <cmath>
#include <cstdint>

namespace moeserve {

class Rng {
public:
    explicit Rng(uint64_t seed) {
        for (auto& s : state_) s = splitmix64(seed);
    }

    uint64_t next_u64() {
        const uint64_t result = rotl(state_[1] * 5, 7) * 9;
        const uint64_t t = state_[1] << 17;
        state_[2] ^= state_[0];
        state_[3] ^= state_[1];
        state_[1] ^= state_[2];
        state_[0] ^= state_[3];
        state_[2] ^= t;
        state_[3] = rotl(state_[3], 45);
        return result;
    }

    // Uniform in [0, 1) with 24 random bits (exactly representable in f32).
    float uniform() { return static_cast<float>(next_u64() >> 40) * (1.0f / 16777216.0f); }
    // Uniform in [0, 1) with 53 random bits.
    double uniform_double() { return static_cast<double>(next_u64() >> 11) * (1.0 / 9007199254740992.0); }
    // Standard normal (Box-Muller).
    float normal() {
        const double u1 = 1.0 - uniform_double();  // (0, 1]
        const double u2 = uniform_double();
        return static_cast<float>(std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2));
    }

    static uint64_t splitmix64(uint64_t& x) {
        uint64_t z = (x += 0x9e3779b97f4a7c15ull);
        z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
        z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
        return z ^ (z >> 31);
    }

private:
    static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }
    uint64_t state_[4];
};

}  // namespace moeserve
