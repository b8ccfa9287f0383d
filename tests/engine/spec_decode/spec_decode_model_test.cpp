// Speculative decoding on Qwen3-MoE and DeepSeek-V3, n-gram drafts: the trained KJV models of
// models/ (their greedy text repeats itself, so drafts get accepted) and the tiny random fixtures
// (qwen3_moe_tiny_model, dsv3_tiny_model; their prompts start with the continuation the model
// gives the rest, so drafts are proposed and mostly rejected); and drafts of the trained DeepSeek
// model's own MTP layer (the draft head). Greedy outputs equal each prompt
// run alone, batched, under chunked prefill and under preemption; logprobs equal a run without
// drafts within 1e-3.
#include <gtest/gtest.h>

#include "engine/engine_test_util.h"
#include "moeserve/model/registry.h"

namespace moeserve::engine {
namespace {

using namespace testing;

constexpr int kNumPrompts = 12;
constexpr int32_t kMaxTokens = 24;

struct ModelCase {
    const char* name;
    const char* dir;
    int32_t vocab;            // prompt token ids are drawn below this
    bool trained;             // its outputs repeat: drafts must get accepted
    bool draft_head = false;  // deepseek_mtp: the checkpoint's MTP layer drafts, else n-gram
};

class SpecDecodeModelTest : public ::testing::TestWithParam<ModelCase> {
protected:
    void SetUp() override {
        pool_ = std::make_unique<ThreadPool>(2);
        model_ = model::load_model(GetParam().dir, *pool_,
                                   model::LoadOptions{.max_model_len = 256, .draft_head = GetParam().draft_head});
        // A random phrase said three times, then a few other tokens; some prompts share the phrase.
        Rng rng(5);
        for (int i = 0; i < kNumPrompts; ++i) {
            std::vector<int32_t> phrase, p;
            const int len = 4 + i % 5;
            for (int k = 0; k < len; ++k) phrase.push_back(static_cast<int32_t>(rng.next_u64() % GetParam().vocab));
            for (int r = 0; r < 3; ++r) p.insert(p.end(), phrase.begin(), phrase.end());
            for (int k = 0; k < i % 4; ++k) p.push_back(static_cast<int32_t>(rng.next_u64() % GetParam().vocab));
            if (!GetParam().trained) {  // a random model's own continuation first: it may say it again
                std::vector<int32_t> q = greedy_alone(*model_, p, 6);
                q.insert(q.end(), p.begin(), p.end());
                p = std::move(q);
            }
            prompts_.push_back(p);
            expected_.push_back(greedy_alone(*model_, p, kMaxTokens));
        }
    }

    EngineConfig config(bool speculative) const {
        EngineConfig c;
        c.max_num_seqs = 16;
        c.max_num_batched_tokens = 512;
        c.max_model_len = 256;
        c.block_size = 8;
        c.num_blocks = 512;
        if (speculative && GetParam().draft_head) {
            c.speculative = {SpeculativeConfig::Method::kDraftHead, 1, 0, 0};
        } else if (speculative) {
            c.speculative = {SpeculativeConfig::Method::kNgram, 4, 3, 1};
        }
        return c;
    }

    // The speculation counters a run must show: drafts always, accepted ones on a trained model.
    void expect_drafts(const ipc::Stats& s) const {
        std::printf("%s: %lld of %lld drafted tokens accepted\n", GetParam().name,
                    static_cast<long long>(s.spec_num_accepted_tokens),
                    static_cast<long long>(s.spec_num_draft_tokens));
        EXPECT_GT(s.spec_num_draft_tokens, 0);
        if (GetParam().trained) {
            EXPECT_GT(s.spec_num_accepted_tokens, 0);
        }
        EXPECT_GT(s.spec_num_draft_tokens, s.spec_num_accepted_tokens);  // rejections too
    }

    // Runs every prompt (arriving over the first steps) and checks the outputs against alone.
    ipc::Stats run_and_check(const EngineConfig& c, std::map<std::string, std::vector<ipc::TokenLogprobs>>* logprobs) {
        EngineCore engine(*model_, *pool_, c);
        std::map<int, std::vector<ipc::AddRequest>> arrivals;
        for (size_t i = 0; i < prompts_.size(); ++i) {
            auto add = greedy_add("r" + std::to_string(i), prompts_[i], kMaxTokens);
            add.sampling.logprobs = 2;
            arrivals[static_cast<int>(i % 4)].push_back(add);
        }
        std::map<std::string, std::vector<int32_t>> tokens;
        for (int s = 0; engine.has_unfinished_requests() || !arrivals.empty(); ++s) {
            if (auto it = arrivals.find(s); it != arrivals.end()) {
                for (const auto& a : it->second) engine.add_request(a);
                arrivals.erase(it);
            }
            for (auto& o : engine.step().outputs) {
                tokens[o.request_id].insert(tokens[o.request_id].end(), o.new_token_ids.begin(), o.new_token_ids.end());
                auto& l = (*logprobs)[o.request_id];
                l.insert(l.end(), o.new_logprobs.begin(), o.new_logprobs.end());
            }
            MOESERVE_CHECK(s < 10000, "engine does not finish");
        }
        for (size_t i = 0; i < prompts_.size(); ++i) {
            EXPECT_EQ(tokens["r" + std::to_string(i)], expected_[i]) << "r" << i;
        }
        const auto& pool = engine.kv_cache_manager().pool();
        EXPECT_EQ(pool.num_free_blocks(), pool.num_blocks() - 1);
        return engine.stats();
    }

    std::unique_ptr<ThreadPool> pool_;
    std::unique_ptr<model::Model> model_;
    std::vector<std::vector<int32_t>> prompts_, expected_;
};

TEST_P(SpecDecodeModelTest, GreedyEqualsAloneAndLogprobsEqualAPlainRun) {
    std::map<std::string, std::vector<ipc::TokenLogprobs>> plain, spec;
    run_and_check(config(false), &plain);
    expect_drafts(run_and_check(config(true), &spec));
    ASSERT_EQ(plain.size(), spec.size());
    float max_diff = 0;
    for (const auto& [id, lps] : plain) {
        ASSERT_EQ(spec[id].size(), lps.size()) << id;
        for (size_t j = 0; j < lps.size(); ++j) {
            EXPECT_EQ(spec[id][j].token_id, lps[j].token_id);
            max_diff = std::max(max_diff, std::abs(spec[id][j].logprob - lps[j].logprob));
        }
    }
    EXPECT_LT(max_diff, 1e-3f);
}

TEST_P(SpecDecodeModelTest, GreedyEqualsAloneWithChunkedPrefill) {
    EngineConfig c = config(true);
    c.max_num_batched_tokens = 20;  // prompts of up to 43 tokens run in chunks next to verify steps
    std::map<std::string, std::vector<ipc::TokenLogprobs>> lp;
    const ipc::Stats s = run_and_check(c, &lp);
    expect_drafts(s);
    EXPECT_GE(s.num_prefill_steps, (s.num_prompt_tokens + 19) / 20);
}

TEST_P(SpecDecodeModelTest, GreedyEqualsAloneUnderPreemption) {
    EngineConfig c = config(true);
    c.num_blocks = 17;  // 16 usable blocks of 8 = 128 tokens for 12 x ~45 tokens
    std::map<std::string, std::vector<ipc::TokenLogprobs>> lp;
    const ipc::Stats s = run_and_check(c, &lp);
    EXPECT_GT(s.num_preemptions, 0);
    expect_drafts(s);
}

INSTANTIATE_TEST_SUITE_P(
    Models, SpecDecodeModelTest,
    ::testing::Values(ModelCase{"qwen3_moe_kjv", MOESERVE_SOURCE_DIR "/models/qwen3-moe-kjv", 4000, true},
                      ModelCase{"deepseek_v3_kjv", MOESERVE_SOURCE_DIR "/models/deepseek-v3-kjv", 4000, true},
                      ModelCase{"deepseek_v3_kjv_mtp", MOESERVE_SOURCE_DIR "/models/deepseek-v3-kjv", 4000, true, true},
                      ModelCase{"qwen3_moe_tiny", MOESERVE_QWEN3_TINY_DIR, 150000, false},
                      ModelCase{"deepseek_v3_tiny", MOESERVE_DSV3_TINY_DIR, 128000, false}),
    [](const auto& param_info) { return std::string(param_info.param.name); });

}  // namespace
}  // namespace moeserve::engine
