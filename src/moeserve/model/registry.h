// Model registry: config.json model_type -> architecture, through the table of architecture.h;
// tests/model/registry_test.cpp loads a tiny checkpoint of every type supported_model_types()
// lists.
#pragma once

#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "moeserve/core/thread_pool.h"
#include "moeserve/model/load_options.h"
#include "moeserve/model/model.h"

namespace moeserve::model {

// Every model_type the registry can build (config parsing included).
std::vector<std::string> supported_model_types();
// model_types whose config parses but whose forward is not built yet.
std::vector<std::string> config_only_model_types();

// Whether --dtype `text` asks for f32 weights: false for "auto", "bfloat16", "bf16"; true for
// "float32", "float", "fp32". Raises Error(kInvalidArgument) for "half"/"float16"/"fp16" (f16
// arithmetic is not run here) and anything else, naming the accepted values.
bool parse_dtype_is_f32(const std::string& text);

// Reads config.json and the weights of model_dir and builds the model. Errors (kNotFound,
// kInvalidModel, kUnsupported) name the file and the problem; an unknown model_type lists the
// supported ones.
std::unique_ptr<Model> load_model(const std::filesystem::path& model_dir, ThreadPool& pool,
                                  const LoadOptions& options = {});

// What load_model would refuse that needs no weight read, in milliseconds, so a server can refuse
// before it opens its port: config.json (model_type, every field the architecture parses), the
// --quantization / --dtype / --kv-cache-dtype values against the checkpoint, every checkpoint
// header (a truncated file), and for an unquantized safetensors checkpoint the tensor index
// against the architecture's weight specs (each tensor present, with its shape). Raises the
// Error load_model would raise, with the same words.
void check_model(const std::filesystem::path& model_dir, const LoadOptions& options = {});

}  // namespace moeserve::model
