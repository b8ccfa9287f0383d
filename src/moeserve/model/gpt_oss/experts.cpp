#include "moeserve/model/gpt_oss/experts.h"

#include <type_traits>

#include "moeserve/core/dtype.h"
#include "moeserve/core/error.h"
#include "moeserve/model/gpt_oss/mxfp4_experts.h"
#include "moeserve/model/layers/weight_loading.h"

namespace moeserve::model::gpt_oss {

namespace {

// A stacked checkpoint tensor read element by element: bf16 bits as they are, other float dtypes
// widened to f32 once.
class StackedTensor {
public:
    StackedTensor(const io::WeightSource& weights, const std::string& name, const Shape& shape) {
        const TensorView v = weights.get(name);
        if (v.shape != shape) {
            raise(ErrorCode::kInvalidModel, "{} has shape {}; gpt-oss expects {}", weights.describe(name),
                  v.shape.str(), shape.str());
        }
        if (v.dtype == DType::kBF16) {
            bf16_ = v.as<const uint16_t>();
        } else {
            widened_ = weights.load_f32(name);
        }
    }
    float f32(int64_t i) const { return bf16_ ? bf16_to_f32(bf16_[i]) : widened_.as<float>()[i]; }
    uint16_t bf16(int64_t i) const { return bf16_ ? bf16_[i] : f32_to_bf16(widened_.as<float>()[i]); }

private:
    const uint16_t* bf16_ = nullptr;
    Tensor widened_;
};

// Element (row, col) of expert e's float layout from the stacked tensors: gate_up rows r < inter
// are gate column 2 (inter_begin + r), the others up column 2 (inter_begin + r - inter) + 1; down
// [hidden, inter] is the transpose of down_proj's [inter, hidden] slice.
struct Layout {
    int64_t hidden, full_inter, inter_begin, inter;
    int64_t gate_up_at(int64_t e, int64_t row, int64_t col) const {
        const int64_t out = row < inter ? 2 * (inter_begin + row) : 2 * (inter_begin + row - inter) + 1;
        return (e * hidden + col) * 2 * full_inter + out;
    }
    int64_t down_at(int64_t e, int64_t row, int64_t col) const {
        return (e * full_inter + inter_begin + col) * hidden + row;
    }
};

template <typename T>
T element(const StackedTensor& t, int64_t i) {
    if constexpr (std::is_same_v<T, float>) {
        return t.f32(i);
    } else {
        return t.bf16(i);
    }
}

// Experts ids of the stacked tensors into w's layout (T: float or bf16 bits).
template <typename T>
void fill_float(const Layout& g, const std::vector<int64_t>& ids, const StackedTensor& gate_up,
                const StackedTensor& down, FloatExpertWeights& w) {
    T* gu = w.gate_up.as<T>();
    T* dn = w.down.as<T>();
    for (size_t i = 0; i < ids.size(); ++i) {
        const int64_t e = ids[i], n = static_cast<int64_t>(i);
        for (int64_t r = 0; r < 2 * g.inter; ++r) {
            T* row = gu + (n * 2 * g.inter + r) * g.hidden;
            for (int64_t c = 0; c < g.hidden; ++c) row[c] = element<T>(gate_up, g.gate_up_at(e, r, c));
        }
        for (int64_t r = 0; r < g.hidden; ++r) {
            T* row = dn + (n * g.hidden + r) * g.inter;
            for (int64_t c = 0; c < g.inter; ++c) row[c] = element<T>(down, g.down_at(e, r, c));
        }
    }
}

FloatExpertWeights load_float(const io::WeightSource& weights, const std::string& p, const ExpertsShape& s,
                              const Layout& g, const std::vector<int64_t>& ids, bool f32) {
    const StackedTensor gate_up(weights, p + "gate_up_proj", {s.num_experts, s.hidden, 2 * s.inter});
    const StackedTensor down(weights, p + "down_proj", {s.num_experts, s.inter, s.hidden});
    const auto n = static_cast<int64_t>(ids.size());
    const DType dtype = f32 ? DType::kF32 : DType::kBF16;
    FloatExpertWeights w{Tensor(dtype, {n, 2 * g.inter, g.hidden}), Tensor(dtype, {n, g.hidden, g.inter}), false};
    if (f32) {
        fill_float<float>(g, ids, gate_up, down, w);
    } else {
        fill_float<uint16_t>(g, ids, gate_up, down, w);
    }
    return w;
}

// down_proj_bias [E, hidden] of experts ids.
Tensor down_biases(const io::WeightSource& weights, const std::string& p, const ExpertsShape& s,
                   const std::vector<int64_t>& ids) {
    const StackedTensor down(weights, p + "down_proj_bias", {s.num_experts, s.hidden});
    const auto n = static_cast<int64_t>(ids.size());
    Tensor out(DType::kF32, {n, s.hidden});
    for (int64_t i = 0; i < n; ++i) {
        const int64_t e = ids[static_cast<size_t>(i)];
        for (int64_t c = 0; c < s.hidden; ++c) out.as<float>()[i * s.hidden + c] = down.f32(e * s.hidden + c);
    }
    return out;
}

// The biases of experts ids: gate_up's gate then up values of the inter slice, and down's (on
// the first intermediate shard only: the TP ranks' partial sums are added up once).
ExpertBiases load_biases(const io::WeightSource& weights, const std::string& p, const ExpertsShape& s, const Layout& g,
                         const std::vector<int64_t>& ids) {
    const StackedTensor gate_up(weights, p + "gate_up_proj_bias", {s.num_experts, 2 * s.inter});
    const auto n = static_cast<int64_t>(ids.size());
    ExpertBiases b{Tensor(DType::kF32, {n, 2 * g.inter}), Tensor(), s.swiglu_limit, s.alpha};
    for (int64_t i = 0; i < n; ++i) {
        const int64_t e = ids[static_cast<size_t>(i)];
        for (int64_t r = 0; r < g.inter; ++r) {
            b.gate_up.as<float>()[i * 2 * g.inter + r] = gate_up.f32(e * 2 * s.inter + 2 * (g.inter_begin + r));
            b.gate_up.as<float>()[i * 2 * g.inter + g.inter + r] =
                gate_up.f32(e * 2 * s.inter + 2 * (g.inter_begin + r) + 1);
        }
    }
    if (g.inter_begin == 0) b.down = down_biases(weights, p, s, ids);
    return b;
}

void check_runnable(const std::string& module, const Quantization& quant) {
    if (quant.int8 || quant.int4) {
        raise(ErrorCode::kUnsupported,
              "'{}': gpt-oss's experts (biases and a clamped SwiGLU) run as bf16 or f32 only; run without "
              "--quantization w8a8 / w4a16",
              module);
    }
}

// A GGUF file's experts (gguf_gpt_oss.cpp): per-expert gate/up/down slices of the split stacked
// tensors as their blocks, and the split biases gate_proj_bias / up_proj_bias [E, inter] and
// down_proj_bias [E, hidden].
Experts load_gguf(const io::WeightSource& weights, const std::string& p, const ExpertsShape& s, const Layout& g,
                  const std::vector<int64_t>& ids, int64_t first_id, const Quantization& quant) {
    std::vector<std::string> prefixes;
    prefixes.reserve(ids.size());
    for (int64_t id : ids) prefixes.push_back(p + std::to_string(id) + ".");
    Experts experts = Experts::load(weights, prefixes, s.hidden, s.inter, first_id, g.inter_begin, g.inter, quant);
    const StackedTensor gate(weights, p + "gate_proj_bias", {s.num_experts, s.inter});
    const StackedTensor up(weights, p + "up_proj_bias", {s.num_experts, s.inter});
    const auto n = static_cast<int64_t>(ids.size());
    ExpertBiases b{Tensor(DType::kF32, {n, 2 * g.inter}), Tensor(), s.swiglu_limit, s.alpha};
    for (int64_t i = 0; i < n; ++i) {
        const int64_t e = ids[static_cast<size_t>(i)];
        for (int64_t r = 0; r < g.inter; ++r) {
            b.gate_up.as<float>()[i * 2 * g.inter + r] = gate.f32(e * s.inter + g.inter_begin + r);
            b.gate_up.as<float>()[i * 2 * g.inter + g.inter + r] = up.f32(e * s.inter + g.inter_begin + r);
        }
    }
    if (g.inter_begin == 0) b.down = down_biases(weights, p, s, ids);
    experts.set_biases(std::move(b));
    return experts;
}

}  // namespace

RoutedExpertsLoader routed_experts_loader(const ExpertsShape& shape) {
    return [shape](const io::WeightSource& weights, const std::string& layer_prefix, const std::vector<int64_t>& ids,
                   int64_t first_id, const MoeShards& shards, const Quantization& quant) {
        const std::string p = layer_prefix + kExperts;
        check_runnable(p + "gate_up_proj", quant);
        const Layout g{shape.hidden, shape.inter, shards.moe_inter.begin, shards.moe_inter.count};
        if (weights.is_gguf()) return load_gguf(weights, p, shape, g, ids, first_id, quant);
        if (has_mxfp4_experts(weights, p)) {
            ExpertWeights w = load_mxfp4_experts(weights, p, shape, g.inter_begin, g.inter, ids, first_id, quant);
            return Experts::from_weights(std::move(w), static_cast<int64_t>(ids.size()), shape.hidden, g.inter,
                                         first_id, load_biases(weights, p, shape, g, ids));
        }
        FloatExpertWeights w = load_float(weights, p, shape, g, ids, quant.f32_weights);
        quant.counts->float_experts += 1;
        return Experts::from_weights(std::move(w), static_cast<int64_t>(ids.size()), shape.hidden, g.inter, first_id,
                                     load_biases(weights, p, shape, g, ids));
    };
}

}  // namespace moeserve::model::gpt_oss
