#include "moeserve/cli/model_files.h"
#include "moeserve/cli/structured_vocabulary.h"

#include "moeserve/cli/generation_config.h"
#include "moeserve/core/error.h"
#include "moeserve/tokenizer/tokenizer.h"

namespace moeserve::cli {

std::shared_ptr<const structured::Vocabulary> load_structured_vocabulary(const std::string& model_dir,
                                                                         int64_t vocab_size,
                                                                         const nlohmann::json& config,
                                                                         const std::string& config_dir,
                                                                         std::string* error) {
    try {
        const auto tok = load_model_tokenizer(model_dir);
        std::vector<std::string> bytes(static_cast<size_t>(vocab_size));
        for (int32_t id = 0; id < vocab_size && id < tok.vocab_size(); ++id) {
            if (!tok.is_special(id))
                tok.append_token_bytes(id, /*skip_special_tokens=*/true, /*is_first=*/false,
                                       bytes[static_cast<size_t>(id)]);
        }
        std::vector<int32_t> eos_token_ids = model_eos_token_ids(config, config_dir, tok.eos_token_id(), {});
        for (int32_t t : eos_token_ids) {
            if (t >= 0 && t < vocab_size) bytes[static_cast<size_t>(t)].clear();
        }
        return std::make_shared<const structured::Vocabulary>(std::move(bytes), std::move(eos_token_ids));
    } catch (const Error& e) {
        if (error) *error = e.what();
        return nullptr;
    }
}

}  // namespace moeserve::cli
