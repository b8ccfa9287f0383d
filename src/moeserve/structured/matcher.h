// Grammar-constrained decoding: a byte-level pushdown matcher (llama.cpp's stack set: each stack
// lists what is left to match, its top always a byte set) advanced token by token, and the
// per-step token bitmask, found by walking the vocabulary trie once with pruning and cached per
// matcher state in the compiled grammar (states repeat: inside a string, after a comma, ...).
// Depends on core only.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "moeserve/structured/grammar.h"
#include "moeserve/structured/vocabulary.h"

namespace moeserve::structured {

// A set of stacks, flat: stack i is data[ends[i-1] .. ends[i]) (bottom first); an empty stack
// means "the grammar is complete here".
struct StackSet {
    std::vector<int32_t> data;
    std::vector<uint32_t> ends;
    size_t size() const { return ends.size(); }
    bool empty() const { return ends.empty(); }
    void clear() {
        data.clear();
        ends.clear();
    }
};

class CompiledGrammar;

// The stack sets a matcher has reached while walking the trie, interned, with their byte
// transitions: a DFA built lazily (inside a JSON string every byte leads to one of a handful of
// sets, so most trie nodes cost one table lookup). Owned by one matcher; not thread-safe.
class TransitionMemo {
public:
    static constexpr int32_t kDead = -1;
    int32_t intern(const StackSet& s);
    // The set reached from set `id` by byte b (kDead when b is not allowed).
    int32_t next(const CompiledGrammar& g, int32_t id, uint8_t b);
    bool can_consume(int32_t id) const { return live_[static_cast<size_t>(id)] != 0; }
    // The bytes that lead from set id back to itself (computed on first use: 256 transitions).
    const ByteSet& self_loops(const CompiledGrammar& g, int32_t id);
    size_t size() const { return sets_.size(); }
    void clear();

private:
    std::vector<StackSet> sets_;
    std::unordered_map<std::string, int32_t> ids_;
    std::vector<int32_t> next_;   // [set * 256 + byte], -2 = not computed yet
    std::vector<uint8_t> live_;   // the set has a stack that can consume a byte
    std::vector<ByteSet> loops_;  // self_loops, valid where loops_known_
    std::vector<uint8_t> loops_known_;
    StackSet tmp_;
    std::vector<int32_t> scratch_;
};

// A grammar bound to a vocabulary. Shared (read-only except its mask cache, which is locked)
// by every request that uses the same grammar text. Thread-safe.
class CompiledGrammar {
public:
    CompiledGrammar(Grammar grammar, std::shared_ptr<const Vocabulary> vocabulary);

    const Grammar& grammar() const { return grammar_; }
    const Vocabulary& vocabulary() const { return *vocab_; }
    const StackSet& initial() const { return initial_; }

    // Expands stack (top = back) until every top is a byte set, appending the results to out.
    void expand(std::vector<int32_t>& stack, StackSet& out) const;
    // out = the stacks of in after consuming byte b (deduplicated); empty = b is not allowed.
    void advance(const StackSet& in, uint8_t b, StackSet& out, std::vector<int32_t>& scratch) const;

    // Bitmask words (bit t of word t/32) of the tokens allowed next in state, EOS excluded;
    // from the cache, else computed with memo (the caller's, reused across its steps).
    std::shared_ptr<const std::vector<uint32_t>> token_mask(const StackSet& state, TransitionMemo& memo) const;

    int64_t num_mask_computations() const;  // cache misses so far (for tests and benchmarks)
    // What this grammar holds now: its rules plus its cached masks (which grow as requests walk
    // it, up to kMaxCachedMaskBytes). GrammarCompiler bounds its cache by the sum.
    size_t memory_bytes() const;

    // The mask of state computed afresh, bypassing the cache (with a fresh memo: what a cold
    // cache miss costs; for tests and benchmarks).
    std::vector<uint32_t> compute_mask(const StackSet& state, TransitionMemo& memo) const;
    std::vector<uint32_t> compute_mask(const StackSet& state) const;

private:
    void expand_prefix(std::vector<int32_t>& stack, size_t len, StackSet& out, int depth) const;

    Grammar grammar_;
    size_t grammar_bytes_ = 0;
    std::shared_ptr<const Vocabulary> vocab_;
    StackSet initial_;
    mutable std::mutex mutex_;
    mutable std::unordered_map<std::string, std::shared_ptr<const std::vector<uint32_t>>> masks_;
    mutable size_t mask_bytes_ = 0;  // of masks_, keys included
    mutable int64_t num_computed_ = 0;
};

// One sequence's position in a grammar. Not thread-safe (one request, one thread at a time).
class GrammarMatcher {
public:
    explicit GrammarMatcher(std::shared_ptr<const CompiledGrammar> grammar);

    // Consumes token's bytes; false (state unchanged) if the grammar does not allow them. An EOS
    // id is accepted (and changes nothing) exactly when is_accepting().
    bool accept_token(TokenId token);
    bool accept_bytes(std::string_view bytes);

    // Bit t of mask[t / 32]: token t may come next. EOS ids are set when is_accepting().
    // mask: ceil(vocab / 32) words, overwritten (all zero once error() is set).
    void fill_next_token_bitmask(std::vector<uint32_t>& mask) const;

    // Why the matcher stopped (a grammar too ambiguous or too deep to expand); once set, nothing
    // is accepted and the mask is empty. Errors never leave the matcher (it runs on pool threads).
    const std::string& error() const { return error_; }

    bool is_accepting() const;   // the text so far is a complete sentence of the grammar
    bool is_terminated() const;  // complete, and nothing may follow
    const StackSet& state() const { return state_; }

private:
    bool is_eos(TokenId token) const;

    std::shared_ptr<const CompiledGrammar> grammar_;
    StackSet state_;
    StackSet next_;
    std::vector<int32_t> scratch_;
    mutable TransitionMemo memo_;
    mutable std::string error_;
};

// Compiles GBNF text against a vocabulary, caching compiled grammars by their text: at most
// max_entries, holding at most max_bytes together (CompiledGrammar::memory_bytes, masks
// included), least recently used dropped first. A dropped grammar lives on in the requests
// that use it. Thread-safe: the engine compiles on a worker thread (GrammarCompileWorker).
class GrammarCompiler {
public:
    static constexpr size_t kDefaultMaxEntries = 64;
    static constexpr size_t kDefaultMaxBytes = size_t{256} << 20;

    explicit GrammarCompiler(std::shared_ptr<const Vocabulary> vocabulary, size_t max_entries = kDefaultMaxEntries,
                             size_t max_bytes = kDefaultMaxBytes);
    // Raises Error kInvalidArgument for a bad grammar (see parse_gbnf).
    std::shared_ptr<const CompiledGrammar> compile(const std::string& gbnf);
    // The cached grammar of this text, or null: what may be had without compiling.
    std::shared_ptr<const CompiledGrammar> cached(const std::string& gbnf);
    const std::shared_ptr<const Vocabulary>& vocabulary() const { return vocab_; }
    size_t num_cached() const;
    size_t cached_bytes() const;

private:
    std::shared_ptr<const CompiledGrammar> find_locked(const std::string& gbnf);

    std::shared_ptr<const Vocabulary> vocab_;
    size_t max_entries_;
    size_t max_bytes_;
    mutable std::mutex mutex_;
    int64_t clock_ = 0;
    std::unordered_map<std::string, std::pair<int64_t, std::shared_ptr<const CompiledGrammar>>> cache_;
};

}  // namespace moeserve::structured
