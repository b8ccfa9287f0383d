// `moeserve make-model`: writes a deterministic random-weight Hugging Face model directory.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <chrono>
#include <memory>

#include "moeserve/cli/cache_dir.h"
#include "moeserve/cli/commands.h"
#include "moeserve/model/architecture.h"
#include "moeserve/model/generator.h"
#include "moeserve/model/registry.h"

namespace moeserve::cli {

void add_make_model_command(CLI::App& app, Action* action) {
    auto opts = std::make_shared<model::GeneratorOptions>();
    auto tokenizer_dir = std::make_shared<std::string>();
    CLI::App* sub = app.add_subcommand("make-model", "Write a deterministic random-weight model directory");
    sub->add_option("--arch", opts->arch, fmt::format("{}", fmt::join(model::supported_model_types(), " | ")))
        ->capture_default_str();
    sub->add_option("--size", opts->size, "tiny (tests) | bench (~1B parameters)")->capture_default_str();
    sub->add_option("--seed", opts->seed, "random seed")->capture_default_str();
    sub->add_option("--out", opts->out_dir, "output directory")->required();
    sub->add_option("--shards", opts->num_shards, "number of safetensors shards")->capture_default_str();
    sub->add_option("--quantization", opts->quantization,
                    "write the linear weights as w8a8 (compressed-tensors int8), fp8 (F8_E4M3, 128x128 block "
                    "scales), modelslim-w8a8 (Ascend static+dynamic mix), modelslim-w8a8-dynamic, omniinfer-w8a8 or "
                    "mindspore-a8w8 (golden-stick, MindFormers names; deepseek only)");
    sub->add_option("--set", opts->overrides, "config.json override key=value (JSON value), repeatable");
    sub->add_option("--tokenizer-dir", *tokenizer_dir,
                    "folder with tokenizer.json + tokenizer_config.json (default: the setup cache)");
    sub->callback([opts, tokenizer_dir, action] {
        *action = [opts, tokenizer_dir] {
            if (tokenizer_dir->empty()) {
                // an unknown --arch gets no folder: generate_random_model names the supported ones
                const model::Architecture* arch = model::find_architecture(opts->arch);
                opts->tokenizer_dir = cache_dir() / "tokenizers" / (arch != nullptr ? arch->tokenizer : "");
            } else {
                opts->tokenizer_dir = *tokenizer_dir;
            }
            const auto start = std::chrono::steady_clock::now();
            const model::GeneratedModel m = model::generate_random_model(*opts);
            const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
            fmt::print("wrote {} ({} {}, seed {}): {} tensors, {:.1f}M parameters, {:.1f} MiB in {:.1f} s\n",
                       opts->out_dir.string(), opts->arch, opts->size, opts->seed, m.num_tensors,
                       static_cast<double>(m.num_parameters) / 1e6, static_cast<double>(m.num_bytes) / 1048576.0, secs);
            return 0;
        };
    });
}

}  // namespace moeserve::cli
