#include "moeserve/model/gpt_oss/mxfp4_experts.h"

#include <cstring>
#include <span>

#include "moeserve/core/error.h"
#include "moeserve/kernels/ops.h"
#include "moeserve/model/formats/gguf_weights.h"
#include "moeserve/model/formats/mxfp4_hf.h"

namespace moeserve::model::gpt_oss {

namespace {

// One stacked MXFP4 weight [E, rows, cols] as its two checkpoint tensors.
struct Mxfp4Stack {
    std::string name;  // "<prefix>gate_up_proj" (the tensors add _blocks / _scales)
    std::span<const uint8_t> blocks, scales;
    int64_t rows = 0, cols = 0;  // of one expert
};

Mxfp4Stack open_stack(const io::WeightSource& weights, const std::string& name, int64_t experts, int64_t rows,
                      int64_t cols) {
    if (cols % 32 != 0) {
        raise(ErrorCode::kInvalidModel, "{}_blocks: {} columns are not whole 32-element MXFP4 blocks", name, cols);
    }
    const TensorView b = weights.get(name + "_blocks", DType::kU8, {experts, rows, cols / 32, 16});
    const TensorView s = weights.get(name + "_scales", DType::kU8, {experts, rows, cols / 32});
    return {name, {b.as<const uint8_t>(), b.nbytes()}, {s.as<const uint8_t>(), s.nbytes()}, rows, cols};
}

// Rows first, first + step, ... (count of them) of the stack (flattened over experts), columns
// [col0, +cols) as GGUF MXFP4 rows at dst.
void copy_rows(const Mxfp4Stack& m, int64_t first, int64_t step, int64_t count, int64_t col0, int64_t cols,
               uint8_t* dst) {
    const size_t out_row = mxfp4_row_bytes(cols);
    if (col0 == 0 && cols == m.cols) {
        mxfp4_rows_from_hf(m.name, m.blocks, m.scales, m.cols, first, step, count, {dst, out_row * size_t(count)});
        return;
    }
    // a column slice: whole rows converted one at a time, then the slice's blocks kept
    std::vector<uint8_t> row(mxfp4_row_bytes(m.cols));
    const size_t skip = mxfp4_row_bytes(col0);
    for (int64_t r = 0; r < count; ++r) {
        mxfp4_rows_from_hf(m.name, m.blocks, m.scales, m.cols, first + r * step, 1, 1, row);
        std::memcpy(dst + size_t(r) * out_row, row.data() + skip, out_row);
    }
}

BlockExpertWeights as_blocks(const Mxfp4Stack& gate_up, const Mxfp4Stack& down, int64_t inter_begin, int64_t inter,
                             const std::vector<int64_t>& ids, int64_t first_id) {
    const int64_t hidden = gate_up.cols, full_inter = down.cols;
    const size_t gate_bytes = size_t(inter) * mxfp4_row_bytes(hidden);
    const size_t down_bytes = size_t(hidden) * mxfp4_row_bytes(inter);
    const size_t expert_bytes = 2 * gate_bytes + down_bytes;
    BlockExpertWeights w;
    w.owned = Tensor(DType::kU8, {static_cast<int64_t>(expert_bytes * ids.size())});
    w.bytes = w.owned.nbytes();
    w.blocks.expert_begin = first_id;
    w.blocks.hidden = hidden;
    w.blocks.inter = inter;
    w.blocks.gate.reserve(ids.size());
    w.blocks.up.reserve(ids.size());
    w.blocks.down.reserve(ids.size());
    for (size_t i = 0; i < ids.size(); ++i) {
        uint8_t* base = w.owned.as<uint8_t>() + i * expert_bytes;
        const int64_t e = ids[i];
        // gate_up's rows interleave gate (even) and up (odd)
        copy_rows(gate_up, e * 2 * full_inter + 2 * inter_begin, 2, inter, 0, hidden, base);
        copy_rows(gate_up, e * 2 * full_inter + 2 * inter_begin + 1, 2, inter, 0, hidden, base + gate_bytes);
        copy_rows(down, e * hidden, 1, hidden, inter_begin, inter, base + 2 * gate_bytes);
        w.blocks.gate.push_back({GgmlType::kMXFP4, base, inter, hidden, mxfp4_row_bytes(hidden)});
        w.blocks.up.push_back({GgmlType::kMXFP4, base + gate_bytes, inter, hidden, mxfp4_row_bytes(hidden)});
        w.blocks.down.push_back({GgmlType::kMXFP4, base + 2 * gate_bytes, hidden, inter, mxfp4_row_bytes(inter)});
    }
    return w;
}

// --quantization none: the blocks dequantized into the float layout (expert-major gate rows,
// then up rows; down [hidden, inter]).
FloatExpertWeights widened(const BlockExpertWeights& b, bool f32) {
    const auto n = static_cast<int64_t>(b.blocks.gate.size());
    const int64_t h = b.blocks.hidden, inter = b.blocks.inter;
    const DType dtype = f32 ? DType::kF32 : DType::kBF16;
    FloatExpertWeights w{Tensor(dtype, {n, 2 * inter, h}), Tensor(dtype, {n, h, inter}), false};
    std::vector<float> buf;
    const auto widen = [&](const kernels::GgufMatrix& m, const Tensor& dst, int64_t offset) {
        buf.resize(size_t(m.rows * m.cols));
        kernels::ops().dequantize_gguf(m.type, m.data, buf.data(), m.rows * m.cols);
        for (size_t x = 0; x < buf.size(); ++x) {
            if (f32) {
                dst.as<float>()[offset + int64_t(x)] = buf[x];
            } else {
                dst.as<uint16_t>()[offset + int64_t(x)] = f32_to_bf16(buf[x]);
            }
        }
    };
    for (int64_t e = 0; e < n; ++e) {
        widen(b.blocks.gate[size_t(e)], w.gate_up, e * 2 * inter * h);
        widen(b.blocks.up[size_t(e)], w.gate_up, (e * 2 + 1) * inter * h);
        widen(b.blocks.down[size_t(e)], w.down, e * h * inter);
    }
    return w;
}

}  // namespace

bool has_mxfp4_experts(const io::WeightSource& weights, const std::string& prefix) {
    return weights.contains(prefix + "gate_up_proj_blocks");
}

ExpertWeights load_mxfp4_experts(const io::WeightSource& weights, const std::string& prefix, const ExpertsShape& s,
                                 int64_t inter_begin, int64_t inter, const std::vector<int64_t>& ids, int64_t first_id,
                                 const Quantization& quant) {
    const Mxfp4Stack gate_up = open_stack(weights, prefix + "gate_up_proj", s.num_experts, 2 * s.inter, s.hidden);
    const Mxfp4Stack down = open_stack(weights, prefix + "down_proj", s.num_experts, s.hidden, s.inter);
    if ((inter_begin % 32 != 0 || inter % 32 != 0) && inter != s.inter) {
        raise(ErrorCode::kUnsupported,
              "{}_blocks: the tensor-parallel slice [{}, +{}) of {} intermediate columns cuts a 32-element MXFP4 "
              "block; pick a tensor-parallel size that keeps whole blocks",
              down.name, inter_begin, inter, s.inter);
    }
    BlockExpertWeights blocks = as_blocks(gate_up, down, inter_begin, inter, ids, first_id);
    if (quant.mxfp4) {
        quant.counts->mxfp4_experts += 1;
        // repacked for the backend's kernels where it has a layout; the converted rows are freed then
        if (Tensor packed = gguf_pack_experts(weights, blocks.blocks, {}); !packed.empty()) {
            blocks.owned = std::move(packed);
            blocks.bytes = gguf_experts_bytes(blocks.blocks);
        }
        return blocks;
    }
    quant.counts->float_experts += 1;
    return widened(blocks, quant.f32_weights);
}

}  // namespace moeserve::model::gpt_oss
