// Random and ShareGPT prompt sets for the serving benchmark (see datasets.h for the vLLM
// equivalents and where we deliberately differ).
#include "moeserve/bench/datasets.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <fstream>
#include <iterator>
#include <sstream>
#include <unordered_set>

#include "moeserve/core/error.h"
#include "moeserve/core/rng.h"

namespace moeserve::bench {

namespace {

using tokenizer::TokenId;
using tokenizer::Tokenizer;

// Uniform integer in [lo, hi] (inclusive).
int64_t uniform_int(Rng& rng, int64_t lo, int64_t hi) {
    const auto span = static_cast<uint64_t>(hi - lo) + 1;
    return lo + static_cast<int64_t>(rng.next_u64() % span);
}

// The ids a random prompt may use: the model vocabulary without added/special tokens (what HF's
// tokenizer.vocab_size counts), in id order.
std::vector<TokenId> ordinary_ids(const Tokenizer& tok) {
    std::unordered_set<TokenId> added;
    for (const auto& t : tok.added_tokens()) added.insert(t.id);
    std::vector<TokenId> ids;
    ids.reserve(static_cast<size_t>(tok.vocab_size()));
    for (TokenId id = 0; id < tok.vocab_size(); ++id) {
        if (!added.count(id) && tok.id_to_token(id)) ids.push_back(id);
    }
    return ids;
}

// Text whose encoding (without special tokens) has exactly `target` tokens, starting from ids.
// Decoding arbitrary ids and encoding again may merge or split tokens, so adjust and retry: cut
// the surplus or append pool tokens for the shortfall. Returns the text and its real length.
std::pair<std::string, int64_t> text_with_token_count(const Tokenizer& tok, std::vector<TokenId> ids, int64_t target,
                                                      const std::vector<TokenId>& pool, Rng& rng) {
    constexpr int kMaxRounds = 16;
    std::string text = tok.decode(ids);
    std::vector<TokenId> enc = tok.encode(text, /*add_special_tokens=*/false);
    for (int round = 0; round < kMaxRounds && static_cast<int64_t>(enc.size()) != target; ++round) {
        if (static_cast<int64_t>(enc.size()) > target) {
            enc.resize(static_cast<size_t>(target));
        } else {
            while (static_cast<int64_t>(enc.size()) < target) {
                enc.push_back(pool[static_cast<size_t>(uniform_int(rng, 0, static_cast<int64_t>(pool.size()) - 1))]);
            }
        }
        text = tok.decode(enc);
        enc = tok.encode(text, /*add_special_tokens=*/false);
    }
    return {std::move(text), static_cast<int64_t>(enc.size())};
}

std::string read_file(const std::filesystem::path& path) {
    std::ifstream in(path, std::ios::binary);
    if (!in) raise(ErrorCode::kNotFound, "--dataset-path '{}' cannot be opened", path.string());
    std::ostringstream ss;
    ss << in.rdbuf();
    return ss.str();
}

// vLLM's is_valid_sequence with its defaults.
bool is_valid_sequence(int64_t prompt_len, int64_t output_len, bool skip_min_output_len_check) {
    constexpr int64_t kMinLen = 4, kMaxPromptLen = 1024, kMaxTotalLen = 2048;
    const bool prompt_too_short = prompt_len < kMinLen;
    const bool output_too_short = !skip_min_output_len_check && output_len < kMinLen;
    return !(prompt_too_short || output_too_short || prompt_len > kMaxPromptLen ||
             prompt_len + output_len > kMaxTotalLen);
}

}  // namespace

std::vector<SampleRequest> sample_random(const Tokenizer& tok, const RandomDatasetOptions& o) {
    if (o.range_ratio < 0.0 || o.range_ratio >= 1.0) {
        raise(ErrorCode::kInvalidArgument, "--random-range-ratio must be in [0, 1); got {}", o.range_ratio);
    }
    if (o.num_prompts < 1 || o.input_len < 1 || o.output_len < 1 || o.prefix_len < 0) {
        raise(ErrorCode::kInvalidArgument,
              "--num-prompts, --random-input-len and --random-output-len must be >= 1 and "
              "--random-prefix-len >= 0; got {}, {}, {}, {}",
              o.num_prompts, o.input_len, o.output_len, o.prefix_len);
    }
    const std::vector<TokenId> pool = ordinary_ids(tok);
    MOESERVE_CHECK(!pool.empty(), "the tokenizer has no ordinary tokens");
    const auto pool_size = static_cast<int64_t>(pool.size());
    const int64_t num_special = (tok.adds_bos_token() ? 1 : 0) + (tok.adds_eos_token() ? 1 : 0);
    const int64_t real_input_len = std::max<int64_t>(o.input_len - num_special, 0);

    Rng rng(o.seed);
    std::vector<TokenId> prefix;
    for (int64_t i = 0; i < o.prefix_len; ++i) {
        prefix.push_back(pool[static_cast<size_t>(uniform_int(rng, 0, pool_size - 1))]);
    }
    // As vLLM: [X * (1 - r), X * (1 + r)], truncated to integers.
    const auto bounds = [&](int64_t x) {
        return std::pair{static_cast<int64_t>(static_cast<double>(x) * (1.0 - o.range_ratio)),
                         static_cast<int64_t>(static_cast<double>(x) * (1.0 + o.range_ratio))};
    };
    const auto [in_lo, in_hi] = bounds(real_input_len);
    const auto [out_lo, out_hi] = bounds(o.output_len);
    std::vector<int64_t> input_lens, output_lens, offsets;
    for (int64_t i = 0; i < o.num_prompts; ++i) input_lens.push_back(uniform_int(rng, in_lo, in_hi));
    for (int64_t i = 0; i < o.num_prompts; ++i) output_lens.push_back(uniform_int(rng, out_lo, out_hi));
    for (int64_t i = 0; i < o.num_prompts; ++i) offsets.push_back(uniform_int(rng, 0, pool_size - 1));

    std::vector<SampleRequest> requests;
    for (int64_t i = 0; i < o.num_prompts; ++i) {
        const auto n = static_cast<size_t>(i);
        std::vector<TokenId> ids = prefix;
        for (int64_t j = 0; j < input_lens[n]; ++j) {
            ids.push_back(pool[static_cast<size_t>((offsets[n] + i + j) % pool_size)]);
        }
        const int64_t target = o.prefix_len + input_lens[n];
        auto [text, len] = text_with_token_count(tok, std::move(ids), target, pool, rng);
        requests.push_back({std::move(text), len, std::max<int64_t>(output_lens[n], 1)});
    }
    return requests;
}

std::vector<SampleRequest> sample_sharegpt(const Tokenizer& tok, const ShareGptOptions& o) {
    const std::string where = o.path.string();
    nlohmann::json data;
    try {
        data = nlohmann::json::parse(read_file(o.path));
    } catch (const nlohmann::json::exception& e) {
        raise(ErrorCode::kInvalidArgument, "--dataset-path '{}' is not valid JSON: {}", where, e.what());
    }
    if (!data.is_array()) {
        raise(ErrorCode::kInvalidArgument,
              "--dataset-path '{}': expected a JSON array of {{\"conversations\": [...]}} entries", where);
    }
    // (prompt, completion) of entries with at least two turns whose values are strings.
    std::vector<std::pair<std::string, std::string>> pairs;
    for (const auto& entry : data) {
        if (!entry.is_object() || !entry.contains("conversations")) continue;
        const auto& conv = entry["conversations"];
        if (!conv.is_array() || conv.size() < 2) continue;
        if (!conv[0].is_object() || !conv[1].is_object()) continue;
        const auto p = conv[0].find("value");
        const auto c = conv[1].find("value");
        if (p == conv[0].end() || c == conv[1].end() || !p->is_string() || !c->is_string()) continue;
        pairs.emplace_back(p->get<std::string>(), c->get<std::string>());
    }
    Rng rng(o.seed);
    for (size_t i = pairs.size(); i > 1; --i) {  // Fisher-Yates shuffle
        std::swap(pairs[i - 1], pairs[static_cast<size_t>(uniform_int(rng, 0, static_cast<int64_t>(i) - 1))]);
    }
    std::vector<SampleRequest> samples;
    for (const auto& [prompt, completion] : pairs) {
        if (static_cast<int64_t>(samples.size()) >= o.num_prompts) break;
        const auto prompt_len = static_cast<int64_t>(tok.encode(prompt, true).size());
        const int64_t output_len =
            o.output_len ? *o.output_len : static_cast<int64_t>(tok.encode(completion, true).size());
        if (!is_valid_sequence(prompt_len, output_len, o.output_len.has_value())) continue;
        samples.push_back({prompt, prompt_len, output_len});
    }
    if (samples.empty()) {
        raise(ErrorCode::kInvalidArgument,
              "--dataset-path '{}' has no usable conversation (need >= 2 turns, a prompt of 4..1024 "
              "tokens and prompt + reply <= 2048 tokens)",
              where);
    }
    const size_t unique = samples.size();
    while (static_cast<int64_t>(samples.size()) < o.num_prompts) {  // vLLM's oversampling
        samples.push_back(samples[static_cast<size_t>(uniform_int(rng, 0, static_cast<int64_t>(unique) - 1))]);
    }
    return samples;
}

}  // namespace moeserve::bench
