// OutputProcessor: the frontend side of engine outputs (vLLM's OutputProcessor): incremental
// detokenization, stop strings matched on the detokenized text, skip_special_tokens, and which
// engine requests to abort because a stop string ended them. Shared by the HTTP server and the
// offline `generate` command. Depends on tokenizer and ipc; never on the engine.
#pragma once

#include <optional>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "moeserve/ipc/messages.h"
#include "moeserve/tokenizer/detokenizer.h"
#include "moeserve/tokenizer/tokenizer.h"

namespace moeserve::serve {

// The text-level options of one request (the engine never sees them).
struct OutputOptions {
    std::vector<std::string> stop{};          // stop strings (empty ones are ignored)
    bool include_stop_str_in_output = false;  // keep the matched stop string (or stop token) text
    bool skip_special_tokens = true;
};

// What one request gained from one engine output.
struct TextDelta {
    std::string request_id;
    std::string text;  // new text (stop string cut off, held-back tail excluded)
    std::vector<ipc::TokenId> token_ids;
    std::vector<ipc::TokenLogprobs> logprobs;
    std::optional<std::vector<ipc::TokenLogprobs>> prompt_logprobs;
    bool finished = false;
    ipc::FinishReason finish_reason = ipc::FinishReason::kNone;
    std::optional<std::string> stop_string;     // the stop string that finished it
    std::optional<ipc::TokenId> stop_token_id;  // or the stop/EOS token
    int32_t num_prompt_tokens = 0;
    int32_t num_cached_tokens = 0;
    std::string error;
};

class OutputProcessor {
public:
    // tokenizer must outlive the processor.
    explicit OutputProcessor(const tokenizer::Tokenizer& tokenizer) : tokenizer_(tokenizer) {}

    // Starts tracking request_id (one engine request; n > 1 is n ids).
    void add_request(const std::string& request_id, const OutputOptions& options);
    // Stops tracking (client gone); later outputs for it are ignored.
    void remove(const std::string& request_id) { states_.erase(request_id); }
    bool contains(const std::string& request_id) const { return states_.count(request_id) > 0; }
    size_t num_requests() const { return states_.size(); }

    struct Processed {
        std::vector<TextDelta> deltas;           // one per output of a tracked request
        std::vector<std::string> engine_aborts;  // finished here by a stop string: abort them
    };
    // Turns one engine step's outputs into text deltas. While a request runs, the last
    // (longest stop string - 1) bytes are held back (they may start a stop string), rounded to a
    // whole UTF-8 character; they come out when it finishes. A stop token (EOS or stop_token_ids)
    // adds no text unless include_stop_str_in_output. Finished requests stop being tracked.
    // Not thread-safe: one caller (the server's output loop).
    Processed process(std::span<const ipc::RequestOutput> outputs);

private:
    struct State {
        OutputOptions options;
        tokenizer::IncrementalDetokenizer detok;
        std::string text;        // all text so far
        size_t num_sent = 0;     // bytes of text already returned
        size_t num_checked = 0;  // bytes already searched for stop strings
        size_t max_stop_len = 0;
    };
    // Searches the new part of the text for the earliest stop string; cuts the text there.
    std::optional<std::string> find_stop(State& s) const;

    const tokenizer::Tokenizer& tokenizer_;
    std::unordered_map<std::string, State> states_;
};

}  // namespace moeserve::serve
