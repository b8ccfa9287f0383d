// Vocabulary: the bytes each token id decodes to, and a byte trie over them, built once per
// model so every grammar walks the same trie. Takes plain byte strings (the caller decodes the
// tokenizer), so this library never depends on tokenizer internals. Depends on core only.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace moeserve::structured {

using TokenId = int32_t;

class Vocabulary {
public:
    // token_bytes[id]: what id decodes to; empty for ids a grammar never allows (special and
    // unused ids). eos_token_ids: allowed exactly where the grammar is complete.
    Vocabulary(std::vector<std::string> token_bytes, std::vector<TokenId> eos_token_ids);

    int32_t size() const { return static_cast<int32_t>(bytes_.size()); }
    const std::string& bytes(TokenId id) const { return bytes_[static_cast<size_t>(id)]; }
    const std::vector<TokenId>& eos_token_ids() const { return eos_; }

    //   node 0 = root (empty prefix); node n's children are edges [first_edge, first_edge + num_edges)
    //   in byte order; tokens whose bytes end at n are node_tokens[tokens_begin, tokens_end).
    //   node_tokens is in preorder, so n's whole subtree holds node_tokens[tokens_begin, subtree_end).
    struct Node {
        uint32_t first_edge = 0;
        uint32_t num_edges = 0;
        uint32_t tokens_begin = 0;
        uint32_t tokens_end = 0;
        uint32_t subtree_end = 0;
    };
    struct Edge {
        uint8_t byte = 0;
        uint32_t child = 0;
    };
    const std::vector<Node>& nodes() const { return nodes_; }
    const std::vector<Edge>& edges() const { return edges_; }
    const std::vector<TokenId>& node_tokens() const { return node_tokens_; }
    // The bytes on the edges below node n (what its subtree's tokens continue with): 4 words.
    const uint64_t* below(uint32_t n) const { return &below_[static_cast<size_t>(n) * 4]; }

private:
    uint32_t build(const std::vector<TokenId>& sorted, size_t begin, size_t end, size_t depth);

    std::vector<std::string> bytes_;
    std::vector<TokenId> eos_;
    std::vector<Node> nodes_;
    std::vector<Edge> edges_;
    std::vector<TokenId> node_tokens_;
    std::vector<uint64_t> below_;  // [node * 4 + word]: 256-bit byte sets
};

}  // namespace moeserve::structured
