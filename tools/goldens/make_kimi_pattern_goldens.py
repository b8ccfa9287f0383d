#!/usr/bin/env python3
"""Writes tests/data/tokenizer/kimi_pattern_goldens.json: how Kimi-K2's pre-tokenization pattern
(tokenization_kimi.py's pat_str, which tiktoken runs on Rust's regex engine) splits a set of
texts, computed here by Python's `regex` module (Debian: python3-regex) on the pattern as Kimi
writes it, class intersections (&&) and all (VERSION1 semantics). moeserve runs a PCRE2 spelling
of it (tokenizer/tiktoken.cpp); tests/tokenizer/tiktoken_test.cpp holds it to these splits.
With a tiktoken folder (the Kimi-style one of scripts/make_kimi_style_tokenizer.py), each case
also gets its token ids from tiktoken's algorithm written out here (merge the adjacent pair whose
bytes have the lowest rank until none has one), which moeserve's reader must reproduce.

    make_kimi_pattern_goldens.py [TIKTOKEN_DIR]"""
import base64
import json
import pathlib
import sys

import regex

KIMI_PARTS = [
    r"""[\p{Han}]+""",
    r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]*[\p{Ll}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
    r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]+[\p{Ll}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
    r"""\p{N}{1,3}""",
    r""" ?[^\s\p{L}\p{N}]+[\r\n]*""",
    r"""\s*[\r\n]+""",
    r"""\s+(?!\S)""",
    r"""\s+""",
]

TEXTS = [
    "Hello, world! How's it going? I'M FINE, they'll say; we'd've DON'T.",
    "HelloWorld iPhone McDonald's XMLHttpRequest ABCdef abcDEF",
    "1234567 3.14159 2026-12-06 0x1F +42 -7",
    "你好世界，今天天气很好。明天见！",
    "中文English混合123文本mixed",
    "世界。Hello、こんにちは「テスト」",
    "東京タワーに行きました。日々の暮らし、人々。",
    "한국어 텍스트입니다. 서울",
    "مرحبا بالعالم، كيف حالك؟",
    "Ǆemal ǅemal ǆemal: titlecase letters",
    "café naïve e\u0301 a\u0308 combining marks",
    "〇一二三 〆 ㍿ Ⅻ",
    "emoji 😀👍🏽 🇯🇵 flags and ✨ sparkles",
    "tabs\tand  spaces   and\n\nnewlines\r\n\r\nend  ",
    "def f(x):\n    return x**2  # square\n",
    "   leading and trailing   ",
    "Ελληνικά ΚΕΦΑΛΑΙΑ και πεζά",
    "Привет, Мир! ПРИВЕТ мир",
    "आप कैसे हैं? हिन्दी",
    "'s 't 're 've 'm 'll 'd 'S 'T 'RE",
    "\u3000全角スペース\u3000と　空白",
    "数学：∑x² + √y = ∞；化学：H₂O",
]


def read_ranks(path: pathlib.Path) -> dict:
    ranks = {}
    for line in path.read_text(encoding="ascii").splitlines():
        if line:
            token, rank = line.split(" ")
            ranks[base64.b64decode(token)] = int(rank)
    return ranks


def tiktoken_ids(piece: bytes, ranks: dict) -> list:
    parts = [piece[i:i + 1] for i in range(len(piece))]
    while len(parts) > 1:
        best = None
        for i in range(len(parts) - 1):
            rank = ranks.get(parts[i] + parts[i + 1])
            if rank is not None and (best is None or rank < best[0]):
                best = (rank, i)
        if best is None:
            break
        i = best[1]
        parts[i:i + 2] = [parts[i] + parts[i + 1]]
    return [ranks[p] for p in parts]


def main() -> int:
    pattern = regex.compile("|".join(KIMI_PARTS), regex.VERSION1)
    cases = [{"text": t, "pieces": pattern.findall(t)} for t in TEXTS]
    if len(sys.argv) > 1:
        ranks = read_ranks(pathlib.Path(sys.argv[1]) / "tiktoken.model")
        for c in cases:
            c["ids"] = [i for piece in c["pieces"] for i in tiktoken_ids(piece.encode("utf-8"), ranks)]
    for c in cases:
        assert "".join(c["pieces"]) == c["text"], c["text"]  # the pattern covers every character
    out = pathlib.Path(__file__).resolve().parents[2] / "tests" / "data" / "tokenizer" / "kimi_pattern_goldens.json"
    out.write_text(json.dumps({"regex_module": regex.__version__, "cases": cases}, ensure_ascii=False, indent=1) + "\n",
                   encoding="utf-8")
    print(f"wrote {out} ({len(cases)} cases)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
