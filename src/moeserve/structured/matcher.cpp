#include "moeserve/structured/matcher.h"

#include <algorithm>
#include <cstring>

#include "moeserve/core/error.h"

namespace moeserve::structured {
namespace {

// More stacks than this in one state means an ambiguous grammar blowing up; fail the request.
constexpr size_t kMaxStacks = 4096;
// Mask bytes kept per compiled grammar before its cache is cleared (a mask is vocab/8 bytes:
// 19 KB for Qwen3's vocabulary, so about 1,700 states).
constexpr size_t kMaxCachedMaskBytes = size_t{32} << 20;
// Interned stack sets a matcher's transition memo keeps between steps (each ~1 KiB + its stacks).
constexpr size_t kMaxMemoSets = 4096;
// Subtrees with at least this many tokens are tested for bulk acceptance (self_loops costs 256
// transitions the first time a set is tested).
constexpr uint32_t kMinBulkTokens = 16;
// Rule references expanded in a row without consuming a byte (the recursion of expand).
constexpr int kMaxExpandDepth = 2000;

std::string state_key(const StackSet& s) {
    std::string key(s.ends.size() * 4 + s.data.size() * 4, '\0');
    if (!s.ends.empty()) std::memcpy(key.data(), s.ends.data(), s.ends.size() * 4);
    if (!s.data.empty()) std::memcpy(key.data() + s.ends.size() * 4, s.data.data(), s.data.size() * 4);
    return key;
}

bool has_stack(const StackSet& out, const int32_t* data, size_t n) {
    uint32_t begin = 0;
    for (uint32_t end : out.ends) {
        if (end - begin == n && std::equal(data, data + n, out.data.begin() + begin)) return true;
        begin = end;
    }
    return false;
}

}  // namespace

CompiledGrammar::CompiledGrammar(Grammar grammar, std::shared_ptr<const Vocabulary> vocabulary)
    : grammar_(std::move(grammar)), vocab_(std::move(vocabulary)) {
    MOESERVE_CHECK(vocab_ != nullptr, "null vocabulary");
    grammar_bytes_ = grammar_.elements.size() * sizeof(Element) + grammar_.byte_sets.size() * sizeof(ByteSet);
    for (const auto& starts : grammar_.alt_starts) grammar_bytes_ += starts.size() * sizeof(int32_t);
    for (const auto& name : grammar_.rule_names) grammar_bytes_ += name.size();
    for (int32_t start : grammar_.alt_starts[static_cast<size_t>(grammar_.root)]) {
        std::vector<int32_t> stack{start};
        expand(stack, initial_);
    }
}

void CompiledGrammar::expand(std::vector<int32_t>& stack, StackSet& out) const {
    expand_prefix(stack, stack.size(), out, 0);
}

// Expands the stack stack[0, len). Writes only at or above len - 1 and restores stack[len - 1],
// so the caller's prefix survives (no copies on the way down).
void CompiledGrammar::expand_prefix(std::vector<int32_t>& stack, size_t len, StackSet& out, int depth) const {
    if (depth > kMaxExpandDepth) {
        raise(ErrorCode::kInvalidArgument, "grammar: rules nest deeper than {} without consuming input",
              kMaxExpandDepth);
    }
    const auto kind = [&](int32_t pos) { return grammar_.elements[static_cast<size_t>(pos)].kind; };
    // Pop finished alternatives; a finished rule returns to the position its caller pushed.
    while (len > 0 && kind(stack[len - 1]) == Element::kEnd) --len;
    if (len == 0 || kind(stack[len - 1]) == Element::kBytes) {
        if (has_stack(out, stack.data(), len)) return;
        if (out.size() >= kMaxStacks) {
            raise(ErrorCode::kInvalidArgument,
                  "grammar: more than {} parses are alive at once; the grammar is too ambiguous", kMaxStacks);
        }
        out.data.insert(out.data.end(), stack.begin(), stack.begin() + static_cast<std::ptrdiff_t>(len));
        out.ends.push_back(static_cast<uint32_t>(out.data.size()));
        return;
    }
    // A rule reference: replace it by its continuation (unless that is the end: a tail call
    // keeps the stack flat for right recursion), then each alternative on top.
    const int32_t pos = stack[len - 1];
    const int32_t rule = grammar_.elements[static_cast<size_t>(pos)].value;
    const bool tail = kind(pos + 1) == Element::kEnd;
    for (int32_t start : grammar_.alt_starts[static_cast<size_t>(rule)]) {
        size_t l = len - 1;
        if (!tail) stack[l++] = pos + 1;
        if (stack.size() <= l) stack.resize(l + 1);
        stack[l] = start;
        expand_prefix(stack, l + 1, out, depth + 1);
    }
    stack[len - 1] = pos;
}

void CompiledGrammar::advance(const StackSet& in, uint8_t b, StackSet& out, std::vector<int32_t>& scratch) const {
    out.clear();
    uint32_t begin = 0;
    for (uint32_t end : in.ends) {
        if (end > begin) {
            const int32_t top = in.data[end - 1];
            const Element& e = grammar_.elements[static_cast<size_t>(top)];
            if (grammar_.byte_sets[static_cast<size_t>(e.value)].test(b)) {
                scratch.assign(in.data.begin() + begin, in.data.begin() + end);
                scratch.back() = top + 1;
                expand(scratch, out);
            }
        }
        begin = end;
    }
}

int32_t TransitionMemo::intern(const StackSet& s) {
    std::string key = state_key(s);
    const auto it = ids_.find(key);
    if (it != ids_.end()) return it->second;
    const auto id = static_cast<int32_t>(sets_.size());
    ids_.emplace(std::move(key), id);
    sets_.push_back(s);
    next_.resize(next_.size() + 256, -2);
    uint32_t begin = 0;
    bool live = false;
    for (uint32_t end : s.ends) {
        live = live || end > begin;
        begin = end;
    }
    live_.push_back(live ? 1 : 0);
    loops_.emplace_back();
    loops_known_.push_back(0);
    return id;
}

const ByteSet& TransitionMemo::self_loops(const CompiledGrammar& g, int32_t id) {
    const auto i = static_cast<size_t>(id);
    if (!loops_known_[i]) {
        ByteSet loops;
        for (int b = 0; b < 256; ++b) {
            if (next(g, id, static_cast<uint8_t>(b)) == id) loops.set(static_cast<uint8_t>(b));
        }
        loops_[i] = loops;
        loops_known_[i] = 1;
    }
    return loops_[i];
}

int32_t TransitionMemo::next(const CompiledGrammar& g, int32_t id, uint8_t b) {
    const int32_t known = next_[static_cast<size_t>(id) * 256 + b];
    if (known != -2) return known;
    g.advance(sets_[static_cast<size_t>(id)], b, tmp_, scratch_);
    const int32_t to = tmp_.empty() ? kDead : intern(tmp_);
    next_[static_cast<size_t>(id) * 256 + b] = to;  // after intern, which may grow next_
    return to;
}

void TransitionMemo::clear() {
    sets_.clear();
    ids_.clear();
    next_.clear();
    live_.clear();
    loops_.clear();
    loops_known_.clear();
}

std::shared_ptr<const std::vector<uint32_t>> CompiledGrammar::token_mask(const StackSet& state,
                                                                         TransitionMemo& memo) const {
    std::string key = state_key(state);
    {
        std::lock_guard<std::mutex> lock(mutex_);
        const auto it = masks_.find(key);
        if (it != masks_.end()) return it->second;
    }
    auto mask = std::make_shared<const std::vector<uint32_t>>(compute_mask(state, memo));
    std::lock_guard<std::mutex> lock(mutex_);
    ++num_computed_;
    const size_t bytes = key.size() + mask->size() * sizeof(uint32_t);
    if (mask_bytes_ + bytes > kMaxCachedMaskBytes) {
        masks_.clear();
        mask_bytes_ = 0;
    }
    if (masks_.emplace(std::move(key), mask).second) mask_bytes_ += bytes;
    return mask;
}

size_t CompiledGrammar::memory_bytes() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return grammar_bytes_ + mask_bytes_;
}

int64_t CompiledGrammar::num_mask_computations() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return num_computed_;
}

std::vector<uint32_t> CompiledGrammar::compute_mask(const StackSet& state) const {
    TransitionMemo memo;
    return compute_mask(state, memo);
}

// Depth-first walk of the vocabulary trie, carrying the (interned) stack set after each prefix;
// a subtree is skipped as soon as its first byte is not allowed (most of the vocabulary, most
// steps). Each (set, byte) transition is computed once per memo.
std::vector<uint32_t> CompiledGrammar::compute_mask(const StackSet& state, TransitionMemo& memo) const {
    // Bounded memory: a memo that grew large over many steps starts again.
    if (memo.size() > kMaxMemoSets) memo.clear();
    const Vocabulary& v = *vocab_;
    std::vector<uint32_t> mask(static_cast<size_t>((v.size() + 31) / 32), 0);
    const auto& nodes = v.nodes();
    const auto& edges = v.edges();
    const auto& tokens = v.node_tokens();
    struct Frame {
        uint32_t node;
        uint32_t next_edge;
        int32_t set;
    };
    std::vector<Frame> frames;
    const int32_t start = memo.intern(state);
    if (memo.can_consume(start)) frames.push_back({0, 0, start});
    while (!frames.empty()) {
        Frame& f = frames.back();
        const Vocabulary::Node& node = nodes[f.node];
        if (f.next_edge == node.num_edges) {
            frames.pop_back();
            continue;
        }
        const Vocabulary::Edge& e = edges[node.first_edge + f.next_edge++];
        const int32_t to = memo.next(*this, f.set, e.byte);
        if (to == TransitionMemo::kDead) continue;
        const Vocabulary::Node& child = nodes[e.child];
        for (uint32_t t = child.tokens_begin; t < child.tokens_end; ++t) {
            const auto id = static_cast<uint32_t>(tokens[t]);
            mask[id >> 5] |= 1u << (id & 31);
        }
        if (child.num_edges == 0 || !memo.can_consume(to)) continue;
        // Inside a string most bytes lead back to the same set: when every byte below the child
        // does, its whole subtree is allowed without walking it.
        if (child.subtree_end - child.tokens_end >= kMinBulkTokens) {
            const ByteSet& loops = memo.self_loops(*this, to);
            const uint64_t* below = v.below(e.child);
            bool closed = true;
            for (size_t w = 0; w < 4; ++w) closed = closed && (below[w] & ~loops.bits[w]) == 0;
            if (closed) {
                for (uint32_t t = child.tokens_end; t < child.subtree_end; ++t) {
                    const auto id = static_cast<uint32_t>(tokens[t]);
                    mask[id >> 5] |= 1u << (id & 31);
                }
                continue;
            }
        }
        frames.push_back({e.child, 0, to});
    }
    return mask;
}

GrammarMatcher::GrammarMatcher(std::shared_ptr<const CompiledGrammar> grammar)
    : grammar_(std::move(grammar)), state_(grammar_->initial()) {}

bool GrammarMatcher::is_eos(TokenId token) const {
    const auto& eos = grammar_->vocabulary().eos_token_ids();
    return std::find(eos.begin(), eos.end(), token) != eos.end();
}

bool GrammarMatcher::accept_token(TokenId token) {
    if (!error_.empty()) return false;
    if (is_eos(token)) return is_accepting();
    if (token < 0 || token >= grammar_->vocabulary().size()) return false;
    const std::string& bytes = grammar_->vocabulary().bytes(token);
    return !bytes.empty() && accept_bytes(bytes);
}

bool GrammarMatcher::accept_bytes(std::string_view bytes) {
    if (!error_.empty()) return false;
    StackSet cur = state_;
    try {
        for (const char c : bytes) {
            grammar_->advance(cur, static_cast<uint8_t>(c), next_, scratch_);
            if (next_.empty()) return false;
            std::swap(cur, next_);
        }
    } catch (const Error& e) {
        error_ = e.what();
        return false;
    }
    state_ = std::move(cur);
    return true;
}

void GrammarMatcher::fill_next_token_bitmask(std::vector<uint32_t>& mask) const {
    std::shared_ptr<const std::vector<uint32_t>> cached;
    if (error_.empty()) {
        try {
            cached = grammar_->token_mask(state_, memo_);
        } catch (const Error& e) {
            error_ = e.what();
        }
    }
    if (!cached) {
        mask.assign(static_cast<size_t>((grammar_->vocabulary().size() + 31) / 32), 0);
        return;
    }
    mask.assign(cached->begin(), cached->end());
    if (is_accepting()) {
        for (TokenId t : grammar_->vocabulary().eos_token_ids()) {
            if (t >= 0 && static_cast<size_t>(t >> 5) < mask.size())
                mask[static_cast<size_t>(t >> 5)] |= 1u << (t & 31);
        }
    }
}

bool GrammarMatcher::is_accepting() const {
    uint32_t begin = 0;
    for (uint32_t end : state_.ends) {
        if (end == begin) return true;
        begin = end;
    }
    return false;
}

bool GrammarMatcher::is_terminated() const {
    uint32_t begin = 0;
    for (uint32_t end : state_.ends) {
        if (end != begin) return false;
        begin = end;
    }
    return is_accepting();
}

GrammarCompiler::GrammarCompiler(std::shared_ptr<const Vocabulary> vocabulary, size_t max_entries, size_t max_bytes)
    : vocab_(std::move(vocabulary)), max_entries_(std::max<size_t>(1, max_entries)), max_bytes_(max_bytes) {}

std::shared_ptr<const CompiledGrammar> GrammarCompiler::find_locked(const std::string& gbnf) {
    const auto it = cache_.find(gbnf);
    if (it == cache_.end()) return nullptr;
    it->second.first = ++clock_;
    return it->second.second;
}

std::shared_ptr<const CompiledGrammar> GrammarCompiler::cached(const std::string& gbnf) {
    std::lock_guard<std::mutex> lock(mutex_);
    return find_locked(gbnf);
}

std::shared_ptr<const CompiledGrammar> GrammarCompiler::compile(const std::string& gbnf) {
    if (auto hit = cached(gbnf)) return hit;
    auto compiled = std::make_shared<const CompiledGrammar>(parse_gbnf(gbnf), vocab_);
    std::lock_guard<std::mutex> lock(mutex_);
    if (auto raced = find_locked(gbnf)) return raced;
    // The cached grammars' masks grew since they were inserted: measure them now.
    size_t total = compiled->memory_bytes() + gbnf.size();
    for (const auto& [text, entry] : cache_) total += entry.second->memory_bytes() + text.size();
    while (!cache_.empty() && (cache_.size() >= max_entries_ || total > max_bytes_)) {
        auto oldest = std::min_element(cache_.begin(), cache_.end(),
                                       [](const auto& a, const auto& b) { return a.second.first < b.second.first; });
        total -= std::min(total, oldest->second.second->memory_bytes() + oldest->first.size());  // masks may grow
        cache_.erase(oldest);
    }
    cache_[gbnf] = {++clock_, compiled};
    return compiled;
}

size_t GrammarCompiler::num_cached() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return cache_.size();
}

size_t GrammarCompiler::cached_bytes() const {
    std::lock_guard<std::mutex> lock(mutex_);
    size_t total = 0;
    for (const auto& [text, entry] : cache_) total += entry.second->memory_bytes() + text.size();
    return total;
}

}  // namespace moeserve::structured
