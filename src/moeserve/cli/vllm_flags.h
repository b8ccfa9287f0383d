// The `vllm serve` flags that `moeserve serve` takes beyond its own, so a vLLM
// launch line starts unchanged but for the binary name. Each is one of
// (docs/serving.md, "vLLM flags"):
//   no effect here: accepted, and named in one log line at startup with the
//   reason; one value supported: the values that mean what they mean in vLLM
//   are accepted, any other is
//     a one-line error saying what runs instead;
//   refused: a one-line error with what to do instead (e.g. the ray executor ->
//   --headless nodes).
// Flags with a real meaning here (-tp, --served-model-name, --chat-template,
// ...) are registered by serve_command.cpp with the rest of serve's options.
#pragma once

#include <CLI/CLI.hpp>

#include <string>
#include <vector>

namespace moeserve::cli {

struct VllmFlags {
    std::vector<std::string> no_effect;  // "--enforce-eager (no CUDA graphs on a CPU engine)", as given
    std::string distributed_executor_backend = "mp";
    std::string load_format = "auto";
    std::string generation_config = "auto";  // generation_config.cpp reads it
    std::string override_generation_config;
    int pipeline_parallel_size = 1;
    int api_server_count = 1;
    std::vector<std::string> refused;  // flags given that are refused, with the reason
};

void add_vllm_flags(CLI::App* sub, VllmFlags& flags);

// argv with vLLM's multi-letter short flags (-tp, -dp, -pp, -dpl, -dpr, -dpa,
// -dpp, -dpn) spelled long.
std::vector<std::string> expand_vllm_short_flags(int argc, char** argv);

// Raises Error(kInvalidArgument) naming the first flag whose value is not
// supported here.
void check_vllm_flags(const VllmFlags& flags);

}  // namespace moeserve::cli
