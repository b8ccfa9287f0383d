#include "moeserve/model/formats/static_int8.h"

#include <cmath>
#include <cstring>

#include "moeserve/core/error.h"

namespace moeserve::model {

float scalar_param(const io::WeightSource& weights, const std::string& name) {
    if (!weights.contains(name)) {
        raise(ErrorCode::kInvalidModel, "static W8A8 tensor '{}' is missing from {}", name, weights.dir().string());
    }
    const TensorView v = weights.get(name);
    if (v.numel() != 1) {
        raise(ErrorCode::kInvalidModel, "'{}' has shape {}; a per-tensor activation parameter has one value", name,
              v.shape.str());
    }
    if (v.dtype != DType::kF32 && v.dtype != DType::kBF16 && v.dtype != DType::kF16) {
        raise(ErrorCode::kInvalidModel, "'{}' has dtype {}; expected F32, BF16 or F16", name, dtype_name(v.dtype));
    }
    return weights.load_f32(name).as<float>()[0];
}

namespace {

// golden-stick: PREFIX.input_scale [in] or [1] (F32/BF16/F16, positive finite: divisors) and
// PREFIX.input_offset I8 [in] or [1] holding one zero point.
void load_golden_stick_activation(const io::WeightSource& weights, const std::string& prefix, int64_t in_features,
                                  StaticInt8Matrix& m) {
    const std::string sname = prefix + ".input_scale", zname = prefix + ".input_offset";
    for (const std::string& n : {sname, zname}) {
        if (!weights.contains(n)) {
            raise(ErrorCode::kInvalidModel, "static A8W8 tensor '{}' is missing from {}", weights.stored_name(n),
                  weights.dir().string());
        }
    }
    const TensorView s = weights.get(sname);
    if ((s.dtype != DType::kF32 && s.dtype != DType::kBF16 && s.dtype != DType::kF16) || s.shape.rank() != 1 ||
        (s.numel() != in_features && s.numel() != 1)) {
        raise(ErrorCode::kInvalidModel, "{} is {} {}; expected BF16, F16 or F32 [{}] (or [1])", weights.describe(sname),
              dtype_name(s.dtype), s.shape.str(), in_features);
    }
    const Tensor sf = weights.load_f32(sname);
    m.x_div = Tensor(DType::kF32, {in_features});
    for (int64_t k = 0; k < in_features; ++k) {
        const float v = sf.as<float>()[s.numel() == 1 ? 0 : k];
        if (!(v > 0.0f) || !std::isfinite(v)) {
            raise(ErrorCode::kInvalidModel, "{} is {} at {}; an input_scale (a divisor) must be positive and finite",
                  weights.describe(sname), v, k);
        }
        m.x_div.as<float>()[k] = v;
    }
    const TensorView z = weights.get(zname);
    if (z.dtype != DType::kI8 || z.shape.rank() != 1 || (z.numel() != in_features && z.numel() != 1)) {
        raise(ErrorCode::kInvalidModel, "{} is {} {}; expected I8 [{}] (or [1])", weights.describe(zname),
              dtype_name(z.dtype), z.shape.str(), in_features);
    }
    const auto* zp = static_cast<const int8_t*>(z.data);
    for (int64_t k = 1; k < z.numel(); ++k) {
        if (zp[k] != zp[0]) {
            raise(ErrorCode::kUnsupported,
                  "{} holds {} at 0 but {} at {}; moeserve runs one zero point per linear (golden-stick tiles z_x)",
                  weights.describe(zname), int{zp[0]}, int{zp[k]}, k);
        }
    }
    m.input_offset = static_cast<float>(zp[0]);
}

}  // namespace

StaticInt8Matrix load_static_int8(const io::WeightSource& weights, const std::string& prefix, int64_t out_features,
                                  int64_t in_features, bool golden_stick) {
    StaticInt8Matrix m;
    const std::string wname = prefix + ".weight";
    const TensorView w = weights.get(wname);
    if (w.dtype != DType::kI8 || !(w.shape == Shape{out_features, in_features})) {
        raise(ErrorCode::kInvalidModel, "static W8A8 weight {} is {} {}; expected I8 [{}, {}]", weights.describe(wname),
              dtype_name(w.dtype), w.shape.str(), out_features, in_features);
    }
    m.data = Tensor(DType::kI8, {out_features, in_features});
    std::memcpy(m.data.data(), w.data, static_cast<size_t>(out_features * in_features));
    if (golden_stick) {
        load_golden_stick_activation(weights, prefix, in_features, m);
    } else {
        m.input_scale = scalar_param(weights, prefix + ".input_scale");
        m.input_offset = scalar_param(weights, prefix + ".input_offset");
        if (!(m.input_scale > 0.0f) || !std::isfinite(m.input_scale)) {
            raise(ErrorCode::kInvalidModel, "'{}.input_scale' is {}; it must be a positive finite number", prefix,
                  m.input_scale);
        }
        if (m.input_offset != std::nearbyint(m.input_offset) || m.input_offset < -128.0f || m.input_offset > 127.0f) {
            raise(ErrorCode::kInvalidModel, "'{}.input_offset' is {}; a zero point must be an integer in [-128, 127]",
                  prefix, m.input_offset);
        }
        // vllm-ascend: input_scale in the params dtype (bf16), its reciprocal in bf16 too
        m.x_mul = bf16_to_f32(f32_to_bf16(1.0f / bf16_to_f32(f32_to_bf16(m.input_scale))));
    }
    // deq_scale [N]: F32, or I64 (F32 bits in the low 32 bits: the fp16-model form)
    const std::string dname = prefix + ".deq_scale";
    if (!weights.contains(dname)) {
        raise(ErrorCode::kInvalidModel, "static W8A8 tensor '{}' is missing from {}", weights.stored_name(dname),
              weights.dir().string());
    }
    const TensorView d = weights.get(dname);
    if (d.numel() != out_features || d.shape.rank() != 1) {
        raise(ErrorCode::kInvalidModel, "{} has shape {}; expected [{}] (one per output channel)",
              weights.describe(dname), d.shape.str(), out_features);
    }
    m.deq_scale = Tensor(DType::kF32, {out_features});
    float* ds = m.deq_scale.as<float>();
    if (d.dtype == DType::kF32) {
        std::memcpy(ds, d.data, static_cast<size_t>(out_features) * 4);
    } else if (d.dtype == DType::kI64) {
        for (int64_t i = 0; i < out_features; ++i) {
            int64_t v;
            std::memcpy(&v, static_cast<const char*>(d.data) + i * 8, 8);
            const auto bits = static_cast<uint32_t>(static_cast<uint64_t>(v) & 0xFFFFFFFFu);
            std::memcpy(&ds[i], &bits, 4);
        }
    } else {
        raise(ErrorCode::kInvalidModel,
              "{} has dtype {}; a static deq_scale is F32 (bf16 models) or I64 holding f32 bits (fp16 models)",
              weights.describe(dname), dtype_name(d.dtype));
    }
    const std::string bname = prefix + ".quant_bias";
    if (!weights.contains(bname)) {
        raise(ErrorCode::kInvalidModel, "static W8A8 tensor '{}' is missing from {}", weights.stored_name(bname),
              weights.dir().string());
    }
    const TensorView b = weights.get(bname);
    if (b.dtype != DType::kI32 || b.numel() != out_features || b.shape.rank() != 1) {
        raise(ErrorCode::kInvalidModel, "{} is {} {}; expected I32 [{}]", weights.describe(bname), dtype_name(b.dtype),
              b.shape.str(), out_features);
    }
    m.quant_bias = Tensor(DType::kI32, {out_features});
    std::memcpy(m.quant_bias.data(), b.data, static_cast<size_t>(out_features) * 4);
    return m;
}

}  // namespace moeserve::model
