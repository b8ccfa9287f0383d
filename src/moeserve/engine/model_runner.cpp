#include "moeserve/engine/model_runner.h"

#include <algorithm>

#include "moeserve/core/error.h"

namespace moeserve::engine {

ModelRunner::ModelRunner(model::Model& model, Sampler& sampler, int64_t num_blocks, int64_t block_size)
    : model_(model), sampler_(sampler), block_size_(block_size), kv_(model.create_kv_cache(num_blocks, block_size)) {}

ModelRunner::Layout ModelRunner::build(const ScheduledBatch& batch) const {
    Layout out;
    auto& fb = out.forward;
    size_t max_blocks = 1;
    for (const auto& s : batch.requests) max_blocks = std::max(max_blocks, s.request->block_ids.size());
    fb.max_blocks_per_seq = static_cast<int64_t>(max_blocks);
    fb.query_start.push_back(0);
    for (size_t i = 0; i < batch.requests.size(); ++i) {
        const ScheduledRequest& s = batch.requests[i];
        const Request& r = *s.request;
        const int32_t begin = r.num_computed_tokens, end = begin + s.num_tokens;
        MOESERVE_CHECK(static_cast<int64_t>(r.block_ids.size()) * block_size_ >= end, "{}: {} blocks for {} tokens",
                       r.request_id, r.block_ids.size(), end);
        const auto row0 = static_cast<int32_t>(fb.token_ids.size());
        for (int32_t p = begin; p < end; ++p) {
            // Past the request's tokens come its drafts (a speculative decode).
            fb.token_ids.push_back(p < r.num_tokens() ? r.token_at(p)
                                                      : s.draft_token_ids[static_cast<size_t>(p - r.num_tokens())]);
            fb.positions.push_back(p);
            fb.slot_mapping.push_back(r.block_ids[static_cast<size_t>(p / block_size_)] * block_size_ +
                                      p % block_size_);
        }
        fb.query_start.push_back(static_cast<int32_t>(fb.token_ids.size()));
        fb.seq_lens.push_back(end);
        fb.seq_ids.push_back(r.arrival_order);
        for (size_t b = 0; b < max_blocks; ++b) fb.block_tables.push_back(b < r.block_ids.size() ? r.block_ids[b] : 0);
        // Rows whose logits give prompt logprobs: position p predicts prompt token p + 1.
        if (r.wants_prompt_logprobs()) {
            for (int32_t p = begin; p < std::min(end, r.num_prompt_tokens() - 1); ++p) {
                fb.logits_rows.push_back(row0 + (p - begin));
                out.row_request.push_back(static_cast<int32_t>(i));
                out.row_position.push_back(p);
            }
        }
        if (s.samples()) {  // the last token's row, then one row per draft
            for (int32_t p = end - 1 - s.num_drafts(); p < end; ++p) {
                fb.logits_rows.push_back(row0 + (p - begin));
                out.row_request.push_back(static_cast<int32_t>(i));
                out.row_position.push_back(p);
            }
        }
    }
    return out;
}

StepResult ModelRunner::execute(const ScheduledBatch& batch) {
    StepResult result;
    result.sampled.resize(batch.requests.size());
    result.prompt_logprobs.resize(batch.requests.size());
    result.accepted_drafts.resize(batch.requests.size());
    if (batch.requests.empty()) return result;
    using Clock = std::chrono::steady_clock;
    const auto seconds = [](Clock::time_point a, Clock::time_point b) {
        return std::chrono::duration<double>(b - a).count();
    };
    const auto t0 = Clock::now();
    Layout layout = build(batch);
    layout.forward.moe_exchange = moe_exchange_;
    const auto t1 = Clock::now();
    const TensorView logits = model_.forward(layout.forward, *kv_);
    const auto t2 = Clock::now();
    times_.prepare += seconds(t0, t1);
    times_.forward += seconds(t1, t2);
    const int64_t vocab = model_.info().vocab_size;
    MOESERVE_CHECK(logits.numel() == static_cast<int64_t>(layout.forward.logits_rows.size()) * vocab,
                   "model returned {} logits for {} rows of {}", logits.numel(), layout.forward.logits_rows.size(),
                   vocab);
    auto* data = logits.as<float>();
    // Rows of each sampling request, in position order (its last token's, then its drafts').
    std::vector<std::vector<float*>> rows_of(batch.requests.size());
    for (size_t row = 0; row < layout.row_request.size(); ++row) {
        const auto i = static_cast<size_t>(layout.row_request[row]);
        Request* r = batch.requests[i].request;
        float* logits_row = data + static_cast<int64_t>(row) * vocab;
        const int32_t p = layout.row_position[row];
        if (p < r->num_prompt_tokens() - 1 && r->wants_prompt_logprobs()) {
            result.prompt_logprobs[i].push_back(
                compute_logprobs(logits_row, vocab, r->token_at(p + 1), *r->sampling.prompt_logprobs));
        } else {
            rows_of[i].push_back(logits_row);
        }
    }
    std::vector<DraftRows> to_sample;
    std::vector<size_t> sample_index;
    for (size_t i = 0; i < batch.requests.size(); ++i) {
        if (rows_of[i].empty()) continue;
        to_sample.push_back(DraftRows{batch.requests[i].request, rows_of[i], batch.requests[i].draft_token_ids});
        sample_index.push_back(i);
    }
    std::vector<std::vector<SampledToken>> drawn = sampler_.sample_drafts(to_sample);
    for (size_t k = 0; k < drawn.size(); ++k) {
        const size_t i = sample_index[k];
        result.sampled[i] = std::move(drawn[k].back());
        drawn[k].pop_back();
        result.accepted_drafts[i] = std::move(drawn[k]);
    }
    const auto t3 = Clock::now();
    times_.sample += seconds(t2, t3);
    if (model_.has_draft_head()) {
        result.head_drafts = propose_with_draft_head(batch, layout.forward, result);
        times_.forward += seconds(t3, Clock::now());
    }
    return result;
}

model::ForwardBatch ModelRunner::draft_batch(const ScheduledBatch& batch, const model::ForwardBatch& step,
                                             const StepResult& result) {
    model::ForwardBatch fb;
    fb.max_blocks_per_seq = step.max_blocks_per_seq;
    fb.block_tables = step.block_tables;
    fb.seq_ids = step.seq_ids;
    fb.moe_exchange = step.moe_exchange;
    fb.query_start.push_back(0);
    for (size_t i = 0; i < batch.requests.size(); ++i) {
        const ScheduledRequest& s = batch.requests[i];
        const Request& r = *s.request;
        const int32_t first = step.query_start[i];
        int32_t rows = s.num_tokens - s.num_drafts();  // through the request's last token
        TokenId after_last = 0;
        if (s.samples()) {
            rows += static_cast<int32_t>(result.accepted_drafts[i].size());
            after_last = result.sampled[i]->token_id;
        } else {  // a prefill chunk short of the prompt's end
            after_last = r.token_at(r.num_computed_tokens + s.num_tokens);
        }
        for (int32_t j = 0; j < rows; ++j) {
            const int32_t row = first + j;
            const auto at = static_cast<size_t>(row);
            fb.token_ids.push_back(j + 1 < rows ? step.token_ids[at + 1] : after_last);
            fb.positions.push_back(step.positions[at]);
            fb.slot_mapping.push_back(step.slot_mapping[at]);
            fb.hidden_rows.push_back(row);
        }
        fb.query_start.push_back(static_cast<int32_t>(fb.token_ids.size()));
        fb.seq_lens.push_back(step.positions[static_cast<size_t>(first)] + rows);
        if (s.samples() && batch.wants_head_drafts)
            fb.logits_rows.push_back(static_cast<int32_t>(fb.token_ids.size()) - 1);
    }
    return fb;
}

std::vector<std::vector<TokenId>> ModelRunner::propose_with_draft_head(const ScheduledBatch& batch,
                                                                       const model::ForwardBatch& step,
                                                                       const StepResult& result) {
    const model::ForwardBatch fb = draft_batch(batch, step, result);
    const TensorView logits = model_.forward_draft(fb, *kv_);
    const int64_t vocab = model_.info().vocab_size;
    MOESERVE_CHECK(logits.numel() == static_cast<int64_t>(fb.logits_rows.size()) * vocab,
                   "draft head returned {} logits for {} rows of {}", logits.numel(), fb.logits_rows.size(), vocab);
    // Greedy drafts: the point mass the sampler's acceptance rule expects (sampler.h).
    std::vector<std::vector<TokenId>> drafts(batch.requests.size());
    size_t row = 0;
    for (size_t i = 0; i < batch.requests.size() && batch.wants_head_drafts; ++i) {
        if (!batch.requests[i].samples()) continue;
        const float* x = logits.as<float>() + static_cast<int64_t>(row++) * vocab;
        drafts[i].push_back(static_cast<TokenId>(std::max_element(x, x + vocab) - x));
    }
    return drafts;
}

void ModelRunner::execute_dummy() {
    model::ForwardBatch fb;
    fb.token_ids = {0};
    fb.positions = {0};
    fb.slot_mapping = {0};  // null block 0, slot 0: scratch (the dummy attends to its own K/V only)
    fb.query_start = {0, 1};
    fb.seq_lens = {1};
    fb.block_tables = {0};
    fb.max_blocks_per_seq = 1;
    fb.moe_exchange = moe_exchange_;
    fb.dummy = true;
    model_.forward(fb, *kv_);
    if (model_.has_draft_head()) {
        fb.hidden_rows = {0};
        model_.forward_draft(fb, *kv_);
    }
}

}  // namespace moeserve::engine
