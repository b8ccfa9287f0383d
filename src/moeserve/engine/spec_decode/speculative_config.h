// SpeculativeConfig: what --speculative-config asked for (vLLM's JSON, parsed and checked in
// cli/speculative_config.h). Plain value type.
#pragma once

#include <cstdint>

namespace moeserve::engine {

// The most drafted tokens per step that --speculative-config accepts. A verify step computes
// k + 1 positions per sequence; past a few, drafts are rarely all accepted on a CPU MoE.
inline constexpr int32_t kMaxSpeculativeTokens = 16;

struct SpeculativeConfig {
    // kNone: no speculation. kNgram: prompt lookup (ngram_proposer.h). kDraftHead: the
    // checkpoint's MTP layer (deepseek_mtp), run by ModelRunner after every forward.
    enum class Method { kNone, kNgram, kDraftHead };
    Method method = Method::kNone;
    int32_t num_speculative_tokens = 0;  // k: tokens drafted per sequence and step, at most
    int32_t prompt_lookup_max = 0;       // longest suffix n-gram looked up
    int32_t prompt_lookup_min = 0;       // shortest suffix n-gram looked up
    // Whether the drafted tokens per step follow their measured cost and acceptance (DraftBudget);
    // false: always num_speculative_tokens. The CLI's default is true ("adaptive" field).
    bool adaptive = false;

    bool enabled() const { return method != Method::kNone && num_speculative_tokens > 0; }
    // The model must load its draft head (model::LoadOptions::draft_head).
    bool uses_draft_head() const { return method == Method::kDraftHead; }
};

}  // namespace moeserve::engine
