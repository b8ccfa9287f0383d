// Pre-tokenizer implementations; the split rules follow HF tokenizers' NormalizedString::split.
#include "moeserve/tokenizer/pre_tokenizer.h"

#include <algorithm>
#include <nlohmann/json.hpp>

#include "moeserve/core/error.h"
#include "moeserve/tokenizer/byte_level.h"
#include "moeserve/tokenizer/regex.h"

namespace moeserve::tokenizer {
namespace {

// GPT-2's pre-tokenization regex, used by ByteLevel when use_regex is true.
constexpr std::string_view kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

// Spans of text tiled into matches of regex and the gaps between them; `invert` swaps the flags.
std::vector<SplitSpan> tile_matches(const Regex& regex, std::string_view text, bool invert) {
    std::vector<SplitSpan> spans;
    if (text.empty()) return spans;
    size_t prev = 0;
    for (auto [begin, end] : regex.find_all(text)) {
        if (begin != prev) spans.push_back({prev, begin, invert});
        spans.push_back({begin, end, !invert});
        prev = end;
    }
    if (prev != text.size()) spans.push_back({prev, text.size(), invert});
    return spans;
}

class SplitPreTokenizer final : public PreTokenizer {
public:
    SplitPreTokenizer(Regex regex, SplitBehavior behavior, bool invert)
        : regex_(std::move(regex)), behavior_(behavior), invert_(invert) {}

    void pre_tokenize(std::vector<std::string>& pieces) const override {
        std::vector<std::string> out;
        out.reserve(pieces.size() * 4);
        for (const auto& piece : pieces) {
            split_with_behavior(piece, tile_matches(regex_, piece, invert_), behavior_, out);
        }
        pieces.swap(out);
    }

private:
    Regex regex_;
    SplitBehavior behavior_;
    bool invert_;
};

class ByteLevelPreTokenizer final : public PreTokenizer {
public:
    ByteLevelPreTokenizer(bool add_prefix_space, bool use_regex, std::string_view where)
        : add_prefix_space_(add_prefix_space) {
        if (use_regex) regex_ = std::make_unique<Regex>(kGpt2Pattern, where);
    }

    void pre_tokenize(std::vector<std::string>& pieces) const override {
        std::vector<std::string> out;
        out.reserve(pieces.size());
        std::vector<std::string> split;
        for (auto& piece : pieces) {
            if (add_prefix_space_ && !piece.empty() && piece.front() != ' ') piece.insert(0, " ");
            split.clear();
            if (regex_ != nullptr) {
                split_with_behavior(piece, tile_matches(*regex_, piece, false), SplitBehavior::kIsolated, split);
            } else if (!piece.empty()) {
                split.push_back(std::move(piece));
            }
            for (const auto& s : split) {
                std::string mapped;
                mapped.reserve(s.size() * 2);
                alphabet_.encode(s, mapped);
                out.push_back(std::move(mapped));
            }
        }
        pieces.swap(out);
    }

private:
    bool add_prefix_space_;
    std::unique_ptr<Regex> regex_;
    ByteLevelAlphabet alphabet_;
};

class SequencePreTokenizer final : public PreTokenizer {
public:
    explicit SequencePreTokenizer(std::vector<std::unique_ptr<PreTokenizer>> parts) : parts_(std::move(parts)) {}

    void pre_tokenize(std::vector<std::string>& pieces) const override {
        for (const auto& part : parts_) part->pre_tokenize(pieces);
    }

private:
    std::vector<std::unique_ptr<PreTokenizer>> parts_;
};

SplitBehavior parse_behavior(const nlohmann::json& spec, std::string_view where) {
    const std::string name = spec.value("behavior", std::string("Isolated"));
    if (name == "Removed") return SplitBehavior::kRemoved;
    if (name == "Isolated") return SplitBehavior::kIsolated;
    if (name == "MergedWithPrevious") return SplitBehavior::kMergedWithPrevious;
    if (name == "MergedWithNext") return SplitBehavior::kMergedWithNext;
    if (name == "Contiguous") return SplitBehavior::kContiguous;
    raise(ErrorCode::kUnsupported,
          "{}: Split behavior '{}' is not supported (expected Removed, Isolated, "
          "MergedWithPrevious, MergedWithNext or Contiguous)",
          where, name);
}

std::unique_ptr<PreTokenizer> make_split(const nlohmann::json& spec, std::string_view where) {
    const auto& pattern = spec.at("pattern");
    bool invert = spec.value("invert", false);
    SplitBehavior behavior = parse_behavior(spec, where);
    if (pattern.contains("Regex")) {
        return std::make_unique<SplitPreTokenizer>(Regex(pattern["Regex"].get<std::string>(), where), behavior, invert);
    }
    if (pattern.contains("String")) {
        return std::make_unique<SplitPreTokenizer>(
            Regex(pattern["String"].get<std::string>(), where, {.literal = true}), behavior, invert);
    }
    raise(ErrorCode::kUnsupported, "{}: Split pattern must be {{\"Regex\": ..}} or {{\"String\": ..}}; got {}", where,
          pattern.dump().substr(0, 200));
}

}  // namespace

void split_with_behavior(std::string_view piece, const std::vector<SplitSpan>& spans, SplitBehavior behavior,
                         std::vector<std::string>& out) {
    // 1. Merge spans per behaviour into (begin, end, remove) ranges, as HF does.
    struct Range {
        size_t begin, end;
        bool remove;
    };
    std::vector<Range> ranges;
    ranges.reserve(spans.size());
    bool previous_match = false;
    switch (behavior) {
        case SplitBehavior::kIsolated:
            for (const auto& s : spans) ranges.push_back({s.begin, s.end, false});
            break;
        case SplitBehavior::kRemoved:
            for (const auto& s : spans) ranges.push_back({s.begin, s.end, s.is_match});
            break;
        case SplitBehavior::kContiguous:
            for (const auto& s : spans) {
                if (s.is_match == previous_match && !ranges.empty()) {
                    ranges.back().end = s.end;
                } else {
                    ranges.push_back({s.begin, s.end, false});
                }
                previous_match = s.is_match;
            }
            break;
        case SplitBehavior::kMergedWithPrevious:
            for (const auto& s : spans) {
                if (s.is_match && !previous_match && !ranges.empty()) {
                    ranges.back().end = s.end;
                } else {
                    ranges.push_back({s.begin, s.end, false});
                }
                previous_match = s.is_match;
            }
            break;
        case SplitBehavior::kMergedWithNext:
            for (auto it = spans.rbegin(); it != spans.rend(); ++it) {
                if (it->is_match && !previous_match && !ranges.empty()) {
                    ranges.back().begin = it->begin;
                } else {
                    ranges.push_back({it->begin, it->end, false});
                }
                previous_match = it->is_match;
            }
            std::reverse(ranges.begin(), ranges.end());
            break;
    }
    // 2. Keep the non-empty, non-removed ranges.
    for (const auto& r : ranges) {
        if (!r.remove && r.end > r.begin) out.emplace_back(piece.substr(r.begin, r.end - r.begin));
    }
}

std::unique_ptr<PreTokenizer> make_pre_tokenizer(const nlohmann::json& spec, std::string_view where) {
    if (spec.is_null()) return nullptr;
    if (!spec.is_object() || !spec.contains("type") || !spec["type"].is_string()) {
        raise(ErrorCode::kInvalidModel, "{}: pre_tokenizer must be an object with a \"type\"; got {}", where,
              spec.dump().substr(0, 200));
    }
    const std::string type = spec["type"].get<std::string>();
    if (type == "Split") return make_split(spec, where);
    if (type == "ByteLevel") {
        return std::make_unique<ByteLevelPreTokenizer>(spec.value("add_prefix_space", true),
                                                       spec.value("use_regex", true), where);
    }
    if (type == "Digits") {
        // HF splits on char::is_numeric: Isolated per digit, or Contiguous runs of digits.
        bool individual = spec.value("individual_digits", false);
        return std::make_unique<SplitPreTokenizer>(Regex(individual ? R"(\p{N})" : R"(\p{N}+)", where),
                                                   SplitBehavior::kIsolated, false);
    }
    if (type == "Sequence") {
        std::vector<std::unique_ptr<PreTokenizer>> parts;
        for (const auto& part : spec.value("pretokenizers", nlohmann::json::array())) {
            auto pre_tokenizer = make_pre_tokenizer(part, where);
            if (pre_tokenizer != nullptr) parts.push_back(std::move(pre_tokenizer));
        }
        return std::make_unique<SequencePreTokenizer>(std::move(parts));
    }
    raise(ErrorCode::kUnsupported,
          "{}: pre_tokenizer type '{}' is not supported (supported: Split, ByteLevel, Digits, "
          "Sequence)",
          where, type);
}

}  // namespace moeserve::tokenizer
