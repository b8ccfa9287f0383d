// The table of supported architectures: one row per config.json model_type, read by the loader
// (registry.cpp). Adding an architecture is a folder model/<arch>/ (config, weight_specs, model)
// plus one row in architectures() (architecture.cpp), and its generator row and preset in the
// testing library (testing/generator_architecture.cpp); docs/adding_a_model.md has the steps.
#pragma once

#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "moeserve/core/thread_pool.h"
#include "moeserve/io/hf_config.h"
#include "moeserve/io/weight_source.h"
#include "moeserve/model/load_options.h"
#include "moeserve/model/model.h"
#include "moeserve/model/weight_spec.h"

namespace moeserve::model {

struct Architecture {
    std::string model_type;  // config.json model_type
    // Every checkpoint tensor of the config: name, shape, dtype, init, precision (the loader's
    // check, and what the generator writes).
    std::vector<WeightSpec> (*weight_specs)(const io::HfConfig& config) = nullptr;
    // Builds the model from config.json and the checkpoint of model_dir (parsing the config
    // first); `options` has the quantization and dtypes load_model resolved. Refuses a checkpoint
    // form it does not run, naming it.
    std::unique_ptr<Model> (*load)(const io::HfConfig& config, const std::filesystem::path& model_dir, ThreadPool& pool,
                                   const LoadOptions& options) = nullptr;
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
