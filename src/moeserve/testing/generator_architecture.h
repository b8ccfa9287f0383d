// The generator's table: one row per model_type of the runtime table (model/architecture.h), with
// what only the generator and `moeserve make-model` need. The two tables name the same types
// (tests/model/registry_test.cpp checks it); adding an architecture adds a row to each
// (docs/adding_a_model.md).
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "moeserve/io/hf_config.h"
#include "moeserve/model/weight_spec.h"
#include "moeserve/testing/generator.h"

namespace moeserve::testing {

namespace gen {
struct TensorSource;  // generator_parts.h
}

struct GeneratorArchitecture {
    std::string model_type;  // config.json model_type: the runtime row's
    std::string tokenizer;   // folder under <cache>/tokenizers/ that make-model copies by default
    // config.json of a preset size (presets/presets.h); gets the row's model_type.
    nlohmann::json (*preset)(const std::string& model_type, const std::string& size) = nullptr;
    // make-model --quantization mindspore-a8w8: writes the golden-stick A8W8 checkpoint in
    // MindFormers names (generator_mindformers.h); nullptr where moeserve knows no such names.
    void (*write_mindformers)(const std::vector<model::WeightSpec>& specs, const io::HfConfig& config, uint64_t seed,
                              const gen::TensorSource& source, int num_shards, const std::filesystem::path& out_dir,
                              GeneratedModel& result) = nullptr;
    // Multi-head latent attention: ModelSlim's recipe adds its mla_quantize keys to config.json.
    bool mla = false;
};

// Every row, in the runtime table's order.
const std::vector<GeneratorArchitecture>& generator_architectures();
// The row of model_type, or nullptr.
const GeneratorArchitecture* find_generator_architecture(const std::string& model_type);

}  // namespace moeserve::testing
