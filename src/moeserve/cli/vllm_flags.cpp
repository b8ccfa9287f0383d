#include "moeserve/cli/vllm_flags.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <vector>

#include "moeserve/core/error.h"

namespace moeserve::cli {
namespace {

struct NoEffect {
    const char* name;
    bool takes_value;
    const char* why;
};

// vLLM flags that have nothing to act on in a CPU engine that loads local
// directories.
constexpr NoEffect kNoEffect[] = {
    {"--enforce-eager", false, "no CUDA graphs on a CPU engine"},
    {"--disable-custom-all-reduce", false, "Gloo does every all-reduce"},
    {"--disable-fastapi-docs", false, "there are no /docs routes"},
    {"--disable-frontend-multiprocessing", false, "the API server is one process already"},
    {"--enable-prompt-tokens-details", false,
     "usage.prompt_tokens_details is sent whenever tokens came from the cache"},
    {"--enable-chunked-prefill", false, "prefill is always chunked by --max-num-batched-tokens"},
    {"--no-enable-chunked-prefill", false, "prefill is always chunked by --max-num-batched-tokens"},
    {"--swap-space", true, "no GPU memory to swap from; preempted requests are recomputed"},
    {"--cpu-offload-gb", true, "the weights live in host memory already"},
    {"--uvicorn-log-level", true, "there is no uvicorn; --log-level sets the log"},
    {"--revision", true, "a local model directory has no revisions"},
    {"--tokenizer-revision", true, "a local tokenizer directory has no revisions"},
    {"--code-revision", true, "no remote code is run"},
    {"--download-dir", true, "models are never downloaded"},
    {"--max-parallel-loading-workers", true, "weights are memory-mapped, not loaded by workers"},
    {"--max-num-partial-prefills", true, "there is no partial-prefill scheduling"},
    {"--max-long-partial-prefills", true, "there is no partial-prefill scheduling"},
    {"--long-prefill-token-threshold", true, "there is no partial-prefill scheduling"},
    {"--max-seq-len-to-capture", true, "no CUDA graphs on a CPU engine"},
    {"--compilation-config,-O", true, "nothing is compiled at run time"},
    {"--tokenizer-mode", true, "tokenizer.json is always used"},
    {"--enable-server-load-tracking", false, "the load (GET /load) is always tracked"},
    {"--exclude-tools-when-tool-choice-none", false, "tools are never rendered for tool_choice none"},
    {"--guided-decoding-backend", true, "structured outputs always run the built-in grammar engine"},
    {"--limit-mm-per-prompt", true, "the models served here are text-only; an image or audio part is a 400"},
};

// Flags with one value (or its synonyms) that means what it means in vLLM; another value is
// refused with the reason.
struct OneValue {
    const char* name;
    std::vector<const char*> accepted;  // the first is the default
    const char* why;
};
const std::vector<OneValue>& one_value_flags() {
    static const std::vector<OneValue> table = {
        {"--device", {"auto", "cpu"}, "moeserve runs on the CPU only"},
        {"--task", {"auto", "generate"}, "only text generation is served here (no embed, classify, score, reward)"},
        {"--response-role", {"assistant"}, "chat answers always carry role 'assistant'"},
    };
    return table;
}

// Flags refused with what to do instead.
struct Refused {
    const char* name;
    bool takes_value;
    const char* why;
};
constexpr Refused kRefused[] = {
    {"--ssl-keyfile-password", true,
     "encrypted private keys are not read: decrypt the key file (openssl pkey -in K -out K2)"},
    {"--enable-lora", false, "there are no LoRA adapters here: merge the adapter into the weights first"},
};

[[noreturn]] void unsupported(const std::string& flag, const std::string& value, const std::string& what) {
    raise(ErrorCode::kInvalidArgument, "{} {}: {}", flag, value, what);
}

}  // namespace

void add_vllm_flags(CLI::App* sub, VllmFlags& f) {
    const auto group = "vLLM compatibility";
    for (const auto& n : kNoEffect) {
        const std::string first = std::string(n.name).substr(0, std::string(n.name).find(','));
        const std::string note = fmt::format("{} ({})", first, n.why);
        if (n.takes_value) {
            sub->add_option_function<std::string>(
                   n.name, [&f, note](const std::string&) { f.no_effect.push_back(note); },
                   fmt::format("no effect here: {}", n.why))
                ->group(group);
        } else {
            sub->add_flag_callback(
                   n.name, [&f, note] { f.no_effect.push_back(note); }, fmt::format("no effect here: {}", n.why))
                ->group(group);
        }
    }
    for (const auto& r : kRefused) {
        const std::string note = fmt::format("{}: {}", r.name, r.why);
        if (r.takes_value) {
            sub->add_option_function<std::string>(
                   r.name, [&f, note](const std::string&) { f.refused.push_back(note); },
                   fmt::format("refused: {}", r.why))
                ->group(group);
        } else {
            sub->add_flag_callback(
                   r.name, [&f, note] { f.refused.push_back(note); }, fmt::format("refused: {}", r.why))
                ->group(group);
        }
    }
    for (const auto& v : one_value_flags()) {
        const std::string name = v.name;
        const std::string accepted = fmt::format("{}", fmt::join(v.accepted, " | "));
        sub->add_option_function<std::string>(
               name,
               [&f, name, v](const std::string& value) {
                   for (const char* a : v.accepted)
                       if (value == a) return;
                   f.refused.push_back(
                       fmt::format("{} {}: {} (accepted: {})", name, value, v.why, fmt::join(v.accepted, ", ")));
               },
               fmt::format("{} ({})", accepted, v.why))
            ->group(group);
    }
    sub->add_option("--distributed-executor-backend", f.distributed_executor_backend,
                    "mp: rank processes per node, as here (ray is refused: start "
                    "--headless nodes instead)")
        ->group(group)
        ->capture_default_str();
    sub->add_option("--load-format", f.load_format, "auto | safetensors")->group(group)->capture_default_str();
    sub->add_option("--generation-config", f.generation_config,
                    "auto: the model's generation_config.json sets sampling defaults and extra EOS ids; "
                    "vllm: not read; or a folder with one")
        ->group(group)
        ->capture_default_str();
    sub->add_option("--override-generation-config", f.override_generation_config,
                    "a JSON object whose keys replace generation_config.json's, e.g. '{\"temperature\": 0.5}'")
        ->group(group);
    sub->add_option("--pipeline-parallel-size", f.pipeline_parallel_size, "1 (pipeline parallelism is refused)")
        ->group(group)
        ->capture_default_str();
    sub->add_option("--api-server-count", f.api_server_count,
                    "-asc: API server processes on the one --port (SO_REUSEPORT), each reaching every engine")
        ->group(group)
        ->capture_default_str();
}

std::vector<std::string> expand_vllm_short_flags(int argc, char** argv) {
    // vLLM's multi-letter short forms (CLI11 takes one-letter short names only).
    static const std::pair<const char*, const char*> kShort[] = {
        {"-tp", "--tensor-parallel-size"},      {"-pp", "--pipeline-parallel-size"},
        {"-dp", "--data-parallel-size"},        {"-dpl", "--data-parallel-size-local"},
        {"-dpr", "--data-parallel-start-rank"}, {"-dpa", "--data-parallel-address"},
        {"-dpp", "--data-parallel-rpc-port"},   {"-dpn", "--data-parallel-rank"},
        {"-asc", "--api-server-count"},
    };
    std::vector<std::string> out;
    for (int i = 0; i < argc; ++i) {
        std::string a = argv[i];
        for (const auto& [from, to] : kShort) {
            const std::string f = from;
            if (a == f)
                a = to;
            else if (a.rfind(f + "=", 0) == 0)
                a = std::string(to) + a.substr(f.size());
        }
        out.push_back(std::move(a));
    }
    return out;
}

void check_vllm_flags(const VllmFlags& f) {
    if (!f.refused.empty()) raise(ErrorCode::kInvalidArgument, "{}", f.refused.front());
    if (f.distributed_executor_backend == "ray") {
        unsupported("--distributed-executor-backend", "ray",
                    "there is no Ray here: start one `moeserve serve --headless` "
                    "per other node with the same "
                    "--data-parallel-* flags (docs/parallelism.md), or use mp");
    }
    if (f.distributed_executor_backend != "mp") {
        unsupported("--distributed-executor-backend", f.distributed_executor_backend,
                    "only mp (one rank process per rank) runs here");
    }
    if (f.load_format != "auto" && f.load_format != "safetensors") {
        unsupported("--load-format", f.load_format, "only safetensors checkpoints are read (auto | safetensors)");
    }
    if (f.pipeline_parallel_size != 1) {
        unsupported("--pipeline-parallel-size", std::to_string(f.pipeline_parallel_size),
                    "no pipeline parallelism: use --tensor-parallel-size and "
                    "--data-parallel-size with --enable-expert-parallel");
    }
}

}  // namespace moeserve::cli
