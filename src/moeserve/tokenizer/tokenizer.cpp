// The Tokenizer facade: loads the components of tokenizer.json and runs HF's encode pipeline
// (added tokens -> normalizer -> normalized added tokens -> pre-tokenizer -> BPE -> BOS/EOS).
#include "moeserve/tokenizer/tokenizer.h"

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "moeserve/core/error.h"
#include "moeserve/tokenizer/bpe.h"
#include "moeserve/tokenizer/decoder.h"
#include "moeserve/tokenizer/normalizer.h"
#include "moeserve/tokenizer/pre_tokenizer.h"
#include "moeserve/tokenizer/tiktoken.h"
#include "moeserve/tokenizer/tokenizer_config.h"
#include "moeserve/tokenizer/tokenizer_json.h"
#include "moeserve/core/utf8.h"

namespace moeserve::tokenizer {
namespace {

std::string read_file(const std::filesystem::path& path) {
    std::ifstream in(path, std::ios::binary);
    if (!in) raise(ErrorCode::kNotFound, "cannot open {}", path.string());
    std::ostringstream buffer;
    buffer << in.rdbuf();
    return std::move(buffer).str();
}

// transformers' LlamaTokenizer(Fast) rebuilds the post-processor from add_bos_token (default
// true) and add_eos_token (default false); other classes use tokenizer.json's post-processor.
bool is_llama_class(const std::string& tokenizer_class) {
    return tokenizer_class == "LlamaTokenizerFast" || tokenizer_class == "LlamaTokenizer";
}

}  // namespace

struct Tokenizer::Impl {
    std::unique_ptr<Normalizer> normalizer;
    std::unique_ptr<PreTokenizer> pre_tokenizer;
    std::unique_ptr<Bpe> model;
    std::unique_ptr<Decoder> decoder;
    AddedVocabulary added;
    TokenizerConfig config;
    std::optional<TokenId> bos_id, eos_id, pad_id;
    bool add_bos = false;
    bool add_eos = false;
    int32_t vocab_size = 0;

    void encode_plain(std::string_view text, BpeScratch& scratch, std::vector<std::string>& pieces,
                      std::vector<TokenId>& ids) const;
    std::optional<TokenId> lookup(const std::optional<std::string>& token) const {
        if (!token) return std::nullopt;
        if (auto id = added.find_by_content(*token)) return id;
        return model->token_to_id(*token);
    }
};

Tokenizer::Tokenizer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Tokenizer::~Tokenizer() = default;
Tokenizer::Tokenizer(Tokenizer&&) noexcept = default;
Tokenizer& Tokenizer::operator=(Tokenizer&&) noexcept = default;

Tokenizer Tokenizer::from_dir(const std::filesystem::path& dir) {
    auto tokenizer_path = dir / "tokenizer.json";
    auto config_path = dir / "tokenizer_config.json";
    if (!std::filesystem::exists(tokenizer_path)) {
        if (std::filesystem::exists(dir / "tiktoken.model")) return from_tiktoken(dir / "tiktoken.model", config_path);
        raise(ErrorCode::kNotFound, "{} does not exist; expected a Hugging Face tokenizer there",
              tokenizer_path.string());
    }
    std::string config_text = std::filesystem::exists(config_path) ? read_file(config_path) : std::string();
    return load(parse_tokenizer_json(read_file(tokenizer_path), tokenizer_path.string()), config_text,
                tokenizer_path.string(), config_path.string());
}

Tokenizer Tokenizer::from_json(std::string_view tokenizer_json, std::string_view config_json, std::string_view where) {
    return load(parse_tokenizer_json(tokenizer_json, where), config_json, where, "tokenizer_config.json");
}

namespace {

// Runs the part of loading that reads one top-level field. A value of the wrong type inside it
// makes nlohmann throw a type_error that names neither the file nor the field (it reached the
// user as "internal error"): it becomes an Error naming both.
template <typename F>
auto reading_field(std::string_view where, const char* field, F&& read) {
    try {
        return read();
    } catch (const nlohmann::json::exception& e) {
        raise(ErrorCode::kInvalidModel, "{}: field \"{}\" is malformed: {}", where, field, e.what());
    }
}

// The tokenizer class of a tiktoken tokenizer_config.json: auto_map's AutoTokenizer, a
// "module.Class" string or a [slow, fast] pair of them.
std::string tiktoken_class(const nlohmann::json& config) {
    const nlohmann::json* name = nullptr;
    if (config.is_object() && config.contains("auto_map") && config["auto_map"].contains("AutoTokenizer")) {
        name = &config["auto_map"]["AutoTokenizer"];
        if (name->is_array() && !name->empty()) name = &(*name)[0];
    }
    return name != nullptr && name->is_string() ? name->get<std::string>() : std::string();
}

// Every tiktoken class in the table reserves this many special-token ids after the ranks.
constexpr int64_t kTiktokenReservedSpecialTokens = 256;

// The tokenizer.json of the tiktoken folder of model_path (tiktoken.h); config_text: its
// tokenizer_config.json text ("" when it has none).
TokenizerJson tiktoken_as_tokenizer_json(const std::filesystem::path& model_path, const std::string& config_text,
                                         const std::string& config_where) {
    const nlohmann::json config = reading_field(config_where, "(top level)", [&] {
        return config_text.empty() ? nlohmann::json::object() : nlohmann::json::parse(config_text);
    });
    const std::string cls = tiktoken_class(config);
    const std::optional<std::string_view> pattern = tiktoken_pattern(cls);
    if (!pattern) {
        raise(ErrorCode::kUnsupported,
              "{}: tiktoken tokenizer class '{}' (auto_map.AutoTokenizer) is not supported (supported: {})",
              config_where, cls, tiktoken_classes());
    }
    return reading_field(config_where, "added_tokens_decoder", [&] {
        return tiktoken_tokenizer_json(parse_tiktoken_ranks(read_file(model_path), model_path.string()), *pattern,
                                       config.value("added_tokens_decoder", nlohmann::json()),
                                       kTiktokenReservedSpecialTokens);
    });
}

}  // namespace

Tokenizer Tokenizer::from_tiktoken(const std::filesystem::path& model_path, const std::filesystem::path& config_path) {
    const std::string config_text = std::filesystem::exists(config_path) ? read_file(config_path) : std::string();
    return load(tiktoken_as_tokenizer_json(model_path, config_text, config_path.string()), config_text,
                model_path.string(), config_path.string());
}

std::string tiktoken_folder_tokenizer_json(const std::filesystem::path& dir) {
    const std::filesystem::path config_path = dir / "tokenizer_config.json";
    const std::string config_text = std::filesystem::exists(config_path) ? read_file(config_path) : std::string();
    return tokenizer_json_text(tiktoken_as_tokenizer_json(dir / "tiktoken.model", config_text, config_path.string()));
}

Tokenizer Tokenizer::load(TokenizerJson parsed, std::string_view config_json, std::string_view where,
                          std::string_view config_where) {
    auto impl = std::make_unique<Impl>();
    impl->config =
        reading_field(config_where, "(top level)", [&] { return TokenizerConfig::parse(config_json, config_where); });
    const nlohmann::json& doc = parsed.doc;
    if (!doc.is_object() || !doc.contains("model")) {
        raise(ErrorCode::kInvalidModel, "{}: expected an object with a \"model\"", where);
    }
    const auto& model = doc["model"];
    // Old files omit "type" for BPE; a vocab plus merges is BPE.
    const std::string model_type =
        reading_field(where, "model", [&] { return model.value("type", parsed.has_merges ? "BPE" : ""); });
    if (model_type != "BPE") {
        raise(ErrorCode::kUnsupported, "{}: model type '{}' is not supported (supported: BPE)", where, model_type);
    }
    const auto field = [&doc](const char* name) { return doc.value(name, nlohmann::json()); };
    impl->normalizer = reading_field(where, "normalizer", [&] { return make_normalizer(field("normalizer"), where); });
    impl->pre_tokenizer =
        reading_field(where, "pre_tokenizer", [&] { return make_pre_tokenizer(field("pre_tokenizer"), where); });
    impl->decoder = reading_field(where, "decoder", [&] { return make_decoder(field("decoder"), where); });
    const bool llama = is_llama_class(impl->config.tokenizer_class);
    const std::string post_processor = reading_field(where, "post_processor", [&] {
        const auto p = field("post_processor");
        return p.is_null() ? std::string() : p.value("type", std::string("(no type)"));
    });
    if (!llama && !post_processor.empty() && post_processor != "ByteLevel") {
        raise(ErrorCode::kUnsupported, "{}: post_processor type '{}' is not supported (supported: ByteLevel, null)",
              where, post_processor);
    }
    if (!parsed.has_vocab || !parsed.has_merges) {
        raise(ErrorCode::kInvalidModel, "{}: the BPE model needs \"vocab\" and \"merges\"", where);
    }
    impl->model = reading_field(where, "model", [&] {
        return std::make_unique<Bpe>(Bpe::from_parts(model, std::move(parsed.vocab), parsed.merges, where));
    });
    impl->added = reading_field(where, "added_tokens", [&] {
        return AddedVocabulary::from_json(field("added_tokens"), *impl->model, impl->normalizer.get(), where);
    });
    impl->vocab_size = impl->model->num_tokens();
    for (const auto& token : impl->added.tokens()) {
        if (impl->model->id_to_token(token.id) == nullptr) ++impl->vocab_size;
    }
    impl->bos_id = impl->lookup(impl->config.bos_token);
    impl->eos_id = impl->lookup(impl->config.eos_token);
    impl->pad_id = impl->lookup(impl->config.pad_token);
    if (llama) {
        impl->add_bos = impl->config.add_bos_token.value_or(true);
        impl->add_eos = impl->config.add_eos_token.value_or(false);
        if ((impl->add_bos && !impl->bos_id) || (impl->add_eos && !impl->eos_id)) {
            raise(ErrorCode::kInvalidModel,
                  "{}: add_bos_token/add_eos_token is set but the bos/eos token is missing or not "
                  "in the vocabulary",
                  config_where);
        }
    }
    return Tokenizer(std::move(impl));
}

void Tokenizer::Impl::encode_plain(std::string_view text, BpeScratch& scratch, std::vector<std::string>& pieces,
                                   std::vector<TokenId>& ids) const {
    pieces.clear();
    pieces.emplace_back(text);
    if (pre_tokenizer != nullptr) pre_tokenizer->pre_tokenize(pieces);
    for (const auto& piece : pieces) model->tokenize(piece, scratch, ids);
}

std::vector<TokenId> Tokenizer::encode(std::string_view text, bool add_special_tokens) const {
    size_t bad_offset = 0;
    if (!utf8_is_valid(text, &bad_offset)) {
        raise(ErrorCode::kInvalidArgument, "text to encode is not valid UTF-8 (bad byte at {})", bad_offset);
    }
    const Impl& impl = *impl_;
    std::vector<TokenId> ids;
    ids.reserve(text.size() / 3 + 2);
    if (add_special_tokens && impl.add_bos) ids.push_back(*impl.bos_id);
    BpeScratch scratch;
    std::vector<std::string> pieces;
    // 1. Added tokens matched on the raw text; 2. normalize the rest; 3. normalized added tokens.
    for (const auto& raw : impl.added.split(text, false)) {
        if (raw.id >= 0) {
            ids.push_back(raw.id);
            continue;
        }
        if (raw.end == raw.begin) continue;
        std::string_view segment = text.substr(raw.begin, raw.end - raw.begin);
        std::string normalized;
        if (impl.normalizer != nullptr) {
            normalized = impl.normalizer->normalize(segment);
            segment = normalized;
        }
        for (const auto& part : impl.added.split(segment, true)) {
            if (part.id >= 0) {
                ids.push_back(part.id);
            } else if (part.end > part.begin) {
                impl.encode_plain(segment.substr(part.begin, part.end - part.begin), scratch, pieces, ids);
            }
        }
    }
    if (add_special_tokens && impl.add_eos) ids.push_back(*impl.eos_id);
    return ids;
}

bool Tokenizer::append_token_bytes(TokenId id, bool skip_special_tokens, bool is_first, std::string& out) const {
    if (const AddedToken* added = impl_->added.find_by_id(id)) {
        if (skip_special_tokens && added->special) return false;
        impl_->decoder->append_token(added->content, is_first, out);
        return true;
    }
    const std::string* token = impl_->model->id_to_token(id);
    if (token == nullptr) return false;
    impl_->decoder->append_token(*token, is_first, out);
    return true;
}

std::string Tokenizer::decode(std::span<const TokenId> ids, bool skip_special_tokens) const {
    std::string bytes;
    bool is_first = true;
    for (TokenId id : ids) {
        if (append_token_bytes(id, skip_special_tokens, is_first, bytes)) is_first = false;
    }
    std::string text;
    text.reserve(bytes.size());
    utf8_append_lossy(bytes, text);
    return text;
}

std::optional<std::string> Tokenizer::id_to_token(TokenId id) const {
    if (const AddedToken* added = impl_->added.find_by_id(id)) return added->content;
    if (const std::string* token = impl_->model->id_to_token(id)) return *token;
    return std::nullopt;
}

std::optional<TokenId> Tokenizer::token_to_id(std::string_view token) const {
    if (auto id = impl_->added.find_by_content(token)) return id;
    return impl_->model->token_to_id(token);
}

int32_t Tokenizer::vocab_size() const { return impl_->vocab_size; }

bool Tokenizer::is_special(TokenId id) const {
    const AddedToken* added = impl_->added.find_by_id(id);
    return added != nullptr && added->special;
}

std::optional<TokenId> Tokenizer::bos_token_id() const { return impl_->bos_id; }
std::optional<TokenId> Tokenizer::eos_token_id() const { return impl_->eos_id; }
std::optional<TokenId> Tokenizer::pad_token_id() const { return impl_->pad_id; }
const std::optional<std::string>& Tokenizer::bos_token() const { return impl_->config.bos_token; }
const std::optional<std::string>& Tokenizer::eos_token() const { return impl_->config.eos_token; }
const std::optional<std::string>& Tokenizer::pad_token() const { return impl_->config.pad_token; }
const std::optional<std::string>& Tokenizer::chat_template() const { return impl_->config.chat_template; }
bool Tokenizer::adds_bos_token() const { return impl_->add_bos; }
bool Tokenizer::adds_eos_token() const { return impl_->add_eos; }
const std::vector<AddedToken>& Tokenizer::added_tokens() const { return impl_->added.tokens(); }

}  // namespace moeserve::tokenizer
