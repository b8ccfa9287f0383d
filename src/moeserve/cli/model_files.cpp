#include "moeserve/cli/model_files.h"

#include "moeserve/core/error.h"
#include "moeserve/io/gguf_file.h"
#include "moeserve/model/formats/gguf.h"
#include "moeserve/model/formats/gguf_tokenizer.h"

namespace moeserve::cli {

tokenizer::Tokenizer load_model_tokenizer(const std::string& path) {
    if (!model::is_gguf_path(path)) return tokenizer::Tokenizer::from_dir(path);
    const io::GgufCheckpoint file(path);
    const auto files = model::gguf_tokenizer_files(file.metadata());
    if (!files) {
        raise(ErrorCode::kInvalidModel, "{}: no tokenizer in the metadata (tokenizer.ggml.model); pass --tokenizer DIR",
              path);
    }
    return tokenizer::Tokenizer::from_json(files->tokenizer_json, files->config_json, path);
}

}  // namespace moeserve::cli
