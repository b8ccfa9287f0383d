// Pieces of the random-model generator shared by its checkpoint writers (generator.cpp,
// generator_mindformers.cpp): the per-tensor random streams and the static-quantization
// calibration pass. Internal to the generator.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "moeserve/core/dtype.h"
#include "moeserve/core/rng.h"
#include "moeserve/core/tensor.h"
#include "moeserve/io/weight_source.h"
#include "moeserve/model/weight_spec.h"

namespace moeserve::testing::gen {

uint64_t fnv1a(const std::string& s);

// Each tensor has its own stream (seed x name), so adding a tensor never changes the others.
Tensor make_tensor(const model::WeightSpec& spec, uint64_t seed);

// Where the writers' tensors come from: the random streams, or the weights of a checkpoint
// (make-model --from: a trained model written in the quantized layouts).
struct TensorSource {
    std::function<Tensor(const model::WeightSpec&)> weight;  // spec.dtype and spec.shape
    // The RMSNorm biases the ModelSlim mix writes (f32 [n]).
    std::function<Tensor(const std::string& name, int64_t n)> norm_bias;
};

// make_tensor and make_norm_bias under `seed`.
TensorSource random_tensors(uint64_t seed);
// The checkpoint's tensors converted to each spec's dtype (a shape that differs is an error
// naming the tensor); norm biases of zeros, so the written model computes what the checkpoint does.
TensorSource checkpoint_tensors(const std::shared_ptr<const io::WeightSource>& checkpoint);

// Element i of a bf16 or f32 tensor.
float value_at(const Tensor& t, int64_t i);

// The RMSNorm biases the ModelSlim mix writes: small N(0, 0.1) values (f32 [n]).
Tensor make_norm_bias(const std::string& name, int64_t n, uint64_t seed);

inline bool ends_with(const std::string& s, const std::string& suffix) {
    return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

struct StaticCalibration {
    float scale = 1.0f;   // s_x = (max - min) / 255 over the calibration values (range widened to hold 0)
    float offset = 0.0f;  // z_x = rint(-128 - min / s_x)
};

// The calibration pass: kCalibrationRows synthetic rows of what feeds each static linear, made
// from the model's own weights: RMSNorm(z) * w (+ b) for z ~ N(0, 1) rows (the norm in front of
// q/k/v, q_a/kv_a, q_b), and those rows through v_proj (Qwen3) or kv_b_proj (DeepSeek) for
// o_proj, whose input is a convex mix of value rows. Linears that share an input share its rows,
// hence their scale and offset.
class Calibrator {
public:
    Calibrator(const std::vector<model::WeightSpec>& specs, uint64_t seed, bool norm_bias, TensorSource source)
        : seed_(seed), bias_(norm_bias), source_(std::move(source)) {
        for (const auto& s : specs) specs_.emplace(s.name, s);
    }

    // smooth: per-column multipliers applied to the rows first (golden-stick's smoothing), or nullptr
    StaticCalibration calibrate(const std::string& module, const std::vector<float>* smooth = nullptr) const {
        const std::string attn = module.substr(0, module.rfind('.') + 1);  // "model.layers.N.self_attn."
        const std::string layer = attn.substr(0, attn.size() - std::string("self_attn.").size());
        std::vector<double> x;
        if (ends_with(module, "q_b_proj")) {
            x = norm_rows(attn + "q_a_layernorm");
        } else if (ends_with(module, "o_proj")) {
            const bool mla = specs_.count(attn + "kv_b_proj.weight") != 0;
            x = project(mla ? norm_rows(attn + "kv_a_layernorm") : norm_rows(layer + "input_layernorm"),
                        mla ? attn + "kv_b_proj.weight" : attn + "v_proj.weight");
        } else {
            x = norm_rows(layer + "input_layernorm");
        }
        if (smooth != nullptr) {
            const size_t n = smooth->size();
            for (size_t j = 0; j < x.size(); ++j) x[j] *= (*smooth)[j % n];
        }
        double lo = 0.0, hi = 0.0;
        for (double v : x) {
            lo = std::min(lo, v);
            hi = std::max(hi, v);
        }
        StaticCalibration c;
        c.scale = static_cast<float>((hi - lo) / 255.0);
        c.offset = static_cast<float>(std::clamp(std::nearbyint(-128.0 - lo / double(c.scale)), -128.0, 127.0));
        return c;
    }

    bool writes_bias(const std::string& norm) const {
        return bias_ && (ends_with(norm, "input_layernorm") || ends_with(norm, "q_a_layernorm"));
    }

private:
    static constexpr int64_t kCalibrationRows = 32;

    // kCalibrationRows x n values of RMSNorm(z) * w + b
    std::vector<double> norm_rows(const std::string& norm) const {
        const Tensor w = source_.weight(specs_.at(norm + ".weight"));
        const int64_t n = w.numel();
        const Tensor b = writes_bias(norm) ? source_.norm_bias(norm + ".bias", n) : Tensor();
        Rng rng(seed_ ^ fnv1a(norm + "#calibration"));
        std::vector<double> out(static_cast<size_t>(kCalibrationRows * n));
        std::vector<double> z(static_cast<size_t>(n));
        for (int64_t r = 0; r < kCalibrationRows; ++r) {
            double ss = 0.0;
            for (auto& v : z) {
                v = rng.normal();
                ss += v * v;
            }
            const double inv = 1.0 / std::sqrt(ss / double(n) + 1e-6);
            for (int64_t j = 0; j < n; ++j) {
                out[size_t(r * n + j)] = z[size_t(j)] * inv * value_at(w, j) + (b.empty() ? 0.0 : b.as<float>()[j]);
            }
        }
        return out;
    }

    // rows [R, k] @ W[n, k]^T
    std::vector<double> project(const std::vector<double>& rows, const std::string& weight) const {
        const model::WeightSpec& spec = specs_.at(weight);
        const Tensor w = source_.weight(spec);
        const int64_t n = spec.shape[0], k = spec.shape[1];
        const auto num_rows = static_cast<int64_t>(rows.size()) / k;
        std::vector<double> out(static_cast<size_t>(num_rows * n));
        for (int64_t r = 0; r < num_rows; ++r) {
            for (int64_t j = 0; j < n; ++j) {
                double acc = 0.0;
                for (int64_t p = 0; p < k; ++p) acc += rows[size_t(r * k + p)] * value_at(w, j * k + p);
                out[size_t(r * n + j)] = acc;
            }
        }
        return out;
    }

    std::map<std::string, model::WeightSpec> specs_;
    uint64_t seed_;  // the calibration rows' stream
    bool bias_;
    TensorSource source_;
};

}  // namespace moeserve::testing::gen
