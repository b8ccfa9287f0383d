"""A small byte-level BPE: trains merges on a text and writes them as a Hugging Face
`tokenizer.json` that moeserve's tokenizer (and HF `tokenizers`) load.

The pre-tokenizer is Qwen3's split regex followed by the GPT-2 byte-to-unicode map, as in
Qwen3's own tokenizer.json. Python's `re` has no \\p{L}, so the split here is that regex
restricted to ASCII: it is exact only for ASCII text, which is what the corpus is (train.py
checks). Merges are learnt greedily, the most frequent adjacent pair first, ties broken by the
pair's strings (lexicographically smallest first), so the result depends on the text only.
"""

import collections
import json
import re

# Qwen3's pre-tokenizer pattern, as written into tokenizer.json (Unicode classes).
SPLIT_REGEX = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|"
               r"\s*[\r\n]+|\s+(?!\S)|\s+")
# The same pattern for ASCII text (\p{L} = [A-Za-z], \p{N} = [0-9]).
_ASCII_SPLIT = re.compile(r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\nA-Za-z0-9]?[A-Za-z]+|[0-9]| ?[^\sA-Za-z0-9]+[\r\n]*|"
                          r"\s*[\r\n]+|\s+(?!\S)|\s+")


def bytes_to_unicode():
    """GPT-2's reversible byte -> printable character map (byte b -> chr)."""
    keep = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAC + 1)) + list(range(0xAE, 0xFF + 1))
    chars = list(keep)
    extra = 0
    for b in range(256):
        if b not in keep:
            keep.append(b)
            chars.append(256 + extra)
            extra += 1
    return {b: chr(c) for b, c in zip(keep, chars)}


BYTE_CHARS = bytes_to_unicode()


def pre_tokenize(text):
    """The pre-tokenized words of an ASCII text, each as its byte-level string."""
    return ["".join(BYTE_CHARS[b] for b in w.encode("ascii")) for w in _ASCII_SPLIT.findall(text)]


def train(text, vocab_size):
    """(vocab {token: id}, merges [(a, b)]) with 256 byte tokens first, then one per merge."""
    words = collections.Counter(pre_tokenize(text))
    seqs = [list(w) for w in words]
    counts = list(words.values())
    pairs = collections.Counter()
    where = collections.defaultdict(set)  # pair -> indices of the words that hold it
    for i, s in enumerate(seqs):
        for a, b in zip(s, s[1:]):
            pairs[(a, b)] += counts[i]
            where[(a, b)].add(i)
    vocab = {BYTE_CHARS[b]: b for b in range(256)}
    merges = []
    while len(vocab) < vocab_size and pairs:
        best = min(pairs.items(), key=lambda kv: (-kv[1], kv[0]))[0]
        if pairs[best] < 2:
            break
        merges.append(best)
        joined = best[0] + best[1]
        vocab[joined] = len(vocab)
        for i in sorted(where.pop(best, ())):
            s, c = seqs[i], counts[i]
            for a, b in zip(s, s[1:]):
                pairs[(a, b)] -= c
                if pairs[(a, b)] <= 0:
                    del pairs[(a, b)]
            out, j = [], 0
            while j < len(s):
                if j + 1 < len(s) and s[j] == best[0] and s[j + 1] == best[1]:
                    out.append(joined)
                    j += 2
                else:
                    out.append(s[j])
                    j += 1
            seqs[i] = out
            for a, b in zip(out, out[1:]):
                pairs[(a, b)] += c
                where[(a, b)].add(i)
    return vocab, merges


class Encoder:
    """Encodes ASCII text as HF's BPE model does: per word, merge the lowest-ranked adjacent
    pair (leftmost first) until none is in the merge list."""

    def __init__(self, vocab, merges):
        self.vocab = vocab
        self.rank = {tuple(m): r for r, m in enumerate(merges)}
        self.cache = {}

    def word(self, w):
        if w in self.cache:
            return self.cache[w]
        s = list(w)
        while len(s) > 1:
            ranked = [(self.rank.get((a, b), len(self.rank)), j) for j, (a, b) in enumerate(zip(s, s[1:]))]
            r, j = min(ranked)
            if r == len(self.rank):
                break
            s[j:j + 2] = [s[j] + s[j + 1]]
        ids = [self.vocab[t] for t in s]
        self.cache[w] = ids
        return ids

    def encode(self, text):
        out = []
        for w in pre_tokenize(text):
            out.extend(self.word(w))
        return out


def tokenizer_json(vocab, merges, special_tokens):
    """tokenizer.json text: Qwen3's normalizer / pre-tokenizer / decoder layout with this vocab;
    special_tokens [(content, id)] become added tokens."""
    byte_level = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": False}
    doc = {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": [{"id": i, "content": t, "single_word": False, "lstrip": False, "rstrip": False,
                          "normalized": False, "special": True} for t, i in special_tokens],
        "normalizer": {"type": "NFC"},
        "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
            {"type": "Split", "pattern": {"Regex": SPLIT_REGEX}, "behavior": "Isolated", "invert": False},
            byte_level]},
        "post_processor": byte_level,
        "decoder": byte_level,
        "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": "",
                  "end_of_word_suffix": "", "fuse_unk": False, "byte_fallback": False, "ignore_merges": False,
                  "vocab": vocab, "merges": [[a, b] for a, b in merges]},
    }
    return json.dumps(doc, ensure_ascii=False, indent=1) + "\n"
