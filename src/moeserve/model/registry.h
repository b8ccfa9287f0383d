// Model registry: a model opened once (ModelSource), config.json model_type -> architecture, through the table of
// architecture.h; tests/model/registry_test.cpp loads a tiny checkpoint of every type supported_model_types() lists.
#pragma once

#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "moeserve/core/thread_pool.h"
#include "moeserve/io/gguf_file.h"
#include "moeserve/io/hf_config.h"
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

// The model --model names, opened once: its config (DIR/config.json, or a GGUF file's metadata as
// the config.json it stands for) and, for a GGUF file, the file with its header and tensor table
// read. A command opens it once and hands it to whatever needs the config, so each file is parsed
// once per process.
struct ModelSource {
    std::filesystem::path path;
    io::HfConfig config;
    std::shared_ptr<const io::GgufCheckpoint> gguf;  // null for a Hugging Face directory
};

// Raises what load_model would raise for an unreadable config.json or GGUF header (kNotFound,
// kInvalidModel, kUnsupported naming the file).
ModelSource open_model_source(const std::filesystem::path& path);

// Reads the weights of source and builds the model. Errors (kNotFound,
// kInvalidModel, kUnsupported) name the file and the problem; an unknown model_type lists the
// supported ones.
std::unique_ptr<Model> load_model(const ModelSource& source, ThreadPool& pool, const LoadOptions& options = {});
// open_model_source(model_dir), then load_model.
std::unique_ptr<Model> load_model(const std::filesystem::path& model_dir, ThreadPool& pool,
                                  const LoadOptions& options = {});

// What load_model would refuse that needs no weight read, in milliseconds, so a server can refuse
// before it opens its port: config.json (model_type, every field the architecture parses), the
// --quantization / --dtype / --kv-cache-dtype values against the checkpoint, every checkpoint
// header (a truncated file), and for an unquantized safetensors checkpoint the tensor index
// against the architecture's weight specs (each tensor present, with its shape). Raises the
// Error load_model would raise, with the same words.
void check_model(const ModelSource& source, const LoadOptions& options = {});
void check_model(const std::filesystem::path& model_dir, const LoadOptions& options = {});

}  // namespace moeserve::model
