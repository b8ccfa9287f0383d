// Benchmark data sets, as vLLM's benchmarks/benchmark_dataset.py builds them: "random" (token ids
// drawn from the tokenizer's vocabulary, decoded, with an exact token count) and "sharegpt" (a
// local JSON file of conversations). Depends on core and tokenizer only.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <vector>

#include "moeserve/bench/sample_request.h"
#include "moeserve/tokenizer/tokenizer.h"

namespace moeserve::bench {

struct RandomDatasetOptions {
    int64_t num_prompts = 1000;
    int64_t input_len = 1024;  // --random-input-len, including the special tokens encode() adds
    int64_t output_len = 128;  // --random-output-len
    double range_ratio = 0.0;  // --random-range-ratio: lengths uniform in [X*(1-r), X*(1+r)]
    int64_t prefix_len = 0;    // --random-prefix-len: the same random tokens before every prompt
    uint64_t seed = 0;
};

// vLLM's RandomDataset.sample: per request, input_len - (special tokens the tokenizer adds)
// consecutive vocabulary ids from a random offset, after a shared random prefix, decoded to text.
// Unlike vLLM v0.9, which truncates once and may end a few tokens short, the text is re-encoded
// and adjusted (truncate / extend) until encode(prompt, add_special_tokens=false) has exactly
// prefix_len + the drawn length tokens; prompt_len is that count (checked, not assumed). Ids are
// drawn from the ordinary vocabulary (no added or special tokens). Deterministic in seed.
// Error kInvalidArgument for range_ratio outside [0, 1), negative lengths or num_prompts < 1.
std::vector<SampleRequest> sample_random(const tokenizer::Tokenizer& tokenizer, const RandomDatasetOptions& options);

struct ShareGptOptions {
    std::filesystem::path path;  // JSON: [{"conversations": [{"value": ...}, ...]}, ...]
    int64_t num_prompts = 1000;
    std::optional<int64_t> output_len{};  // --sharegpt-output-len; default: the reply's length
    uint64_t seed = 0;
};

// vLLM's ShareGPTDataset.sample: entries with >= 2 turns, shuffled by seed; prompt = first turn,
// output length = tokens of the second turn (or output_len); skips pairs vLLM's
// is_valid_sequence rejects (prompt < 4 or > 1024 tokens, reply < 4 unless output_len is given,
// sum > 2048); repeats random samples if fewer than num_prompts remain. Error kNotFound /
// kInvalidArgument naming the file for a missing or malformed file, or no usable entry.
std::vector<SampleRequest> sample_sharegpt(const tokenizer::Tokenizer& tokenizer, const ShareGptOptions& options);

}  // namespace moeserve::bench
