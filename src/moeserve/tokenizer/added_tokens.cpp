// AddedVocabulary: trie matching plus HF's find_matches rules (added_vocabulary.rs).
#include "moeserve/tokenizer/added_tokens.h"

#include <utf8proc.h>

#include <algorithm>
#include <nlohmann/json.hpp>

#include "moeserve/core/error.h"
#include "moeserve/tokenizer/bpe.h"
#include "moeserve/tokenizer/normalizer.h"
#include "moeserve/core/utf8.h"

namespace moeserve::tokenizer {
namespace {

// Rust's char::is_alphanumeric, approximated by the Unicode L* and N* categories.
bool is_word_char(char32_t cp) {
    if (cp < 0x80) {
        return (cp >= '0' && cp <= '9') || (cp >= 'a' && cp <= 'z') || (cp >= 'A' && cp <= 'Z');
    }
    auto category = utf8proc_category(static_cast<utf8proc_int32_t>(cp));
    return category >= UTF8PROC_CATEGORY_LU && category <= UTF8PROC_CATEGORY_LO
               ? true
               : (category >= UTF8PROC_CATEGORY_ND && category <= UTF8PROC_CATEGORY_NO);
}

// The last code point of text (non-empty, valid UTF-8).
char32_t last_code_point(std::string_view text) {
    size_t pos = text.size() - 1;
    while (pos > 0 && (static_cast<uint8_t>(text[pos]) & 0xC0) == 0x80) --pos;
    size_t n = 0;
    return utf8_decode(text, pos, &n);
}

// Start of the run of whitespace that ends text (text.size() if none).
size_t whitespace_run_start(std::string_view text) {
    size_t start = text.size();
    while (start > 0) {
        size_t pos = start - 1;
        while (pos > 0 && (static_cast<uint8_t>(text[pos]) & 0xC0) == 0x80) --pos;
        size_t n = 0;
        if (!is_unicode_whitespace(utf8_decode(text, pos, &n))) break;
        start = pos;
    }
    return start;
}

// Length of the run of whitespace that starts text.
size_t whitespace_run_length(std::string_view text) {
    size_t pos = 0;
    while (pos < text.size()) {
        size_t n = 0;
        if (!is_unicode_whitespace(utf8_decode(text, pos, &n))) break;
        pos += n;
    }
    return pos;
}

}  // namespace

void AddedVocabulary::Trie::insert(std::string_view content, int32_t token) {
    if (content.empty()) return;
    int32_t node = 0;
    for (char c : content) {
        auto byte = static_cast<uint8_t>(c);
        auto& children = nodes[static_cast<size_t>(node)].children;
        auto it =
            std::find_if(children.begin(), children.end(), [byte](const auto& child) { return child.first == byte; });
        if (it != children.end()) {
            node = it->second;
        } else {
            auto next = static_cast<int32_t>(nodes.size());
            nodes[static_cast<size_t>(node)].children.emplace_back(byte, next);
            nodes.emplace_back();
            node = next;
        }
    }
    first_bytes[static_cast<uint8_t>(content[0])] = true;
    auto& slot = nodes[static_cast<size_t>(node)].token;
    if (slot < 0) slot = token;  // a duplicate content keeps its first token
}

std::pair<size_t, int32_t> AddedVocabulary::Trie::longest_at(std::string_view text, size_t pos) const {
    std::pair<size_t, int32_t> best{0, -1};
    int32_t node = 0;
    for (size_t i = pos; i < text.size(); ++i) {
        auto byte = static_cast<uint8_t>(text[i]);
        const auto& children = nodes[static_cast<size_t>(node)].children;
        auto it =
            std::find_if(children.begin(), children.end(), [byte](const auto& child) { return child.first == byte; });
        if (it == children.end()) break;
        node = it->second;
        if (nodes[static_cast<size_t>(node)].token >= 0) {
            best = {i + 1 - pos, nodes[static_cast<size_t>(node)].token};
        }
    }
    return best;
}

AddedVocabulary AddedVocabulary::from_json(const nlohmann::json& added_tokens, const Bpe& model,
                                           const Normalizer* normalizer, std::string_view where) {
    AddedVocabulary vocab;
    if (added_tokens.is_null()) return vocab;
    if (!added_tokens.is_array()) {
        raise(ErrorCode::kInvalidModel, "{}: added_tokens must be an array", where);
    }
    int32_t max_id = -1;  // largest id among the added tokens so far
    for (const auto& entry : added_tokens) {
        AddedToken token;
        if (!entry.contains("content") || !entry["content"].is_string()) {
            raise(ErrorCode::kInvalidModel, "{}: added token {} lacks a \"content\" string", where, entry.dump());
        }
        token.content = entry["content"].get<std::string>();
        if (vocab.by_content_.count(token.content) != 0) continue;  // HF adds a content once
        if (auto id = model.token_to_id(token.content)) {
            token.id = *id;
        } else {
            const int32_t model_size = model.num_tokens();
            token.id = (max_id < 0 || (max_id < model_size && model_size != 0)) ? model_size : max_id + 1;
        }
        max_id = std::max(max_id, token.id);
        token.special = entry.value("special", false);
        token.lstrip = entry.value("lstrip", false);
        token.rstrip = entry.value("rstrip", false);
        token.single_word = entry.value("single_word", false);
        token.normalized = entry.value("normalized", !token.special);
        auto index = static_cast<int32_t>(vocab.tokens_.size());
        if (token.normalized) {
            vocab.normalized_trie_.insert(normalizer != nullptr ? normalizer->normalize(token.content) : token.content,
                                          index);
        } else {
            vocab.raw_trie_.insert(token.content, index);
        }
        vocab.by_id_.emplace(token.id, vocab.tokens_.size());
        vocab.by_content_.emplace(token.content, token.id);
        vocab.tokens_.push_back(std::move(token));
    }
    return vocab;
}

std::vector<AddedTokenSplit> AddedVocabulary::split(std::string_view text, bool normalized_pass) const {
    const Trie& trie = normalized_pass ? normalized_trie_ : raw_trie_;
    std::vector<AddedTokenSplit> splits;
    size_t start_offset = 0;  // end of the previous emitted token
    size_t pos = 0;
    while (pos < text.size()) {
        if (!trie.first_bytes[static_cast<uint8_t>(text[pos])]) {
            ++pos;
            continue;
        }
        auto [length, index] = trie.longest_at(text, pos);
        if (index < 0) {
            ++pos;
            continue;
        }
        const AddedToken& token = tokens_[static_cast<size_t>(index)];
        size_t start = pos;
        size_t stop = pos + length;
        pos = stop;  // the next match starts after this one even if this one is discarded
        if (token.single_word) {
            bool space_before = start == 0 || !is_word_char(last_code_point(text.substr(0, start)));
            size_t n = 0;
            bool space_after = stop == text.size() || !is_word_char(utf8_decode(text, stop, &n));
            if (!space_before || !space_after) continue;
        }
        if (token.lstrip) start = std::max(whitespace_run_start(text.substr(0, start)), start_offset);
        if (token.rstrip) stop += whitespace_run_length(text.substr(stop));
        if (start_offset < start) splits.push_back({start_offset, start, -1});
        splits.push_back({start, stop, token.id});
        start_offset = stop;
        pos = std::max(pos, stop);
    }
    if (start_offset != text.size() || splits.empty()) {
        splits.push_back({start_offset, text.size(), -1});
    }
    return splits;
}

const AddedToken* AddedVocabulary::find_by_id(int32_t id) const {
    auto it = by_id_.find(id);
    return it == by_id_.end() ? nullptr : &tokens_[it->second];
}

std::optional<int32_t> AddedVocabulary::find_by_content(std::string_view content) const {
    auto it = by_content_.find(std::string(content));
    if (it == by_content_.end()) return std::nullopt;
    return it->second;
}

}  // namespace moeserve::tokenizer
