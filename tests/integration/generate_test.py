#!/usr/bin/python3
"""`moeserve generate`: the single-prompt mode (--prompt) and the batch mode (--input/--output)
run the same engine, so one prompt gives the same text either way: greedy, --chat (a "messages"
line), --ignore-eos and seeded sampling (the request's stream is Rng(--seed) in both). Also the
single-prompt mode's stdout (prompt + text + newline), its final stderr line, and its refusals
(exit 2 with one `error:` line). No server; every run is bounded.
"""
import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import unittest

ARGS = None

FINAL_LINE = re.compile(r"^generate: load [0-9.]+ s \| prompt (\d+) tokens, prefill [0-9.]+ tok/s \| (\d+) tokens "
                        r"generated, decode [0-9.]+ tok/s \| finish=(stop|length) \| threads=1"
                        r"( \| routed experts read [0-9.]+ MB per decoded token)?"
                        r" \| a decoded token reads [0-9.]+ MB of weights \+ [0-9.]+ kB of KV per context token$")


def run(*args, timeout=120):
    return subprocess.run([ARGS.moeserve, "generate", "--model", ARGS.model, "--threads", "1", *args],
                          capture_output=True, timeout=timeout)


def single(prompt, *args):
    """(text, tokens generated, finish, prompt tokens) of one --prompt run."""
    out = run("--prompt", prompt, *args)
    if out.returncode != 0:
        raise AssertionError(f"generate --prompt failed ({out.returncode}): {out.stderr.decode()}")
    stdout = out.stdout.decode()
    assert stdout.startswith(prompt) and stdout.endswith("\n"), stdout
    last = out.stderr.decode().rstrip("\n").split("\n")[-1]
    m = FINAL_LINE.match(last)
    assert m, f"final stderr line: {last!r}"
    return stdout[len(prompt):-1], int(m.group(2)), m.group(3), int(m.group(1))


def batch(lines, *args):
    """The output lines of one --input run."""
    with tempfile.TemporaryDirectory() as d:
        src, dst = os.path.join(d, "in.jsonl"), os.path.join(d, "out.jsonl")
        with open(src, "w") as f:
            f.write("".join(json.dumps(line) + "\n" for line in lines))
        out = run("--input", src, "--output", dst, "--no-progress", *args)
        if out.returncode != 0:
            raise AssertionError(f"generate --input failed ({out.returncode}): {out.stderr.decode()}")
        with open(dst) as f:
            return [json.loads(line) for line in f]


class PromptEqualsBatch(unittest.TestCase):
    PROMPTS = ["The capital of France is", "Once upon a time", "1, 2, 3,"]

    def check(self, flags, fields, chat=False):
        lines = [{**({"messages": [{"role": "user", "content": p}]} if chat else {"prompt": p}), **fields}
                 for p in self.PROMPTS]
        results = batch(lines)
        for p, r in zip(self.PROMPTS, results):
            with self.subTest(prompt=p):
                text, generated, finish, num_prompt = single(p, *flags, *(["--chat"] if chat else []))
                o = r["outputs"][0]
                self.assertEqual(text, o["text"])
                self.assertEqual(finish, o["finish_reason"])
                self.assertEqual(num_prompt, r["num_prompt_tokens"])
                # The stop token is not counted among the generated ones.
                self.assertEqual(generated, len(o["token_ids"]) - (1 if isinstance(o.get("stop_reason"), int) else 0))

    def test_greedy(self):
        self.check(["--max-tokens", "12"], {"max_tokens": 12, "temperature": 0})

    def test_chat(self):
        self.check(["--max-tokens", "12"], {"max_tokens": 12, "temperature": 0}, chat=True)

    def test_ignore_eos(self):
        self.check(["--max-tokens", "20", "--ignore-eos"], {"max_tokens": 20, "temperature": 0, "ignore_eos": True})
        text, generated, finish, _ = single("Hello", "--max-tokens", "20", "--ignore-eos")
        self.assertEqual((generated, finish), (20, "length"))

    def test_seeded_sampling(self):
        flags = ["--max-tokens", "16", "--temperature", "0.9", "--top-k", "50", "--seed", "5"]
        self.check(flags, {"max_tokens": 16, "temperature": 0.9, "top_k": 50, "seed": 5})
        self.assertEqual(single("Hello", *flags), single("Hello", *flags))

    def test_n_choices_take_seed_plus_k(self):
        # As the server: choice k of a seeded request samples with seed + k.
        flags = ["--max-tokens", "12", "--temperature", "0.9", "--top-k", "50"]
        [r] = batch([{"prompt": "Hello", "max_tokens": 12, "temperature": 0.9, "top_k": 50, "seed": 5, "n": 2}])
        for k in range(2):
            with self.subTest(choice=k):
                self.assertEqual(r["outputs"][k]["text"], single("Hello", *flags, "--seed", str(5 + k))[0])

    def test_logit_bias_allowed_token_ids_and_bad_words(self):
        # The routes' reader: the fields the server knows mean the same here.
        bias = {"prompt": "Hello", "max_tokens": 4, "temperature": 0, "logit_bias": {"7": 100}}
        [biased, allowed] = batch([bias, {"prompt": "Hello", "max_tokens": 4, "temperature": 0,
                                          "allowed_token_ids": [7, 8]}])
        self.assertEqual(biased["outputs"][0]["token_ids"], [7, 7, 7, 7])
        self.assertTrue(set(allowed["outputs"][0]["token_ids"]) <= {7, 8})
        # Token 7's text banned as a word beats its +100 bias.
        word = biased["outputs"][0]["text"][:len(biased["outputs"][0]["text"]) // 4]
        [banned] = batch([{**bias, "bad_words": [word]}])
        self.assertNotIn(7, banned["outputs"][0]["token_ids"])

    def test_warmup_does_not_change_the_text(self):
        # The warmup runs are untimed copies of the request under their own cache salt.
        for flags in (["--max-tokens", "8"], ["--max-tokens", "8", "--enable-prefix-caching"],
                      ["--max-tokens", "8", "--temperature", "0.9", "--seed", "3"]):
            with self.subTest(flags=flags):
                self.assertEqual(single("Hello", *flags), single("Hello", *flags, "--warmup", "2"))

    def test_max_num_seqs_does_not_change_the_text(self):
        # Single-prompt mode sizes its KV cache for one sequence unless told otherwise.
        self.assertEqual(single("Hello", "--max-tokens", "8")[0], single("Hello", "--max-tokens", "8", "--max-num-seqs", "4")[0])


class Refusals(unittest.TestCase):
    def refused(self, needle, *args):
        out = run(*args)
        self.assertEqual(out.returncode, 2, out.stderr.decode())
        self.assertIn(needle, out.stderr.decode())
        self.assertEqual(out.stdout.decode(), "")

    def test_flags(self):
        # The request rules are ipc::validate_request's (as the HTTP 400s), naming the flag.
        self.refused("error: 'max_tokens' must be at least 1; got 0 (--max-tokens)", "--prompt", "Hi",
                     "--max-tokens", "0")
        self.refused("error: 'temperature' must be >= 0; got -1 (--temperature)", "--prompt", "Hi",
                     "--temperature", "-1")
        self.refused("error: 'top_p' must be in (0, 1]; got 0 (--top-p)", "--prompt", "Hi", "--top-p", "0")
        self.refused("error: generate needs either --prompt or --input (with --output), not neither")
        self.refused("error: --input needs --output FILE", "--input", "x.jsonl")
        self.refused("error: --warmup times --prompt; it does not apply to --input", "--input", "x.jsonl",
                     "--output", "y.jsonl", "--warmup", "1")
        self.refused("error: This model's maximum context length is 32 tokens. However, you requested 41 tokens",
                     "--prompt", "Hi", "--max-model-len", "32", "--max-tokens", "40")

    def test_input_lines(self):
        # Each refusal names the line; nothing runs.
        with tempfile.TemporaryDirectory() as d:
            src, dst = os.path.join(d, "in.jsonl"), os.path.join(d, "out.jsonl")
            for line, needle in [({"prompt": "Hi", "colour": 1}, "in.jsonl:1: unknown field 'colour'"),
                                 ({"prompt": ["a", "b"]}, "in.jsonl:1: a list of prompts (one prompt per line) is "
                                                          "not supported by generate --input"),
                                 ({"prompt": "Hi", "echo": True}, "in.jsonl:1: echo is not supported"),
                                 ({"prompt": "Hi", "temperature": "hot"}, "in.jsonl:1: "),
                                 ({"prompt": "Hi", "priority": 3}, "in.jsonl:1: priority 3 needs --scheduling-policy"),
                                 ({"prompt": "Hi", "prompt_token_ids": [1]}, "in.jsonl:1: each line needs exactly one")]:
                with self.subTest(line=line):
                    with open(src, "w") as f:
                        f.write(json.dumps(line) + "\n")
                    self.refused(needle, "--input", src, "--output", dst)

    def test_kv_cache_too_small(self):
        self.refused("less than one 4096-token sequence needs", "--prompt", "Hi", "--kv-cache-memory", "64K")
        self.refused("--kv-cache-memory '2T': unknown unit 'T'", "--prompt", "Hi", "--kv-cache-memory", "2T")


if __name__ == "__main__":
    p = argparse.ArgumentParser()
    p.add_argument("--moeserve", required=True)
    p.add_argument("--model", required=True)
    ARGS, rest = p.parse_known_args()
    loader = unittest.TestLoader()
    suite = unittest.TestSuite([loader.loadTestsFromTestCase(c) for c in (PromptEqualsBatch, Refusals)])
    result = unittest.TextTestRunner(verbosity=2).run(suite)
    sys.exit(0 if result.wasSuccessful() else 1)
