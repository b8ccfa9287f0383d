#!/usr/bin/env python3
"""Writes a Kimi-K2-style tiktoken tokenizer folder for the tests and `make-model --arch kimi_k2`:
tiktoken.model (one "BASE64 RANK" line per token) and a tokenizer_config.json that names
tokenization_kimi.TikTokenTokenizer in its auto_map, as Kimi-K2's does. Kimi's own 163,584-token
file is not in any registry this project can reach, so the ranks are DeepSeek-V3's byte-level
vocabulary (ids below 128000, the same ids), and the special tokens are Kimi-K2's names at Kimi's
offsets after the ranks ([BOS] first, <|im_middle|> 17th), with Kimi-K2's chat template as
released (setup.sh fetches llama.cpp's copy of it). The split pattern and the merge order come from
moeserve's tiktoken reader, as for a real Kimi folder.

    make_kimi_style_tokenizer.py DEEPSEEK_V3_TOKENIZER_DIR CHAT_TEMPLATE_FILE OUT_DIR
"""
import base64
import json
import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "tools" / "train"))
from bpe import bytes_to_unicode  # noqa: E402  (GPT-2's byte-level alphabet)

BASE_TOKENS = 128000  # DeepSeek-V3's regular vocabulary: ids [0, 128000)
NUM_RESERVED = 256  # tokenization_kimi.py's num_reserved_special_tokens
# Kimi-K2's special tokens, by offset after the ranks.
SPECIALS = {0: "[BOS]", 1: "[EOS]", 2: "<|im_end|>", 3: "<|im_user|>", 4: "<|im_assistant|>",
            6: "<|start_header_id|>", 7: "<|end_header_id|>", 9: "[EOT]", 10: "<|im_system|>",
            11: "<|tool_calls_section_begin|>", 12: "<|tool_calls_section_end|>", 13: "<|tool_call_begin|>",
            14: "<|tool_call_argument_begin|>", 15: "<|tool_call_end|>", 17: "<|im_middle|>"}

def main(argv):
    src, template, out = pathlib.Path(argv[1]), pathlib.Path(argv[2]), pathlib.Path(argv[3])
    vocab = json.loads((src / "tokenizer.json").read_text(encoding="utf-8"))["model"]["vocab"]
    decode = {ch: b for b, ch in bytes_to_unicode().items()}
    lines = []
    for token, rank in sorted(vocab.items(), key=lambda kv: kv[1]):
        if rank >= BASE_TOKENS:
            continue
        # DeepSeek's specials at ids 0-2 are written as text, outside the byte alphabet: here they
        # are plain tokens of their UTF-8 bytes, so the ranks stay 0..127999 (tiktoken's rule).
        raw = bytes(decode[ch] for ch in token) if all(ch in decode for ch in token) else token.encode("utf-8")
        lines.append(f"{base64.b64encode(raw).decode('ascii')} {rank}")
    added = {str(BASE_TOKENS + off): {"content": name, "lstrip": False, "normalized": False, "rstrip": False,
                                      "single_word": False, "special": True} for off, name in SPECIALS.items()}
    config = {
        "auto_map": {"AutoTokenizer": ["tokenization_kimi.TikTokenTokenizer", None]},
        "tokenizer_class": "TikTokenTokenizer",
        "bos_token": "[BOS]",
        "eos_token": "<|im_end|>",
        "pad_token": "[EOS]",
        "model_max_length": 131072,
        "added_tokens_decoder": added,
        "chat_template": template.read_text(encoding="utf-8"),
    }
    out.mkdir(parents=True, exist_ok=True)
    (out / "tiktoken.model").write_text("\n".join(lines) + "\n", encoding="ascii")
    (out / "tokenizer_config.json").write_text(json.dumps(config, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    print(f"wrote {out} ({len(lines)} ranks, {len(SPECIALS)} named special tokens of {NUM_RESERVED})")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
