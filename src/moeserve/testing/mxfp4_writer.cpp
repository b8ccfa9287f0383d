#include "moeserve/testing/mxfp4_writer.h"

#include "moeserve/core/dtype.h"
#include "moeserve/core/error.h"
#include "moeserve/model/formats/mxfp4_hf.h"

namespace moeserve::testing {

namespace {

bool ends_with(const std::string& s, const std::string& suffix) {
    return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

}  // namespace

bool is_mxfp4_expert_tensor(const std::string& name) {
    return ends_with(name, ".mlp.experts.gate_up_proj") || ends_with(name, ".mlp.experts.down_proj");
}

std::vector<std::string> add_mxfp4_expert_tensor(io::SafetensorsWriter& writer, const std::string& name,
                                                 const Tensor& t) {
    const int64_t experts = t.dim(0), in = t.dim(1), out = t.dim(2);
    if (in % 32 != 0) {
        raise(ErrorCode::kInvalidArgument, "{}: {} input columns are not whole 32-element MXFP4 blocks", name, in);
    }
    const int64_t nb = in / 32;
    Tensor blocks(DType::kU8, {experts, out, nb, 16});
    Tensor scales(DType::kU8, {experts, out, nb});
    std::vector<float> row(static_cast<size_t>(in));
    for (int64_t e = 0; e < experts; ++e) {
        for (int64_t r = 0; r < out; ++r) {  // output row r is input-major column r
            for (int64_t c = 0; c < in; ++c) row[size_t(c)] = bf16_to_f32(t.as<uint16_t>()[(e * in + c) * out + r]);
            const int64_t first = (e * out + r) * nb;
            model::mxfp4_hf_row_from_f32(row.data(), in, blocks.as<uint8_t>() + first * 16,
                                         scales.as<uint8_t>() + first);
        }
    }
    writer.add(name + "_blocks", std::move(blocks));
    writer.add(name + "_scales", std::move(scales));
    return {name + "_blocks", name + "_scales"};
}

}  // namespace moeserve::testing
