#!/usr/bin/python3
"""A GGUF file made by llama.cpp's own tools, served with no other file (issue #27):
`moeserve serve FILE.gguf` on a real socket, the tokenizer and chat template from the file's
metadata. The file (tests/data/gguf/README.md) is llama-quantize's Q4_0 of the trained
qwen3-moe-kjv model, so its greedy text is English, and it must be the text llama.cpp itself
generated from that file (llama-simple, recorded below when the file was made). Also the chat
route with the template from the metadata, streaming, and /v1/models.
"""
import argparse
import json
import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import serve_test  # noqa: E402  (Server, the stdlib HTTP client)

GGUF = None
PROMPT = "In the beginning God created"
# `llama-simple -m llama_quantize_kjv_q4_0.gguf -n 16 "In the beginning God created"` (llama.cpp
# v0.5.0, greedy): the 16 tokens after the prompt.
LLAMA_CPP_TEXT = ", and the Lord Jesus Christ, and the Lord, and the Lord, and"


class ServeGguf(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.s = serve_test.Server(model=GGUF)

    @classmethod
    def tearDownClass(cls):
        cls.s.stop()

    def test_greedy_completion_is_llama_cpps(self):
        status, r = self.s.json("POST", "/v1/completions", {"model": "tiny", "prompt": PROMPT, "max_tokens": 16,
                                                            "temperature": 0, "ignore_eos": True})
        self.assertEqual(status, 200, r)
        self.assertEqual(r["choices"][0]["text"], LLAMA_CPP_TEXT)
        self.assertEqual(r["usage"]["completion_tokens"], 16)

    def test_chat_uses_the_files_template(self):
        status, r = self.s.json("POST", "/v1/chat/completions",
                                {"model": "tiny", "messages": [{"role": "user", "content": "Who created the earth?"}],
                                 "max_tokens": 12, "temperature": 0})
        self.assertEqual(status, 200, r)
        self.assertGreater(r["usage"]["prompt_tokens"], 5)  # the template wrapped the message
        self.assertTrue(r["choices"][0]["message"]["content"])

    def test_stream_equals_whole(self):
        body = {"model": "tiny", "prompt": PROMPT, "max_tokens": 16, "temperature": 0, "ignore_eos": True,
                "stream": True}
        events = self.s.stream("/v1/completions", body)
        self.assertEqual(events[-1], "[DONE]")
        text = "".join(json.loads(e)["choices"][0]["text"] for e in events[:-1] if json.loads(e)["choices"])
        self.assertEqual(text, LLAMA_CPP_TEXT)

    def test_models_lists_it(self):
        status, r = self.s.json("GET", "/v1/models")
        self.assertEqual(status, 200, r)
        self.assertEqual([m["id"] for m in r["data"]], ["tiny"])


def main():
    global GGUF
    p = argparse.ArgumentParser()
    p.add_argument("--moeserve", required=True)
    p.add_argument("--model", required=True)  # the harness's tiny model (unused here)
    p.add_argument("--gguf", required=True)
    args, rest = p.parse_known_args()
    serve_test.ARGS = args
    GGUF = args.gguf
    unittest.main(argv=[sys.argv[0]] + rest, verbosity=2)


if __name__ == "__main__":
    main()
