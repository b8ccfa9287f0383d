// The shared decoder (model/moe_decoder.h) computes the last layer's MoE only for the rows that
// need logits (llama.cpp's inp_out_ids). Checked on both architectures against the same batch
// with every row asking for logits: the logits of the kept rows agree, in any order and with
// repeats, and the K/V of the dropped rows were still written (the next decode step agrees).
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "model/model_test_util.h"
#include "moeserve/model/registry.h"

namespace moeserve::model {
namespace {

using testutil::max_abs;
using testutil::max_abs_diff;

struct Case {
    const char* name;
    const char* dir;
    const char* prompt;
};

// One sequence's step: tokens at positions [start, start + ids.size()) into blocks 1, 2, ...
// (block size 16), asking for the logits of `rows`.
ForwardBatch step_batch(const std::vector<int32_t>& ids, int32_t start, const std::vector<int32_t>& rows) {
    constexpr int32_t kBlock = 16;
    ForwardBatch b;
    const auto n = static_cast<int32_t>(ids.size());
    for (int32_t i = 0; i < n; ++i) {
        b.token_ids.push_back(ids[static_cast<size_t>(i)]);
        b.positions.push_back(start + i);
        b.slot_mapping.push_back(static_cast<int64_t>((start + i) / kBlock + 1) * kBlock + (start + i) % kBlock);
    }
    b.query_start = {0, n};
    b.seq_lens = {start + n};
    for (int32_t blk = 1; blk <= 4; ++blk) b.block_tables.push_back(blk);
    b.max_blocks_per_seq = 4;
    b.logits_rows = rows;
    return b;
}

std::vector<float> run(Model& m, KvCache& kv, const ForwardBatch& b) {
    const TensorView out = m.forward(b, kv);
    std::vector<float> v(static_cast<size_t>(out.numel()));
    if (!v.empty()) std::memcpy(v.data(), out.data, out.nbytes());  // no rows: out.data may be null
    return v;
}

class MoeDecoderTest : public ::testing::TestWithParam<Case> {};

TEST_P(MoeDecoderTest, LastLayerRunsOnlyTheLogitsRows) {
    ThreadPool pool(2);
    const auto model = load_model(GetParam().dir, pool, LoadOptions{.max_model_len = 256});
    const int64_t vocab = model->info().vocab_size;
    const std::vector<int32_t> ids = testutil::parse_ids(GetParam().prompt);
    const auto n = static_cast<int32_t>(ids.size());
    std::vector<int32_t> all_rows;
    for (int32_t r = 0; r < n; ++r) all_rows.push_back(r);
    const std::vector<int32_t> next = {ids[3]};

    const auto full_kv = model->create_kv_cache(5, 16);
    const std::vector<float> full = run(*model, *full_kv, step_batch(ids, 0, all_rows));
    const std::vector<float> full_next = run(*model, *full_kv, step_batch(next, n, {0}));

    // some rows, out of order and repeated; then none at all (a prefill chunk that samples nothing)
    for (const std::vector<int32_t>& rows : {std::vector<int32_t>{n - 1, 2, n - 1}, std::vector<int32_t>{}}) {
        const auto kv = model->create_kv_cache(5, 16);
        const std::vector<float> got = run(*model, *kv, step_batch(ids, 0, rows));
        std::vector<float> want;
        for (int32_t r : rows) {
            want.insert(want.end(), full.begin() + r * vocab, full.begin() + (r + 1) * vocab);
        }
        EXPECT_LE(max_abs_diff(got, want), 1e-5f * max_abs(full)) << rows.size() << " rows";
        const std::vector<float> got_next = run(*model, *kv, step_batch(next, n, {0}));
        EXPECT_LE(max_abs_diff(got_next, full_next), 1e-5f * max_abs(full_next)) << rows.size() << " rows";
    }
}

INSTANTIATE_TEST_SUITE_P(Tiny, MoeDecoderTest,
                         ::testing::Values(Case{"qwen3_moe", MOESERVE_QWEN3_TINY_DIR, MOESERVE_QWEN3_PROMPT},
                                           Case{"deepseek_v3", MOESERVE_DSV3_TINY_DIR, MOESERVE_DSV3_PROMPT}),
                         [](const auto& p) { return std::string(p.param.name); });

}  // namespace
}  // namespace moeserve::model
