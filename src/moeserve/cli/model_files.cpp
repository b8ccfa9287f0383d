#include "moeserve/cli/model_files.h"

#include "moeserve/core/error.h"
#include "moeserve/io/gguf_file.h"
#include "moeserve/model/formats/gguf.h"
#include "moeserve/model/formats/gguf_tokenizer.h"

namespace moeserve::cli {

namespace {

tokenizer::Tokenizer gguf_tokenizer(const io::GgufCheckpoint& file, const std::string& path) {
    const auto files = model::gguf_tokenizer_files(file.metadata());
    if (!files) {
        raise(ErrorCode::kInvalidModel, "{}: no tokenizer in the metadata (tokenizer.ggml.model); pass --tokenizer DIR",
              path);
    }
    return tokenizer::Tokenizer::from_json(files->tokenizer_json, files->config_json, path);
}

}  // namespace

tokenizer::Tokenizer load_model_tokenizer(const std::string& path) {
    if (!model::is_gguf_path(path)) return tokenizer::Tokenizer::from_dir(path);
    return gguf_tokenizer(io::GgufCheckpoint(path), path);
}

tokenizer::Tokenizer load_model_tokenizer(const std::string& tokenizer_flag, const model::ModelSource& model) {
    if (!tokenizer_flag.empty()) return load_model_tokenizer(tokenizer_flag);
    if (model.gguf) return gguf_tokenizer(*model.gguf, model.path.string());
    return tokenizer::Tokenizer::from_dir(model.path.string());
}

}  // namespace moeserve::cli
