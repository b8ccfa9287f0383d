#include "moeserve/cli/speculative_config.h"

#include <nlohmann/json.hpp>

#include <optional>

#include "moeserve/cli/json_flag.h"
#include "moeserve/core/error.h"
#include "moeserve/io/weight_source.h"

namespace moeserve::cli {

namespace {

using Json = nlohmann::json;

constexpr int32_t kMaxPromptLookup = 64;
constexpr int32_t kDefaultPromptLookup = 5;

[[noreturn]] void bad(const std::string& what) { raise(ErrorCode::kInvalidArgument, "--speculative-config: {}", what); }

std::optional<int32_t> int_field(const Json& o, const char* key, int32_t min, int32_t max) {
    const auto it = o.find(key);
    if (it == o.end() || it->is_null()) return std::nullopt;
    if (!it->is_number_integer() || it->get<int64_t>() < min || it->get<int64_t>() > max)
        bad(fmt::format("'{}' must be an integer in [{}, {}]; got {}", key, min, max, it->dump()));
    return it->get<int32_t>();
}

// The checkpoint's MTP layers: config.json's num_nextn_predict_layers when the first one's
// eh_proj (layer index num_hidden_layers) is in the tensor index, else 0.
int64_t mtp_layers(const model::ModelSource& model) {
    const Json& config = model.config.json();
    const auto count = [&](const char* key) {
        const auto it = config.find(key);
        return it != config.end() && it->is_number_integer() ? it->get<int64_t>() : 0;
    };
    const int64_t layers = count("num_hidden_layers");
    if (count("num_nextn_predict_layers") < 1) return 0;
    const bool stored =
        model.gguf  // llama.cpp's names: blk.<N>.nextn.*
            ? model.gguf->contains(fmt::format("blk.{}.nextn.eh_proj.weight", layers))
            : io::WeightSource::open(model.path)->contains(fmt::format("model.layers.{}.eh_proj.weight", layers));
    return stored ? count("num_nextn_predict_layers") : 0;
}

// deepseek_mtp: the checkpoint's first MTP layer drafts one token per step.
void check_mtp(const model::ModelSource& model, int32_t k) {
    if (mtp_layers(model) == 0) {
        raise(ErrorCode::kInvalidModel,
              "--speculative-config: method deepseek_mtp needs a checkpoint with an MTP layer "
              "(num_nextn_predict_layers > 0 and model.layers.<num_hidden_layers>.eh_proj.weight, in a GGUF file "
              "blk.<N>.nextn.eh_proj.weight); {} has none: use method ngram",
              model.path.string());
    }
    if (k != 1) {
        raise(ErrorCode::kUnsupported,
              "--speculative-config: method deepseek_mtp drafts 1 token per step (the checkpoint's first MTP layer); "
              "'num_speculative_tokens' is {}: set it to 1",
              k);
    }
}

}  // namespace

engine::SpeculativeConfig parse_speculative_config(const std::string& text, const model::ModelSource& model) {
    engine::SpeculativeConfig c;
    if (text.empty()) return c;
    const Json j = parse_json_object_flag("--speculative-config", text);
    for (const auto& [key, value] : j.items()) {
        if (key != "method" && key != "num_speculative_tokens" && key != "prompt_lookup_max" &&
            key != "prompt_lookup_min" && key != "adaptive") {
            bad(
                fmt::format("field '{}' is not supported (known: method, num_speculative_tokens, prompt_lookup_max, "
                            "prompt_lookup_min, adaptive)",
                            key));
        }
    }
    const auto method = j.find("method");
    if (method == j.end() || !method->is_string()) bad("'method' must be a string: \"ngram\" or \"deepseek_mtp\"");
    const auto k = int_field(j, "num_speculative_tokens", 1, engine::kMaxSpeculativeTokens);
    if (!k)
        bad(fmt::format("'num_speculative_tokens' is required (an integer in [1, {}])", engine::kMaxSpeculativeTokens));
    const std::string name = method->get<std::string>();
    c.adaptive = true;  // the drafted tokens per step follow their measured cost (engine DraftBudget)
    if (const auto a = j.find("adaptive"); a != j.end()) {
        if (!a->is_boolean()) bad(fmt::format("'adaptive' must be true or false; got {}", a->dump()));
        c.adaptive = a->get<bool>();
    }
    if (name == "deepseek_mtp" || name == "mtp") {
        for (const char* key : {"prompt_lookup_max", "prompt_lookup_min"}) {
            if (j.contains(key)) bad(fmt::format("'{}' is a field of method ngram, not {}", key, name));
        }
        check_mtp(model, *k);
        c.method = engine::SpeculativeConfig::Method::kDraftHead;
        c.num_speculative_tokens = *k;
        return c;
    }
    if (name != "ngram") bad(fmt::format("method '{}' is not supported: expected \"ngram\" or \"deepseek_mtp\"", name));
    const auto max_n = int_field(j, "prompt_lookup_max", 1, kMaxPromptLookup);
    const auto min_n = int_field(j, "prompt_lookup_min", 1, kMaxPromptLookup);
    c.method = engine::SpeculativeConfig::Method::kNgram;
    c.num_speculative_tokens = *k;
    c.prompt_lookup_max = max_n.value_or(min_n.value_or(kDefaultPromptLookup));
    c.prompt_lookup_min = min_n.value_or(max_n.value_or(kDefaultPromptLookup));
    if (c.prompt_lookup_min > c.prompt_lookup_max) {
        bad(fmt::format("'prompt_lookup_min' ({}) must not exceed 'prompt_lookup_max' ({})", c.prompt_lookup_min,
                        c.prompt_lookup_max));
    }
    return c;
}

}  // namespace moeserve::cli
