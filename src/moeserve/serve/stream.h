// Text of one choice as engine outputs arrive: OutputProcessor (detokenization, stop strings
// with hold-back, stop tokens) for one engine request, plus what the OpenAI responses need:
// finish/stop reasons, token counts, logprob texts. One per (request, choice); not thread-safe
// (the engine client's thread).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "moeserve/ipc/messages.h"
#include "moeserve/serve/openai/render.h"
#include "moeserve/serve/output_processor.h"
#include "moeserve/tokenizer/detokenizer.h"
#include "moeserve/tokenizer/tokenizer.h"

namespace moeserve::serve {

class ChoiceStream {
public:
    // tokenizer must outlive this object.
    ChoiceStream(const tokenizer::Tokenizer& tokenizer, const openai::GenerationParams& params);

    struct Delta {
        std::string text;                                                // newly released text
        std::vector<openai::TokenLogprob> logprobs;                      // of the tokens fed (when asked)
        std::optional<std::vector<ipc::TokenLogprobs>> prompt_logprobs;  // once, with the first output (when asked)
    };
    // Feeds one engine output. After a stop string matched, finished() is true (the caller
    // aborts the engine request) and later outputs are ignored.
    Delta push(const ipc::RequestOutput& output);

    bool finished() const { return finished_; }
    // "stop" | "length" | "abort" | "error"; valid once finished.
    const std::string& finish_reason() const { return finish_reason_; }
    // null, the matched stop string, or the stop token id (if it was one of stop_token_ids).
    const openai::OJson& stop_reason() const { return stop_reason_; }
    // True when the finish came from a stop string (the engine does not know; abort it).
    bool stopped_by_string() const { return stopped_by_string_; }
    const std::string& text() const { return text_; }
    int64_t num_tokens() const { return num_tokens_; }
    // Bytes of text() already released.
    size_t released() const { return released_; }
    // A logprob entry with its token texts.
    openai::TokenLogprob logprob_text(const ipc::TokenLogprobs& lp) const;

private:
    const tokenizer::Tokenizer& tokenizer_;
    const openai::GenerationParams& params_;
    OutputProcessor processor_;  // tracks the one engine request "c"
    std::string text_;
    size_t released_ = 0;
    int64_t num_tokens_ = 0;
    bool finished_ = false, stopped_by_string_ = false;
    std::string finish_reason_;
    openai::OJson stop_reason_ = nullptr;
};

}  // namespace moeserve::serve
