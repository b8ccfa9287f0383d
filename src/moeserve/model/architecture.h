// The table of supported architectures: one row per config.json model_type, read by the loader
// (registry.cpp), the random-weight generator (generator.cpp) and `moeserve make-model`. Adding
// an architecture is a folder model/<arch>/ (config, weight_specs, model, architecture) plus one
// row in architectures() (architecture.cpp); docs/adding_a_model.md has the steps.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "moeserve/core/thread_pool.h"
#include "moeserve/io/hf_config.h"
#include "moeserve/io/weight_source.h"
#include "moeserve/model/generator.h"
#include "moeserve/model/load_options.h"
#include "moeserve/model/model.h"
#include "moeserve/model/weight_spec.h"

namespace moeserve::model {

namespace gen {
struct TensorSource;  // generator_parts.h
}

struct Architecture {
    std::string model_type;  // config.json model_type
    std::string tokenizer;   // folder under <cache>/tokenizers/ that make-model copies by default
    // config.json of a generator preset: size "tiny" (tests) or "bench" (~1B parameters); Error
    // kInvalidArgument for another size. Gets the row's model_type (one folder may serve several).
    nlohmann::json (*preset)(const std::string& model_type, const std::string& size) = nullptr;
    // Every checkpoint tensor of the (generated) config: name, shape, dtype, init, precision.
    std::vector<WeightSpec> (*weight_specs)(const io::HfConfig& config) = nullptr;
    // Builds the model from config.json and the checkpoint of model_dir (parsing the config
    // first); `options` has the quantization and dtypes load_model resolved. Refuses a checkpoint
    // form it does not run, naming it.
    std::unique_ptr<Model> (*load)(const io::HfConfig& config, const std::filesystem::path& model_dir, ThreadPool& pool,
                                   const LoadOptions& options) = nullptr;
    // make-model --quantization mindspore-a8w8: writes the golden-stick A8W8 checkpoint in
    // MindFormers names (generator_mindformers.h); nullptr where moeserve knows no such names.
    void (*write_mindformers)(const std::vector<WeightSpec>& specs, const io::HfConfig& config, uint64_t seed,
                              const gen::TensorSource& source, int num_shards, const std::filesystem::path& out_dir,
                              GeneratedModel& result) = nullptr;
    // Multi-head latent attention: ModelSlim's recipe adds its mla_quantize keys to config.json.
    bool mla = false;
    // Builds the model from a config and an already opened weight source (a GGUF file's, read
    // under checkpoint names: formats/gguf.h); nullptr where the architecture has no GGUF mapping.
    std::unique_ptr<Model> (*load_weights)(const io::HfConfig& config, std::shared_ptr<const io::WeightSource> weights,
                                           ThreadPool& pool, const LoadOptions& options) = nullptr;
};

// Every row, in the order supported_model_types() lists them.
const std::vector<Architecture>& architectures();
// The row of model_type, or nullptr.
const Architecture* find_architecture(const std::string& model_type);

}  // namespace moeserve::model
