// `moeserve make-model`: writes a deterministic random-weight Hugging Face model directory.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "moeserve/cli/cache_dir.h"
#include "moeserve/cli/commands.h"
#include "moeserve/core/error.h"
#include "moeserve/model/formats/gguf_convert.h"
#include "moeserve/model/registry.h"
#include "moeserve/testing/generator.h"
#include "moeserve/testing/generator_architecture.h"
#include "moeserve/tokenizer/tokenizer.h"

namespace moeserve::cli {

namespace {

struct GgufFlags {
    std::string format = "hf";
    std::string type = "Q8_0";
    uint64_t split_bytes = 0;
    std::string dequantized_dir;
    std::vector<std::string> tensor_types;  // PART=TYPE
};

GgmlType parse_gguf_type(const std::string& name) {
    for (uint32_t n = 0; n < 64; ++n) {
        const auto t = ggml_type_traits(n);
        if (t && t->name == name && t->supported && name != "Q8_K") return static_cast<GgmlType>(n);
    }
    raise(ErrorCode::kInvalidArgument, "--gguf-type {}: expected one of {} (not Q8_K)", name,
          ggml_supported_type_names());
}

// --format gguf: the HF directory just written becomes OUT/model-<TYPE>.gguf (and its references).
void write_gguf(const testing::GeneratorOptions& opts, const GgufFlags& g) {
    const GgmlType type = parse_gguf_type(g.type);
    const std::filesystem::path out = opts.out_dir / fmt::format("model-{}.gguf", g.type);
    model::GgufWriteOptions w{type, g.split_bytes, {}, std::nullopt};
    if (std::filesystem::exists(opts.out_dir / "tiktoken.model")) {
        w.tokenizer_json = tokenizer::tiktoken_folder_tokenizer_json(opts.out_dir);  // Kimi-K2's folder
    }
    for (const std::string& spec : g.tensor_types) {
        const size_t eq = spec.rfind('=');
        if (eq == std::string::npos || eq == 0) {
            raise(ErrorCode::kInvalidArgument, "--gguf-tensor-type {}: expected PART=TYPE, e.g. attn_v=Q6_K", spec);
        }
        w.tensor_types.emplace_back(spec.substr(0, eq), parse_gguf_type(spec.substr(eq + 1)));
    }
    const auto files = model::write_gguf_from_checkpoint(opts.out_dir, out, w);
    for (const auto& f : files) fmt::print("wrote {}\n", f.string());
    if (!g.dequantized_dir.empty()) {
        model::write_dequantized_checkpoint(files.front(), g.dequantized_dir);
        fmt::print("wrote {} (the GGUF's weights dequantized to F32)\n", g.dequantized_dir);
    }
}

}  // namespace

void add_make_model_command(CLI::App& app, Action* action) {
    auto opts = std::make_shared<testing::GeneratorOptions>();
    auto tokenizer_dir = std::make_shared<std::string>();
    CLI::App* sub = app.add_subcommand(
        "make-model", "Write a deterministic random-weight model directory (or a checkpoint's, with --from)");
    sub->add_option("--arch", opts->arch, fmt::format("{}", fmt::join(model::supported_model_types(), " | ")))
        ->capture_default_str();
    sub->add_option("--size", opts->size, "tiny (tests) | bench (~1B parameters)")->capture_default_str();
    sub->add_option("--seed", opts->seed, "random seed")->capture_default_str();
    sub->add_option("--out", opts->out_dir, "output directory")->required();
    sub->add_option("--shards", opts->num_shards, "number of safetensors shards")->capture_default_str();
    sub->add_option(
        "--quantization", opts->quantization,
        "write the linear weights as w8a8 (compressed-tensors int8), w4a16 / w4a16-asym (compressed-tensors "
        "pack-quantized int4, groups of 32; w4a16-act: actorder group; w4a8: with 8-bit per-token input_activations), "
        "awq, gptq, gptq-act (desc_act) (int4, groups "
        "of 32), fp8 (F8_E4M3, 128x128 block scales), modelslim-w8a8 (Ascend static+dynamic mix), "
        "modelslim-w8a8-dynamic, modelslim-w4a8 (the mix with W4A8_DYNAMIC routed experts, packed, per group; "
        "-channel: one value per byte, per row), omniinfer-w8a8 or "
        "mindspore-a8w8 (golden-stick, MindFormers names; deepseek only), or mxfp4 (gpt_oss: its experts as "
        "MXFP4 _blocks / _scales, as released)");
    sub->add_option("--set", opts->overrides, "config.json override key=value (JSON value), repeatable");
    sub->add_option("--from", opts->from_dir,
                    "take config.json, the weights and the tokenizer of this checkpoint instead of random ones (a "
                    "trained model into a --quantization layout or --format gguf); --arch must be its model_type");
    auto gguf = std::make_shared<GgufFlags>();
    sub->add_option("--format", gguf->format,
                    "hf (the safetensors directory) | gguf (also OUT/model-<TYPE>.gguf, qwen3_moe as llama.cpp's "
                    "qwen3moe; use --set mlp_only_layers=[] for the tiny size)")
        ->capture_default_str();
    sub->add_option("--gguf-type", gguf->type, "GGUF matrix type: Q8_0, Q4_0, Q4_K, Q5_K, Q6_K, MXFP4, F16, ...")
        ->capture_default_str();
    sub->add_option("--gguf-tensor-type", gguf->tensor_types,
                    "PART=TYPE: GGUF tensors whose name contains PART are written as TYPE (the first match; "
                    "repeatable), as llama-quantize mixes types");
    sub->add_option("--gguf-split-bytes", gguf->split_bytes,
                    "> 0: write gguf-split files of at most this many tensor bytes");
    sub->add_option("--gguf-dequantized-dir", gguf->dequantized_dir,
                    "also write the GGUF's weights dequantized to F32 there (config + tokenizer), for references");
    sub->add_option("--tokenizer-dir", *tokenizer_dir,
                    "folder with tokenizer.json + tokenizer_config.json (default: the setup cache)");
    sub->callback([opts, tokenizer_dir, gguf, action] {
        *action = [opts, tokenizer_dir, gguf] {
            if (gguf->format != "hf" && gguf->format != "gguf") {
                raise(ErrorCode::kInvalidArgument, "--format {}: expected hf or gguf", gguf->format);
            }
            if (tokenizer_dir->empty() && !opts->from_dir.empty()) {
                opts->tokenizer_dir = opts->from_dir;
            } else if (tokenizer_dir->empty()) {
                // an unknown --arch gets no folder: generate_random_model names the supported ones
                const testing::GeneratorArchitecture* arch = testing::find_generator_architecture(opts->arch);
                opts->tokenizer_dir = cache_dir() / "tokenizers" / (arch != nullptr ? arch->tokenizer : "");
            } else {
                opts->tokenizer_dir = *tokenizer_dir;
            }
            const auto start = std::chrono::steady_clock::now();
            const testing::GeneratedModel m = testing::generate_random_model(*opts);
            const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
            const std::string origin = opts->from_dir.empty() ? fmt::format("{}, seed {}", opts->size, opts->seed)
                                                              : fmt::format("from {}", opts->from_dir.string());
            fmt::print("wrote {} ({} {}): {} tensors, {:.1f}M parameters, {:.1f} MiB in {:.1f} s\n",
                       opts->out_dir.string(), opts->arch, origin, m.num_tensors,
                       static_cast<double>(m.num_parameters) / 1e6, static_cast<double>(m.num_bytes) / 1048576.0, secs);
            if (gguf->format == "gguf") write_gguf(*opts, *gguf);
            return 0;
        };
    });
}

}  // namespace moeserve::cli
