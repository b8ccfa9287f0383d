#include "moeserve/tokenizer/tiktoken.h"

#include <algorithm>
#include <charconv>
#include <nlohmann/json.hpp>
#include <unordered_map>
#include <unordered_set>

#include "moeserve/core/base64.h"
#include "moeserve/core/error.h"
#include "moeserve/core/split_patterns.h"
#include "moeserve/tokenizer/byte_level.h"

namespace moeserve::tokenizer {
namespace {

struct KnownClass {
    std::string_view name;  // auto_map's AutoTokenizer class: "module.Class"
    std::string_view pattern;
};

// Moonlight's tokenization_moonshot.py carries the same pattern as Kimi's.
constexpr KnownClass kKnownClasses[] = {
    {"tokenization_kimi.TikTokenTokenizer", kKimiK2SplitPattern},
    {"tokenization_moonshot.TikTokenTokenizer", kKimiK2SplitPattern},
};

int64_t parse_rank(std::string_view text) {
    int64_t v = -1;
    const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
    return ec == std::errc() && end == text.data() + text.size() && v >= 0 ? v : -1;
}

}  // namespace

std::vector<std::pair<std::string, int64_t>> parse_tiktoken_ranks(std::string_view text, std::string_view where) {
    std::vector<std::pair<std::string, int64_t>> ranks;
    // Canonical base64 (base64_decode refuses any other) is one text per byte string, so a repeated
    // token is a repeated BASE64 field: views into `text`, no copy of the tokens.
    std::unordered_set<std::string_view> seen;
    size_t line_no = 0;
    for (size_t pos = 0; pos < text.size();) {
        const size_t eol = std::min(text.find('\n', pos), text.size());
        std::string_view line = text.substr(pos, eol - pos);
        pos = eol + 1;
        ++line_no;
        if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
        if (line.empty()) continue;
        const size_t space = line.find(' ');
        std::optional<std::string> bytes =
            space == std::string_view::npos ? std::nullopt : base64_decode(line.substr(0, space));
        const int64_t rank = space == std::string_view::npos ? -1 : parse_rank(line.substr(space + 1));
        if (!bytes || bytes->empty() || rank < 0) {
            raise(ErrorCode::kInvalidModel, "{}:{}: expected \"BASE64 RANK\" (a token's bytes and its rank)", where,
                  line_no);
        }
        if (!seen.insert(line.substr(0, space)).second) {
            raise(ErrorCode::kInvalidModel, "{}:{}: the token of rank {} is listed twice", where, line_no, rank);
        }
        ranks.emplace_back(std::move(*bytes), rank);
    }
    if (ranks.empty()) raise(ErrorCode::kInvalidModel, "{}: no tokens", where);
    // The special tokens take the ids after the ranks (len(ranks) on): a gap would give two
    // tokens one id.
    std::vector<bool> taken(ranks.size());
    for (const auto& [bytes, rank] : ranks) {
        if (rank >= static_cast<int64_t>(ranks.size()) || taken[static_cast<size_t>(rank)]) {
            raise(ErrorCode::kInvalidModel, "{}: rank {} of {} tokens; the ranks must be 0..{}, each once", where, rank,
                  ranks.size(), ranks.size() - 1);
        }
        taken[static_cast<size_t>(rank)] = true;
    }
    return ranks;
}

std::optional<std::string_view> tiktoken_pattern(std::string_view tokenizer_class) {
    for (const KnownClass& c : kKnownClasses) {
        if (c.name == tokenizer_class) return c.pattern;
    }
    return std::nullopt;
}

std::string tiktoken_classes() {
    std::string names;
    for (const KnownClass& c : kKnownClasses) names += (names.empty() ? "" : ", ") + std::string(c.name);
    return names;
}

namespace {

// Every split of each token into two tokens, ordered as tiktoken merges: by the token's rank, then
// by the left part's rank, then the right part's.
std::vector<std::pair<std::string, std::string>> merges_from_ranks(
    const std::vector<std::pair<std::string, int64_t>>& ranks, const ByteLevelAlphabet& alphabet) {
    std::unordered_map<std::string_view, int64_t> rank_of;
    rank_of.reserve(ranks.size());
    for (const auto& [bytes, rank] : ranks) rank_of.emplace(bytes, rank);
    struct Merge {
        int64_t rank, left_rank, right_rank;
        std::string_view left, right;
    };
    std::vector<Merge> merges;
    for (const auto& [bytes, rank] : ranks) {
        const std::string_view token = bytes;
        for (size_t i = 1; i < token.size(); ++i) {
            const auto l = rank_of.find(token.substr(0, i)), r = rank_of.find(token.substr(i));
            if (l != rank_of.end() && r != rank_of.end()) {
                merges.push_back({rank, l->second, r->second, token.substr(0, i), token.substr(i)});
            }
        }
    }
    std::sort(merges.begin(), merges.end(), [](const Merge& a, const Merge& b) {
        return std::tie(a.rank, a.left_rank, a.right_rank) < std::tie(b.rank, b.left_rank, b.right_rank);
    });
    std::vector<std::pair<std::string, std::string>> out(merges.size());
    for (size_t i = 0; i < merges.size(); ++i) {
        alphabet.encode(merges[i].left, out[i].first);
        alphabet.encode(merges[i].right, out[i].second);
    }
    return out;
}

nlohmann::json special_tokens(int64_t first_id, int64_t num_reserved, const nlohmann::json& added_tokens_decoder) {
    nlohmann::json added = nlohmann::json::array();
    for (int64_t id = first_id; id < first_id + num_reserved; ++id) {
        const std::string key = std::to_string(id);
        std::string content = "<|reserved_token_" + key + "|>";
        if (added_tokens_decoder.is_object() && added_tokens_decoder.contains(key)) {
            content = added_tokens_decoder[key].at("content").get<std::string>();
        }
        added.push_back({{"id", id},
                         {"content", content},
                         {"single_word", false},
                         {"lstrip", false},
                         {"rstrip", false},
                         {"normalized", false},
                         {"special", true}});
    }
    return added;
}

}  // namespace

TokenizerJson tiktoken_tokenizer_json(const std::vector<std::pair<std::string, int64_t>>& ranks,
                                      std::string_view pattern, const nlohmann::json& added_tokens_decoder,
                                      int64_t num_reserved) {
    const ByteLevelAlphabet alphabet;
    TokenizerJson out;
    out.merges = merges_from_ranks(ranks, alphabet);
    const auto first_special = static_cast<int64_t>(ranks.size());  // the ranks are 0..size-1
    out.vocab.reserve(ranks.size());
    for (const auto& [bytes, rank] : ranks) {
        std::string token;
        alphabet.encode(bytes, token);
        out.vocab.emplace_back(std::move(token), rank);
    }
    out.has_vocab = out.has_merges = true;
    out.doc = {
        {"model", {{"type", "BPE"}, {"byte_fallback", false}}},
        {"pre_tokenizer",
         {{"type", "Sequence"},
          {"pretokenizers",
           {{{"type", "Split"}, {"pattern", {{"Regex", pattern}}}, {"behavior", "Isolated"}, {"invert", false}},
            {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true}, {"use_regex", false}}}}}},
        {"decoder", {{"type", "ByteLevel"}, {"add_prefix_space", true}, {"trim_offsets", true}, {"use_regex", true}}},
        {"added_tokens", special_tokens(first_special, num_reserved, added_tokens_decoder)},
    };
    return out;
}

}  // namespace moeserve::tokenizer
