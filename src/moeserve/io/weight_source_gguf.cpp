// WeightSource over a GGUF checkpoint (see weight_source.h, from_gguf): checkpoint names mapped to
// GGUF tensors or to one expert's slice of a stacked tensor, all zero-copy.
#include <fmt/format.h>

#include "moeserve/core/error.h"
#include "moeserve/io/weight_source.h"

namespace moeserve::io {

std::unique_ptr<WeightSource> WeightSource::from_gguf(std::shared_ptr<const GgufCheckpoint> gguf,
                                                      std::map<std::string, GgufRef> names,
                                                      std::map<std::string, Tensor> owned) {
    for (const auto& [name, ref] : names) {
        MOESERVE_CHECK(owned.count(name) == 0, "from_gguf: '{}' is both a file tensor and an owned one", name);
        MOESERVE_CHECK(gguf->contains(ref.tensor), "from_gguf: '{}' -> '{}' is not in the file", name, ref.tensor);
        const Shape& s = gguf->info(ref.tensor).shape;
        MOESERVE_CHECK(ref.index < (s.rank() > 0 ? s[0] : 0) && s.rank() >= (ref.index >= 0 ? 2 : 0),
                       "from_gguf: '{}' -> '{}'[{}] of {}", name, ref.tensor, ref.index, s.str());
    }
    std::unique_ptr<WeightSource> src(new WeightSource());
    src->dir_ = gguf->file(0).path();
    src->source_desc_ = src->dir_.string();
    src->gguf_ = std::move(gguf);
    src->gguf_names_ = std::move(names);
    src->owned_ = std::move(owned);
    return src;
}

const GgufRef& WeightSource::gguf_ref(const std::string& name) const {
    const auto it = gguf_names_.find(name);
    if (it == gguf_names_.end()) {
        raise(ErrorCode::kNotFound, "{}: no tensor for '{}' in the GGUF file", dir_.string(), name);
    }
    return it->second;
}

std::optional<GgufBlocks> WeightSource::gguf(const std::string& name) const {
    if (!gguf_) return std::nullopt;
    if (const auto it = owned_.find(name); it != owned_.end()) {
        const Tensor& t = it->second;  // made at open in f32 (from_gguf)
        return GgufBlocks{GgmlType::kF32, t.shape(), {t.as<uint8_t>(), t.nbytes()}, nullptr};
    }
    const GgufRef& ref = gguf_ref(name);
    const GgufTensor t = gguf_->tensor(ref.tensor);  // refuses unsupported types, naming them
    GgufBlocks b{t.info->type, t.info->shape, t.bytes, t.owner};
    if (ref.index >= 0) {
        const Shape& s = t.info->shape;
        b.shape = Shape(s.dims().subspan(1));
        const size_t slice = t.bytes.size() / static_cast<size_t>(s[0]);
        b.bytes = t.bytes.subspan(static_cast<size_t>(ref.index) * slice, slice);
    }
    return b;
}

TensorView WeightSource::gguf_view(const std::string& name) const {
    if (const auto it = owned_.find(name); it != owned_.end()) return it->second.view();
    const GgufBlocks b = *gguf(name);
    const std::optional<DType> dtype = ggml_plain_dtype(b.type);
    if (!dtype) {
        raise(ErrorCode::kUnsupported,
              "tensor {} is {}, and the layer that reads it takes only F32, F16 or BF16 weights", describe(name),
              ggml_type_name(b.type));
    }
    return TensorView{const_cast<uint8_t*>(b.bytes.data()), *dtype, b.shape};
}

}  // namespace moeserve::io
