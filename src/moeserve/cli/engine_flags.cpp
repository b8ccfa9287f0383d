// The table of engine flags and the three readers of it: registration, a rank's argv, the fingerprint.
#include "moeserve/cli/engine_flags.h"

#include <fmt/format.h>

#include <string_view>
#include <variant>

namespace moeserve::cli {

namespace {

using Field = std::variant<std::string EngineOptions::*, int32_t EngineOptions::*, uint64_t EngineOptions::*,
                           double EngineOptions::*, bool EngineOptions::*>;

constexpr unsigned bit(EngineCommand c) { return 1u << static_cast<unsigned>(c); }
constexpr unsigned kEveryCommand =
    bit(EngineCommand::kServe) | bit(EngineCommand::kRank) | bit(EngineCommand::kGenerate);
// A deployment's flags: KV transfer, EPLB and PD hybrid need serve's engines and ranks (and
// generate logs nothing but its summary).
constexpr unsigned kDeployment = bit(EngineCommand::kServe) | bit(EngineCommand::kRank);

struct EngineFlag {
    // CLI11's names: the flag first, then its aliases; a bool's negation as "!--no-...".
    const char* names;
    Field field;
    unsigned commands;
    bool agreed;  // the ranks of one deployment must agree on it (the fingerprint holds it)
    const char* help;
    std::vector<std::string> choices = {};  // when given, the value must be one of them
    bool show_default = true;               // the help shows the default value (not when it is a marker)
};

const std::vector<EngineFlag>& engine_flag_table() {
    using O = EngineOptions;
    static const std::vector<EngineFlag> table = {
        {"--model", &O::model, kEveryCommand, false, "Hugging Face model directory or GGUF file"},
        {"--tokenizer", &O::tokenizer, kEveryCommand, false,
         "folder with tokenizer.json and tokenizer_config.json (default: the model's)"},
        {"--max-num-seqs", &O::max_num_seqs, kEveryCommand, true,
         "most sequences in one batch (generate --prompt: 1 unless given)"},
        {"--max-model-len", &O::max_model_len, kEveryCommand, true,
         "longest sequence, prompt + output (0: min(max_position_embeddings, 4096))"},
        {"--max-num-batched-tokens", &O::max_num_batched_tokens, kEveryCommand, false, "most tokens in one step"},
        {"--block-size", &O::block_size, kEveryCommand, true, "KV cache block size in tokens"},
        {"--gpu-memory-utilization", &O::gpu_memory_utilization, kEveryCommand, false,
         "on CPU: share of RAM for weights + KV cache"},
        {"--kv-cache-memory,--kv-cache-memory-bytes", &O::kv_cache_memory, kEveryCommand, false,
         "KV cache size per rank, e.g. 2G (overrides --gpu-memory-utilization)"},
        {"--enable-prefix-caching,!--no-enable-prefix-caching", &O::enable_prefix_caching, kEveryCommand, false,
         "reuse KV blocks of shared prompt prefixes (default on)"},
        {"--seed", &O::seed, kEveryCommand, false, "seed of requests without their own"},
        {"--threads",
         &O::threads,
         kEveryCommand,
         false,
         "compute threads per rank (default: the host's cores, divided between the ranks on it)",
         {},
         false},
        {"--log-level", &O::log_level, kDeployment, false, "debug | info | warning | error"},
        {"--quantization,-q", &O::quantization, kEveryCommand, true,
         "w8a8 (int8 weights + per-token int8 activations, quantized at load from bf16/FP8) | w8a8-all (lm_head "
         "too) | w4a16 (int4 weights, quantized at load) | w4a8 (the same with per-token int8 activations; an int4 "
         "checkpoint runs either way) | fp8 (an FP8 checkpoint as stored, W8A16: its default) | "
         "none (bf16) | ascend (a ModelSlim checkpoint as stored); default: as the checkpoint says "
         "(quant_model_description.json, else config.json's quantization_config)"},
        {"--scheduling-policy",
         &O::scheduling_policy,
         kEveryCommand,
         false,
         "fcfs: arrival order | priority: the requests' `priority` field, lower first (ties by arrival); the "
         "lowest priority is preempted first",
         {"fcfs", "priority"}},
        {"--kv-cache-dtype", &O::kv_cache_dtype, kEveryCommand, true,
         "auto (the checkpoint's dtype: bf16) | bf16 | fp32 | fp8 (fp8_e4m3; experimental: e4m3 with a scale per "
         "row): element type of the KV / MLA latent cache"},
        {"--dtype", &O::dtype, kEveryCommand, true,
         "auto | bfloat16 (bf16): the checkpoint's bf16 weights; float32 (float, fp32): widened to f32 at load, "
         "twice the memory (half/float16 are refused)"},
        {"--speculative-config", &O::speculative_config, kEveryCommand, true,
         "speculative decoding: {\"method\": \"ngram\", \"num_speculative_tokens\": K, \"prompt_lookup_max\": N, "
         "\"prompt_lookup_min\": M} (docs/serving.md)"},
        {"--kv-transfer-config", &O::kv_transfer_config, kDeployment, false,
         "PD disaggregation: {\"kv_connector\": \"MoeserveConnector\", \"kv_role\": \"kv_producer\" | "
         "\"kv_consumer\" | \"kv_both\", \"kv_ip\", \"kv_port\", \"kv_connector_extra_config\"} "
         "(docs/parallelism.md)"},
        {"--enable-eplb", &O::enable_eplb, kDeployment, true,
         "expert-parallel load balancing: count the tokens routed to each expert and move experts between EP "
         "ranks (copies of hot ones with num_redundant_experts) in the background (docs/parallelism.md)"},
        {"--eplb-config", &O::eplb_config, kDeployment, true,
         "EPLB: {\"window_size\": forwards counted (1000), \"step_interval\": forwards between decisions (3000), "
         "\"num_redundant_experts\": extra slots (0), \"log_balancedness\": false}"},
        {"--pd-hybrid", &O::pd_hybrid, kDeployment, true,
         "PD hybrid scheduling: all DP ranks agree each step on prefill or decode (env: OMNI_PD_HYBRID=1)"},
    };
    return table;
}

bool takes(const EngineFlag& f, EngineCommand command) { return (f.commands & bit(command)) != 0; }

// The first of the row's names: the one a rank's argv and the fingerprint use.
std::string_view primary_name(const EngineFlag& f) {
    const std::string_view names = f.names;
    return names.substr(0, names.find(','));
}

// The bool's negated name ("--no-..."), or empty when the row has none.
std::string_view negation_name(const EngineFlag& f) {
    const std::string_view names = f.names;
    const size_t bang = names.find(",!");
    return bang == std::string_view::npos ? std::string_view{} : names.substr(bang + 2);
}

// The value as a rank's command line spells it ("" for an empty string).
std::string value_text(const EngineFlag& f, const EngineOptions& o) {
    return std::visit(
        [&o](auto member) -> std::string {
            const auto& v = o.*member;
            using T = std::decay_t<decltype(v)>;
            if constexpr (std::is_same_v<T, std::string>) {
                return v;
            } else if constexpr (std::is_same_v<T, bool>) {
                return v ? "on" : "off";
            } else {
                return fmt::format("{}", v);  // the shortest text that reads back as the same double
            }
        },
        f.field);
}

void add_one(CLI::App* sub, EngineOptions& o, const EngineFlag& f, bool required) {
    CLI::Option* option = std::visit(
        [&](auto member) -> CLI::Option* {
            auto& v = o.*member;
            if constexpr (std::is_same_v<std::decay_t<decltype(v)>, bool>) {
                return sub->add_flag(f.names, v, f.help);
            } else {
                CLI::Option* added = sub->add_option(f.names, v, f.help);
                return f.show_default ? added->capture_default_str() : added;
            }
        },
        f.field);
    if (!f.choices.empty()) option->check(CLI::IsMember(f.choices));
    if (required) option->required();
}

}  // namespace

EngineOptions engine_defaults(EngineCommand command) {
    EngineOptions o;
    if (command == EngineCommand::kGenerate) o.max_model_len = 4096;
    return o;
}

void add_engine_flags(CLI::App* sub, EngineOptions& o, EngineCommand command) {
    for (const EngineFlag& f : engine_flag_table()) {
        if (!takes(f, command)) continue;
        const bool is_model = std::holds_alternative<std::string EngineOptions::*>(f.field) &&
                              std::get<std::string EngineOptions::*>(f.field) == &EngineOptions::model;
        // `serve MODEL` as `vllm serve MODEL`; --model stays (serve checks that one is given).
        if (is_model && command == EngineCommand::kServe) sub->add_option("model_tag", o.model, f.help);
        add_one(sub, o, f, is_model && command != EngineCommand::kServe);
    }
}

std::vector<std::string> rank_engine_argv(const EngineOptions& o) {
    std::vector<std::string> argv;
    for (const EngineFlag& f : engine_flag_table()) {
        if (!takes(f, EngineCommand::kRank)) continue;
        const std::string name(primary_name(f));
        if (std::holds_alternative<bool EngineOptions::*>(f.field)) {
            const bool on = o.*std::get<bool EngineOptions::*>(f.field);
            if (on) argv.push_back(name);
            if (!on && !negation_name(f).empty()) argv.emplace_back(negation_name(f));
            continue;
        }
        const std::string value = value_text(f, o);
        if (!value.empty()) argv.insert(argv.end(), {name, value});
    }
    return argv;
}

std::string engine_flags_fingerprint(const EngineOptions& o) {
    std::string out;
    for (const EngineFlag& f : engine_flag_table()) {
        if (!f.agreed) continue;
        if (!out.empty()) out += ", ";
        out += fmt::format("{} '{}'", primary_name(f), value_text(f, o));
    }
    return out;
}

}  // namespace moeserve::cli
