#include "moeserve/testing/generator_parts.h"

#include <algorithm>

#include "moeserve/core/error.h"

namespace moeserve::testing::gen {

uint64_t fnv1a(const std::string& s) {
    uint64_t h = 0xcbf29ce484222325ull;
    for (unsigned char ch : s) h = (h ^ ch) * 0x100000001b3ull;
    return h;
}

Tensor make_tensor(const model::WeightSpec& spec, uint64_t seed) {
    Tensor t(spec.dtype, spec.shape);
    Rng rng(seed ^ fnv1a(spec.name));
    const int64_t n = t.numel();
    for (int64_t i = 0; i < n; ++i) {
        float v = spec.scale * rng.normal();
        if (spec.init == model::WeightInit::kNormOnes) v += 1.0f;
        switch (spec.dtype) {
            case DType::kBF16:
                t.as<uint16_t>()[i] = f32_to_bf16(v);
                break;
            case DType::kF32:
                t.as<float>()[i] = v;
                break;
            default:
                MOESERVE_CHECK(false, "generator: dtype {} not generated", dtype_name(spec.dtype));
        }
    }
    return t;
}

float value_at(const Tensor& t, int64_t i) {
    return t.dtype() == DType::kBF16 ? bf16_to_f32(t.as<uint16_t>()[i]) : t.as<float>()[i];
}

Tensor make_norm_bias(const std::string& name, int64_t n, uint64_t seed) {
    Tensor t(DType::kF32, {n});
    Rng rng(seed ^ fnv1a(name));
    for (int64_t i = 0; i < n; ++i) t.as<float>()[i] = 0.1f * rng.normal();
    return t;
}

TensorSource random_tensors(uint64_t seed) {
    return {[seed](const model::WeightSpec& spec) { return make_tensor(spec, seed); },
            [seed](const std::string& name, int64_t n) { return make_norm_bias(name, n, seed); }};
}

TensorSource checkpoint_tensors(const std::shared_ptr<const io::WeightSource>& checkpoint) {
    auto weight = [checkpoint](const model::WeightSpec& spec) {
        const TensorView view = checkpoint->get(spec.name);
        if (!(view.shape == spec.shape)) {
            raise(ErrorCode::kInvalidModel, "{} has shape {}; the architecture's config.json makes it {}",
                  checkpoint->describe(spec.name), view.shape.str(), spec.shape.str());
        }
        Tensor f32(DType::kF32, spec.shape);
        io::convert_to_f32(view, f32.as<float>());
        if (spec.dtype == DType::kF32) return f32;
        MOESERVE_CHECK(spec.dtype == DType::kBF16, "generator: dtype {} not read", dtype_name(spec.dtype));
        Tensor out(DType::kBF16, spec.shape);
        for (int64_t i = 0; i < out.numel(); ++i) out.as<uint16_t>()[i] = f32_to_bf16(f32.as<float>()[i]);
        return out;
    };
    auto zeros = [](const std::string&, int64_t n) {
        Tensor t(DType::kF32, {n});
        std::fill_n(t.as<float>(), n, 0.0f);
        return t;
    };
    return {weight, zeros};
}

}  // namespace moeserve::testing::gen
