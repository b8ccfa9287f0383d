#include "moeserve/model/layers/rotary_embedding.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "moeserve/core/error.h"
#include "moeserve/kernels/ops.h"

namespace moeserve::model {

namespace {

// YaRN: blend interpolated (1/factor) and extrapolated frequencies with a linear ramp between
// the correction dims of beta_fast and beta_slow rotations (HF _compute_yarn_parameters).
std::vector<double> yarn_inv_freq(const RopeScaling& r, int64_t dim, int64_t original_max_pos) {
    const double base = r.rope_theta;
    const auto correction_dim = [&](double num_rotations) {
        return (static_cast<double>(dim) *
                std::log(static_cast<double>(original_max_pos) / (num_rotations * 2 * M_PI))) /
               (2 * std::log(base));
    };
    double low = correction_dim(r.beta_fast), high = correction_dim(r.beta_slow);
    if (r.truncate) {  // HF's default; gpt-oss keeps the fractional range ("truncate": false)
        low = std::floor(low);
        high = std::ceil(high);
    }
    low = std::max(low, 0.0);
    high = std::min(high, static_cast<double>(dim - 1));
    if (low == high) high += 0.001;
    std::vector<double> inv_freq(static_cast<size_t>(dim / 2));
    for (int64_t i = 0; i < dim / 2; ++i) {
        const double pos_freq = std::pow(base, static_cast<double>(2 * i) / static_cast<double>(dim));
        const double extrapolation = 1.0 / pos_freq;
        const double interpolation = 1.0 / (r.factor * pos_freq);
        const double ramp = std::clamp((static_cast<double>(i) - low) / (high - low), 0.0, 1.0);
        const double extrapolation_factor = 1.0 - ramp;
        inv_freq[static_cast<size_t>(i)] =
            interpolation * (1.0 - extrapolation_factor) + extrapolation * extrapolation_factor;
    }
    return inv_freq;
}

}  // namespace

double RotaryEmbedding::yarn_mscale(double scale, double mscale) {
    return scale <= 1.0 ? 1.0 : 0.1 * mscale * std::log(scale) + 1.0;
}

RotaryEmbedding::RotaryEmbedding(const RopeScaling& rope, int64_t rotary_dim, int64_t num_positions,
                                 int64_t max_position_embeddings, kernels::RopeStyle style)
    : rotary_dim_(rotary_dim), style_(style) {
    MOESERVE_CHECK(rotary_dim > 0 && rotary_dim % 2 == 0, "rotary_dim {}", rotary_dim);
    const int64_t half = rotary_dim / 2;
    std::vector<double> inv_freq(static_cast<size_t>(half));
    for (int64_t i = 0; i < half; ++i) {
        inv_freq[static_cast<size_t>(i)] =
            1.0 / std::pow(rope.rope_theta, static_cast<double>(2 * i) / static_cast<double>(rotary_dim));
    }
    if (rope.rope_type == "linear") {
        for (auto& f : inv_freq) f /= rope.factor;
    } else if (rope.rope_type == "yarn") {
        const int64_t original =
            rope.original_max_position_embeddings > 0 ? rope.original_max_position_embeddings : max_position_embeddings;
        inv_freq = yarn_inv_freq(rope, rotary_dim, original);
        if (rope.attention_factor > 0) {
            attention_factor_ = rope.attention_factor;
        } else if (rope.mscale != 0 && rope.mscale_all_dim != 0) {
            attention_factor_ = yarn_mscale(rope.factor, rope.mscale) / yarn_mscale(rope.factor, rope.mscale_all_dim);
        } else {
            attention_factor_ = yarn_mscale(rope.factor, 1.0);
        }
    }
    cos_ = Tensor(DType::kF32, {num_positions, half});
    sin_ = Tensor(DType::kF32, {num_positions, half});
    for (int64_t p = 0; p < num_positions; ++p) {
        for (int64_t i = 0; i < half; ++i) {
            const double angle = static_cast<double>(p) * inv_freq[static_cast<size_t>(i)];
            cos_.as<float>()[p * half + i] = static_cast<float>(std::cos(angle) * attention_factor_);
            sin_.as<float>()[p * half + i] = static_cast<float>(std::sin(angle) * attention_factor_);
        }
    }
}

void RotaryEmbedding::apply(float* x, int64_t num_tokens, int64_t num_heads, int64_t head_stride, int64_t token_stride,
                            const int32_t* positions) const {
    kernels::RopeArgs args{x,           num_tokens, num_heads,        head_stride,      token_stride,
                           rotary_dim_, positions,  cos_.as<float>(), sin_.as<float>(), style_};
    kernels::ops().apply_rope(args);
}

}  // namespace moeserve::model
