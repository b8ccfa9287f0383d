// ChoiceStream: one engine request through OutputProcessor, with OpenAI's reasons and counts.
#include "moeserve/serve/stream.h"

#include <algorithm>

namespace moeserve::serve {
namespace {

constexpr const char* kId = "c";  // the processor tracks exactly one request

}  // namespace

ChoiceStream::ChoiceStream(const tokenizer::Tokenizer& tokenizer, const openai::GenerationParams& params)
    : tokenizer_(tokenizer), params_(params), processor_(tokenizer) {
    processor_.add_request(kId,
                           OutputOptions{params.stop, params.include_stop_str_in_output, params.skip_special_tokens});
}

openai::TokenLogprob ChoiceStream::logprob_text(const ipc::TokenLogprobs& lp) const {
    openai::TokenLogprob t;
    t.token = tokenizer_.decode(std::span<const int32_t>(&lp.token_id, 1));
    t.logprob = lp.logprob;
    for (const auto& [id, value] : lp.top) {
        t.top.emplace_back(tokenizer_.decode(std::span<const int32_t>(&id, 1)), value);
    }
    return t;
}

ChoiceStream::Delta ChoiceStream::push(const ipc::RequestOutput& output) {
    Delta delta;
    if (finished_) return delta;
    ipc::RequestOutput out = output;
    out.request_id = kId;
    auto processed = processor_.process(std::span<const ipc::RequestOutput>(&out, 1));
    if (processed.deltas.empty()) return delta;
    auto& d = processed.deltas.front();
    num_tokens_ += static_cast<int64_t>(d.token_ids.size());
    delta.prompt_logprobs = std::move(d.prompt_logprobs);
    if (params_.logprobs) {
        for (const auto& lp : d.logprobs) delta.logprobs.push_back(logprob_text(lp));
    }
    delta.text = std::move(d.text);
    text_ += delta.text;
    released_ = text_.size();
    if (!d.finished) return delta;
    finished_ = true;
    stopped_by_string_ = !processed.engine_aborts.empty();
    if (d.stop_string) {
        finish_reason_ = ipc::finish_reason_name(ipc::FinishReason::kStop);
        stop_reason_ = *d.stop_string;
    } else {
        finish_reason_ = ipc::finish_reason_name(d.finish_reason);
        if (d.stop_token_id && std::find(params_.stop_token_ids.begin(), params_.stop_token_ids.end(),
                                         *d.stop_token_id) != params_.stop_token_ids.end()) {
            stop_reason_ = *d.stop_token_id;
        }
    }
    return delta;
}

}  // namespace moeserve::serve
