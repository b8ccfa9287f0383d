// BPE model: vocabulary tables, the merge-rank hash table and the HF merge loop (Word::merge_all
// in tokenizers/src/models/bpe/word.rs): a min-heap of (rank, position) candidates where stale
// entries are skipped when popped.
#include "moeserve/tokenizer/bpe.h"

#include <fmt/format.h>

#include <algorithm>
#include <functional>
#include <nlohmann/json.hpp>
#include <unordered_map>

#include "moeserve/core/error.h"
#include "moeserve/tokenizer/tokenizer_json.h"
#include "moeserve/core/utf8.h"

namespace moeserve::tokenizer {
namespace {

// Open-addressing map from a pair of token ids to (rank, merged id). Looked up once per candidate
// pair in the merge loop, so it must be cheap.
class MergeTable {
public:
    struct Value {
        int32_t rank;
        int32_t new_id;
    };

    void reserve(size_t n) {
        size_t capacity = 16;
        while (capacity < n * 3) capacity <<= 1;  // load factor <= 1/3: short probe chains
        entries_.assign(capacity, Entry{kEmpty, {0, 0}});
        mask_ = capacity - 1;
    }

    // Inserts unless the pair is present (HF keeps the first, lowest-rank occurrence).
    void insert(int32_t left, int32_t right, Value value) {
        uint64_t key = make_key(left, right);
        for (size_t i = slot(key);; i = (i + 1) & mask_) {
            if (entries_[i].key == key) return;
            if (entries_[i].key == kEmpty) {
                entries_[i] = Entry{key, value};
                return;
            }
        }
    }

    const Value* find(int32_t left, int32_t right) const {
        uint64_t key = make_key(left, right);
        for (size_t i = slot(key);; i = (i + 1) & mask_) {
            if (entries_[i].key == key) return &entries_[i].value;
            if (entries_[i].key == kEmpty) return nullptr;
        }
    }

private:
    // Key and value side by side: one cache miss per probe.
    struct Entry {
        uint64_t key;
        Value value;
    };
    static constexpr uint64_t kEmpty = ~uint64_t{0};
    static uint64_t make_key(int32_t left, int32_t right) {
        return (static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32) | static_cast<uint32_t>(right);
    }
    size_t slot(uint64_t key) const { return static_cast<size_t>((key * 0x9E3779B97F4A7C15ull) >> 24) & mask_; }
    std::vector<Entry> entries_;
    size_t mask_ = 0;
};

struct StringHash {
    using is_transparent = void;
    size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};

// Min-heap order on (rank, pos): std heap functions build a max-heap, so invert the comparison.
struct HeapAfter {
    bool operator()(const BpeScratch::Candidate& a, const BpeScratch::Candidate& b) const {
        return a.rank != b.rank ? a.rank > b.rank : a.pos > b.pos;
    }
};
constexpr HeapAfter heap_after{};

constexpr char32_t kCharTableSize = 0x10000;

}  // namespace

struct Bpe::Impl {
    std::unordered_map<std::string, int32_t, StringHash, std::equal_to<>> vocab;
    std::vector<const std::string*> id_to_token;  // points into vocab's keys
    std::vector<int32_t> char_ids;                // code point -> id of the one-character token, -1 if none
    MergeTable merges;
    std::optional<int32_t> unk_id;
    std::string continuing_subword_prefix;
    std::string end_of_word_suffix;
    bool fuse_unk = false;
    bool byte_fallback = false;
    bool ignore_merges = false;
    std::vector<int32_t> byte_fallback_ids;  // byte -> id of "<0xXX>", -1 if absent

    std::optional<int32_t> lookup(std::string_view s) const {
        auto it = vocab.find(s);
        if (it == vocab.end()) return std::nullopt;
        return it->second;
    }

    void initial_symbols(std::string_view word, std::vector<BpeScratch::Symbol>& symbols) const;
    void merge_all(BpeScratch& scratch) const;
};

void Bpe::Impl::initial_symbols(std::string_view word, std::vector<BpeScratch::Symbol>& symbols) const {
    const bool affixes = !continuing_subword_prefix.empty() || !end_of_word_suffix.empty();
    std::string scratch_piece;
    size_t pos = 0;
    while (pos < word.size()) {
        size_t n = 0;
        char32_t cp = utf8_decode(word, pos, &n);
        std::optional<int32_t> id;
        if (!affixes) {
            if (cp < kCharTableSize) {
                if (char_ids[cp] >= 0) id = char_ids[cp];
            } else {
                id = lookup(word.substr(pos, n));
            }
        } else {
            scratch_piece.clear();
            if (pos > 0) scratch_piece += continuing_subword_prefix;
            scratch_piece += word.substr(pos, n);
            if (pos + n == word.size()) scratch_piece += end_of_word_suffix;
            id = lookup(scratch_piece);
        }
        if (id) {
            symbols.push_back({*id, -1, -1, static_cast<int32_t>(n)});
        } else if (byte_fallback && std::all_of(word.begin() + static_cast<ptrdiff_t>(pos),
                                                word.begin() + static_cast<ptrdiff_t>(pos + n), [&](char c) {
                                                    return byte_fallback_ids[static_cast<uint8_t>(c)] >= 0;
                                                })) {
            for (size_t i = 0; i < n; ++i) {
                symbols.push_back({byte_fallback_ids[static_cast<uint8_t>(word[pos + i])], -1, -1, 1});
            }
        } else if (unk_id) {
            if (fuse_unk && !symbols.empty() && symbols.back().id == *unk_id) {
                symbols.back().len += static_cast<int32_t>(n);
            } else {
                symbols.push_back({*unk_id, -1, -1, static_cast<int32_t>(n)});
            }
        }  // else: HF drops a character it cannot represent
        pos += n;
    }
    for (size_t i = 0; i < symbols.size(); ++i) {
        symbols[i].prev = static_cast<int32_t>(i) - 1;
        symbols[i].next = i + 1 < symbols.size() ? static_cast<int32_t>(i + 1) : -1;
    }
}

void Bpe::Impl::merge_all(BpeScratch& scratch) const {
    auto& symbols = scratch.symbols;
    auto& heap = scratch.heap;
    heap.clear();
    for (size_t i = 0; i + 1 < symbols.size(); ++i) {
        if (const auto* m = merges.find(symbols[i].id, symbols[i + 1].id)) {
            heap.push_back({m->rank, static_cast<int32_t>(i), m->new_id});
        }
    }
    std::make_heap(heap.begin(), heap.end(), heap_after);
    auto push = [&](int32_t pos, const MergeTable::Value& m) {
        heap.push_back({m.rank, pos, m.new_id});
        std::push_heap(heap.begin(), heap.end(), heap_after);
    };
    while (!heap.empty()) {
        std::pop_heap(heap.begin(), heap.end(), heap_after);
        BpeScratch::Candidate top = heap.back();
        heap.pop_back();
        auto& left = symbols[static_cast<size_t>(top.pos)];
        if (left.len == 0 || left.next < 0) continue;  // merged away, or now the last symbol
        int32_t right_pos = left.next;
        BpeScratch::Symbol right = symbols[static_cast<size_t>(right_pos)];
        const auto* current = merges.find(left.id, right.id);
        if (current == nullptr || current->new_id != top.new_id) continue;  // stale candidate
        // Merge right into left.
        left.id = top.new_id;
        left.len += right.len;
        left.next = right.next;
        symbols[static_cast<size_t>(right_pos)].len = 0;
        if (right.next >= 0) symbols[static_cast<size_t>(right.next)].prev = top.pos;
        if (left.prev >= 0) {
            if (const auto* m = merges.find(symbols[static_cast<size_t>(left.prev)].id, left.id)) {
                push(left.prev, *m);
            }
        }
        if (left.next >= 0) {
            if (const auto* m = merges.find(left.id, symbols[static_cast<size_t>(left.next)].id)) {
                push(top.pos, *m);
            }
        }
    }
}

Bpe::Bpe(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Bpe::~Bpe() = default;
Bpe::Bpe(Bpe&&) noexcept = default;
Bpe& Bpe::operator=(Bpe&&) noexcept = default;

namespace {

std::string optional_string(const nlohmann::json& model, const char* key) {
    auto it = model.find(key);
    if (it == model.end() || it->is_null()) return {};
    return it->get<std::string>();
}

// Splits one merge entry ("a b" or ["a", "b"]) into its two parts.
std::pair<std::string, std::string> merge_parts(const nlohmann::json& merge, std::string_view where, size_t rank) {
    std::pair<std::string, std::string> parts;
    if (merge.is_string() && split_merge_string(merge.get_ref<const std::string&>(), &parts)) {
        return parts;
    }
    if (merge.is_array() && merge.size() == 2 && merge[0].is_string() && merge[1].is_string()) {
        return {merge[0].get<std::string>(), merge[1].get<std::string>()};
    }
    raise(ErrorCode::kInvalidModel, "{}: merges[{}] must be \"left right\" or [\"left\", \"right\"]; got {}", where,
          rank, merge.dump());
}

}  // namespace

Bpe Bpe::from_json(const nlohmann::json& model, std::string_view where) {
    const auto& vocab_json = model.at("vocab");
    if (!vocab_json.is_object()) {
        raise(ErrorCode::kInvalidModel, "{}: model.vocab must be an object of token -> id", where);
    }
    std::vector<std::pair<std::string, int64_t>> vocab;
    vocab.reserve(vocab_json.size());
    for (auto it = vocab_json.begin(); it != vocab_json.end(); ++it) {
        vocab.emplace_back(it.key(), it.value().get<int64_t>());
    }
    const auto& merges_json = model.at("merges");
    std::vector<std::pair<std::string, std::string>> merges;
    merges.reserve(merges_json.size());
    for (size_t rank = 0; rank < merges_json.size(); ++rank) {
        merges.push_back(merge_parts(merges_json[rank], where, rank));
    }
    return from_parts(model, std::move(vocab), merges, where);
}

// vocab's strings are moved out below; clang-tidy 14 misses a move through a structured binding.
// NOLINTNEXTLINE(performance-unnecessary-value-param)
Bpe Bpe::from_parts(const nlohmann::json& model, std::vector<std::pair<std::string, int64_t>> vocab,
                    const std::vector<std::pair<std::string, std::string>>& merges, std::string_view where) {
    auto impl = std::make_unique<Impl>();
    if (model.contains("dropout") && !model["dropout"].is_null() && model["dropout"].get<double>() > 0.0) {
        raise(ErrorCode::kUnsupported, "{}: BPE dropout {} is not supported (expected null or 0)", where,
              model["dropout"].get<double>());
    }
    impl->vocab.reserve(vocab.size());
    int32_t id_end = 0;
    for (auto& [token, id] : vocab) {
        if (id < 0 || id > INT32_MAX - 1) {
            raise(ErrorCode::kInvalidModel, "{}: vocab id {} of '{}' is out of range", where, id, token);
        }
        impl->vocab.emplace(std::move(token), static_cast<int32_t>(id));
        id_end = std::max(id_end, static_cast<int32_t>(id) + 1);
    }
    impl->id_to_token.assign(static_cast<size_t>(id_end), nullptr);
    impl->char_ids.assign(kCharTableSize, -1);
    for (const auto& [token, id] : impl->vocab) {
        impl->id_to_token[static_cast<size_t>(id)] = &token;
        size_t n = 0;
        if (!token.empty() && utf8_valid_sequence_length(token, 0) == token.size()) {
            char32_t cp = utf8_decode(token, 0, &n);
            if (cp < kCharTableSize) impl->char_ids[cp] = id;
        }
    }
    impl->continuing_subword_prefix = optional_string(model, "continuing_subword_prefix");
    impl->end_of_word_suffix = optional_string(model, "end_of_word_suffix");
    impl->fuse_unk = model.value("fuse_unk", false);
    impl->byte_fallback = model.value("byte_fallback", false);
    impl->ignore_merges = model.value("ignore_merges", false);
    std::string unk = optional_string(model, "unk_token");
    if (!unk.empty()) {
        impl->unk_id = impl->lookup(unk);
        if (!impl->unk_id) {
            raise(ErrorCode::kInvalidModel, "{}: unk_token '{}' is not in the vocabulary", where, unk);
        }
    }
    impl->byte_fallback_ids.assign(256, -1);
    for (int b = 0; b < 256; ++b) {
        if (auto id = impl->lookup(fmt::format("<0x{:02X}>", b))) impl->byte_fallback_ids[b] = *id;
    }
    // Merges: rank = position in the list; the merged token drops the right part's prefix.
    impl->merges.reserve(merges.size());
    const size_t prefix_len = impl->continuing_subword_prefix.size();
    std::string merged;
    for (size_t rank = 0; rank < merges.size(); ++rank) {
        const auto& [left, right] = merges[rank];
        auto left_id = impl->lookup(left);
        auto right_id = impl->lookup(right);
        merged.assign(left);
        merged.append(std::string_view(right).substr(std::min(prefix_len, right.size())));
        auto new_id = impl->lookup(merged);
        if (!left_id || !right_id || !new_id) {
            raise(ErrorCode::kInvalidModel, "{}: merges[{}] '{} {}' uses a token that is not in the vocabulary", where,
                  rank, left, right);
        }
        impl->merges.insert(*left_id, *right_id, {static_cast<int32_t>(rank), *new_id});
    }
    return Bpe(std::move(impl));
}

void Bpe::tokenize(std::string_view word, BpeScratch& scratch, std::vector<int32_t>& out) const {
    if (word.empty()) return;
    if (impl_->ignore_merges) {
        if (auto id = impl_->lookup(word)) {
            out.push_back(*id);
            return;
        }
    }
    scratch.symbols.clear();
    impl_->initial_symbols(word, scratch.symbols);
    if (scratch.symbols.size() > 1) impl_->merge_all(scratch);
    for (const auto& symbol : scratch.symbols) {
        if (symbol.len > 0) out.push_back(symbol.id);
    }
}

std::optional<int32_t> Bpe::token_to_id(std::string_view token) const { return impl_->lookup(token); }

const std::string* Bpe::id_to_token(int32_t id) const {
    if (id < 0 || static_cast<size_t>(id) >= impl_->id_to_token.size()) return nullptr;
    return impl_->id_to_token[static_cast<size_t>(id)];
}

int32_t Bpe::num_tokens() const { return static_cast<int32_t>(impl_->vocab.size()); }

int32_t Bpe::id_end() const { return static_cast<int32_t>(impl_->id_to_token.size()); }

}  // namespace moeserve::tokenizer
