#!/usr/bin/python3
"""The rest of the OpenAI/vLLM surface agents and eval harnesses use, over HTTP against the real
`moeserve serve` with the tiny models. Suites:
  reasoning  --reasoning-parser deepseek_r1 (the random model never closes its thinking) and a
             structured output that starts after </think> (forced here with logit_bias)
  extras     unknown fields accepted and logged once; logit_bias, allowed_token_ids, bad_words,
             truncate_prompt_tokens, request_id, cache_salt, continuous_usage_stats, /tokenize
             return_token_strs and tools
  loglik     lm-eval's loglikelihood request (echo, max_tokens 0, logprobs 1) against the float64
             reference's log-softmax; prompt_logprobs; text_offset in characters
  deepseek   the DeepSeek-V3 template with a tool-call history and the deepseek_v3 parser flag
  harmony    gpt-oss's text side on a tiny qwen3_moe carrying the gpt-oss tokenizer: its template
             through the routes (reasoning_effort, thinking, tool-call arguments as objects), and
             the openai_gptoss / openai parsers detokenizing with special tokens kept
Bounded: one server per suite, 60 s per call."""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

import numpy as np

import serve_test
from serve_test import Server

ARGS = None
THINK_END = "151668"  # </think> in the Qwen3 vocabulary


def stream_json(s, path, body):
    return [json.loads(e) for e in s.stream(path, body) if e != "[DONE]"]


def chat(s, body, **kw):
    status, r = s.json("POST", "/v1/chat/completions", {"messages": [{"role": "user", "content": "Hi"}], **body}, **kw)
    return status, r


class Reasoning(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.s = Server("--reasoning-parser", "deepseek_r1")

    @classmethod
    def tearDownClass(cls):
        assert cls.s.stop() == 0

    def test_never_closed_is_reasoning(self):
        status, r = chat(self.s, {"max_tokens": 8, "temperature": 0})
        self.assertEqual(status, 200, r)
        m = r["choices"][0]["message"]
        self.assertTrue(m["reasoning_content"], m)
        self.assertEqual(m["reasoning"], m["reasoning_content"])
        self.assertIsNone(m["content"], m)
        events = stream_json(self.s, "/v1/chat/completions", {"messages": [{"role": "user", "content": "Hi"}],
                                                         "max_tokens": 8, "temperature": 0, "stream": True})
        deltas = [e["choices"][0]["delta"] for e in events if e.get("choices")]
        self.assertEqual("".join(d.get("reasoning_content", "") for d in deltas), m["reasoning_content"])
        self.assertEqual("".join(d.get("content", "") for d in deltas), "")

    def test_structured_output_after_reasoning(self):
        schema = {"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"],
                  "additionalProperties": False}
        status, r = chat(self.s, {"max_tokens": 40, "temperature": 0, "logit_bias": {THINK_END: 100},
                                  "response_format": {"type": "json_schema", "json_schema": {"name": "a", "schema": schema}}})
        self.assertEqual(status, 200, r)
        m = r["choices"][0]["message"]
        self.assertEqual(r["choices"][0]["finish_reason"], "stop", r)
        self.assertIsNone(m["reasoning_content"], m)  # </think> came first: nothing was thought
        self.assertIsInstance(json.loads(m["content"])["ok"], bool)


class Extras(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.s = Server()

    @classmethod
    def tearDownClass(cls):
        assert cls.s.stop() == 0

    def complete(self, **body):
        status, r = self.s.json("POST", "/v1/completions", {"prompt": "Hello", "max_tokens": 4, "temperature": 0, **body})
        self.assertEqual(status, 200, r)
        return r

    def test_unknown_fields_are_accepted_and_logged_once(self):
        for _ in range(2):
            self.complete(some_future_field=1, audio=None)
            status, r = chat(self.s, {"max_tokens": 2, "reasoning_effort": "low", "another_field": {"x": 1}})
            self.assertEqual(status, 200, r)
        log = self.s.log_text()
        self.assertEqual(log.count("ignoring the request field 'some_future_field'"), 1, log[-2000:])
        self.assertEqual(log.count("ignoring the request field 'another_field'"), 1)
        self.assertNotIn("'reasoning_effort'", log)  # known: a chat template variable (gpt-oss reads it)

    def test_logits_processors(self):
        r = self.complete(logit_bias={"17": 100}, max_tokens=3, logprobs=0)
        self.assertEqual(r["choices"][0]["text"], "222", r)  # token 17 is "2"
        r = self.complete(allowed_token_ids=[16, 17], max_tokens=6, ignore_eos=True)
        self.assertTrue(set(r["choices"][0]["text"]) <= {"1", "2"}, r)
        digits = list(range(15, 25))  # "0".."9", one token each
        free = self.complete(allowed_token_ids=digits, max_tokens=1)["choices"][0]["text"]
        banned = self.complete(allowed_token_ids=digits, max_tokens=1, bad_words=[free])["choices"][0]["text"]
        self.assertIn(banned, "0123456789")
        self.assertNotEqual(free, banned)

    def test_request_fields(self):
        status, r = self.s.json("POST", "/v1/completions", {"prompt": "Hello", "max_tokens": 2, "priority": 1})
        self.assertEqual((status, r["error"]["param"]), (400, "priority"))  # fcfs server: vLLM's 400
        r = self.complete(request_id="my-id-1")
        self.assertEqual(r["id"], "cmpl-my-id-1")
        r = self.complete(prompt="one two three four five six seven", truncate_prompt_tokens=3)
        self.assertEqual(r["usage"]["prompt_tokens"], 3)
        long_prompt = "The quick brown fox jumps over the lazy dog. " * 6
        self.complete(prompt=long_prompt, cache_salt="a")
        hit = self.complete(prompt=long_prompt, cache_salt="a")["usage"].get("prompt_tokens_details", {})
        miss = self.complete(prompt=long_prompt, cache_salt="b")["usage"].get("prompt_tokens_details", {})
        self.assertGreater(hit.get("cached_tokens", 0), 0)
        self.assertEqual(miss.get("cached_tokens", 0), 0)
        events = stream_json(self.s, "/v1/completions", {"prompt": "Hello", "max_tokens": 3, "stream": True, "ignore_eos": True,
                                                    "stream_options": {"continuous_usage_stats": True}})
        usages = [e["usage"]["completion_tokens"] for e in events if e.get("choices")]
        self.assertEqual(usages[-1], 3, events)
        self.assertEqual(usages, sorted(usages))

    def test_tokenize_extras(self):
        status, r = self.s.json("POST", "/tokenize", {"prompt": "Hello world", "return_token_strs": True})
        self.assertEqual(status, 200, r)
        self.assertEqual(r["token_strs"], ["Hello", "Ġworld"])
        tools = [{"type": "function", "function": {"name": "lookup"}}]
        status, with_tools = self.s.json("POST", "/tokenize", {"messages": [{"role": "user", "content": "x"}], "tools": tools})
        self.assertEqual(status, 200, with_tools)
        status, without = self.s.json("POST", "/tokenize", {"messages": [{"role": "user", "content": "x"}]})
        self.assertGreater(with_tools["count"], without["count"])

    def test_tool_choice_errors(self):
        tools = [{"type": "function", "function": {"name": "lookup"}}]
        status, r = chat(self.s, {"tools": tools})  # auto without --enable-auto-tool-choice: vLLM's 400
        self.assertEqual(status, 400, r)
        self.assertIn("--enable-auto-tool-choice", r["error"]["message"])
        status, r = chat(self.s, {"tools": tools, "tool_choice": {"type": "function", "function": {"name": "other"}}})
        self.assertEqual((status, r["error"]["param"]), (400, "tool_choice"))
        status, r = chat(self.s, {"tools": tools, "tool_choice": "none", "max_tokens": 2})
        self.assertEqual(status, 200, r)


class Loglik(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.s = Server("--kv-cache-dtype", "fp32")  # the exact cache: the reference is float64
        ref = json.load(open(os.path.join(ARGS.model, "reference_greedy.json")))
        cls.prompt = ref["prompt"]
        logits = np.fromfile(os.path.join(ARGS.model, "reference_logits.f32"), dtype=np.float32).astype(np.float64)
        logits = logits.reshape(len(cls.prompt), -1)
        lse = np.log(np.exp(logits - logits.max(axis=1, keepdims=True)).sum(axis=1)) + logits.max(axis=1)
        cls.logprob = logits - lse[:, None]

    @classmethod
    def tearDownClass(cls):
        assert cls.s.stop() == 0

    def test_echo_logprobs_equal_the_reference(self):
        status, r = self.s.json("POST", "/v1/completions", {"prompt": self.prompt, "max_tokens": 0, "echo": True,
                                                            "logprobs": 1, "temperature": 0})
        self.assertEqual(status, 200, r)
        c = r["choices"][0]
        lp = c["logprobs"]
        self.assertEqual(len(lp["tokens"]), len(self.prompt))
        self.assertIsNone(lp["token_logprobs"][0])
        self.assertIsNone(lp["top_logprobs"][0])
        for t in range(1, len(self.prompt)):
            want = self.logprob[t - 1, self.prompt[t]]
            self.assertLess(abs(lp["token_logprobs"][t] - want), 1e-3, (t, lp["token_logprobs"][t], want))
            best = max(lp["top_logprobs"][t].values())
            self.assertLess(abs(best - self.logprob[t - 1].max()), 1e-3)
        self.assertEqual(r["usage"]["completion_tokens"], 0)
        # text_offset counts characters of the echoed text.
        self.assertEqual(lp["text_offset"][0], 0)
        for t in range(1, len(self.prompt)):
            self.assertEqual(lp["text_offset"][t], lp["text_offset"][t - 1] + len(lp["tokens"][t - 1]))
        self.assertEqual(c["text"], "".join(lp["tokens"]))

    def test_prompt_logprobs_and_echo_with_generation(self):
        status, r = self.s.json("POST", "/v1/completions", {"prompt": self.prompt, "max_tokens": 2, "prompt_logprobs": 1,
                                                            "temperature": 0})
        self.assertEqual(status, 200, r)
        plp = r["choices"][0]["prompt_logprobs"]
        self.assertIsNone(plp[0])
        self.assertEqual(len(plp), len(self.prompt))
        entry = plp[1][str(self.prompt[1])]
        self.assertLess(abs(entry["logprob"] - self.logprob[0, self.prompt[1]]), 1e-3)
        status, r = self.s.json("POST", "/v1/completions", {"prompt": "héllo wörld", "max_tokens": 2, "echo": True,
                                                            "logprobs": 0, "temperature": 0})
        self.assertEqual(status, 200, r)
        c = r["choices"][0]
        self.assertTrue(c["text"].startswith("héllo wörld"))
        self.assertEqual(len(c["logprobs"]["tokens"]), r["usage"]["prompt_tokens"] + 2)


class DeepSeek(unittest.TestCase):
    def test_template_renders_tool_call_history(self):
        s = Server("--enable-auto-tool-choice", "--tool-call-parser", "deepseek_v3", model=ARGS.deepseek_model)
        try:
            messages = [{"role": "user", "content": "Weather?"},
                        {"role": "assistant", "content": None,
                         "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": {"city": "Oslo"}}}]},
                        {"role": "tool", "tool_call_id": "c1", "content": "sunny"}]
            status, r = s.json("POST", "/tokenize", {"messages": messages})
            self.assertEqual(status, 200, r)
            status, text = s.json("POST", "/detokenize", {"tokens": r["tokens"]})
            self.assertIn("<｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n```json\n{\"city\":\"Oslo\"}\n```", text["prompt"])
            self.assertIn("<｜tool▁output▁begin｜>sunny<｜tool▁output▁end｜>", text["prompt"])
            tools = [{"type": "function", "function": {"name": "get_weather"}}]
            status, r = s.json("POST", "/v1/chat/completions", {"messages": messages, "tools": tools, "max_tokens": 4})
            self.assertEqual(status, 200, r)
        finally:
            self.assertEqual(s.stop(), 0)


HARMONY_MARKERS = ["<|start|>", "<|channel|>", "<|message|>", "<|end|>", "<|call|>", "<|return|>", "<|constrain|>"]


class Harmony(unittest.TestCase):
    tools = [{"type": "function", "function": {"name": "get_weather", "description": "Weather.", "parameters": {
        "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}]
    history = [{"role": "system", "content": "Be brief."},
               {"role": "user", "content": "Weather in Paris?"},
               {"role": "assistant", "content": None, "reasoning_content": "Call the tool.",
                "tool_calls": [{"id": "c1", "type": "function",
                                "function": {"name": "get_weather", "arguments": "{\"city\":\"Paris\"}"}}]},
               {"role": "tool", "tool_call_id": "c1", "content": "sunny"}]

    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="moeserve-harmony-")
        model = os.path.join(cls.tmp, "m")
        # gpt-oss itself: its tokenizer, harmony template and stop ids come with the generator's row
        subprocess.run([ARGS.moeserve, "make-model", "--arch", "gpt_oss", "--size", "tiny",
                        "--tokenizer-dir", os.path.join(ARGS.tokenizer_cache, "gpt_oss"), "--out", model],
                       check=True, stdout=subprocess.DEVNULL, timeout=120)
        cls.s = Server("--enable-auto-tool-choice", "--tool-call-parser", "openai", "--reasoning-parser", "openai_gptoss",
                       "--enable-log-requests", model=model)

    @classmethod
    def tearDownClass(cls):
        try:
            assert cls.s.stop() == 0
        finally:
            shutil.rmtree(cls.tmp, ignore_errors=True)

    def test_template_through_the_routes(self):
        status, r = self.s.json("POST", "/tokenize", {"messages": self.history, "tools": self.tools,
                                                      "chat_template_kwargs": {"reasoning_effort": "high"}})
        self.assertEqual(status, 200, r)
        status, text = self.s.json("POST", "/detokenize", {"tokens": r["tokens"]})
        prompt = text["prompt"]
        self.assertIn("Reasoning: high\n\n", prompt)
        self.assertIn("<|start|>developer<|message|># Instructions\n\nBe brief.\n\n# Tools", prompt)
        self.assertIn("<|start|>assistant<|channel|>analysis<|message|>Call the tool.<|end|>", prompt)  # thinking
        self.assertIn('<|start|>assistant to=functions.get_weather<|channel|>commentary json<|message|>{"city": "Paris"}<|call|>',
                      prompt)  # the arguments as an object, through tojson
        self.assertTrue(prompt.endswith('<|start|>functions.get_weather to=assistant<|channel|>commentary<|message|>"sunny"'
                                        "<|end|><|start|>assistant"), prompt[-300:])

    def test_chat_answers_keep_markers_out(self):
        body = {"messages": self.history, "tools": self.tools, "reasoning_effort": "low", "max_tokens": 24,
                "temperature": 0}
        status, r = self.s.json("POST", "/v1/chat/completions", body)
        self.assertEqual(status, 200, r)
        m = r["choices"][0]["message"]
        for field in ("content", "reasoning_content"):
            for marker in HARMONY_MARKERS:
                self.assertNotIn(marker, m.get(field) or "", m)
        log = self.s.log_text()
        self.assertIn("Reasoning: low", log)
        self.assertIn("skip_special_tokens=False", log)  # the harmony markers reach the parsers
        events = stream_json(self.s, "/v1/chat/completions", {**body, "stream": True})
        deltas = [e["choices"][0]["delta"] for e in events if e.get("choices")]
        self.assertEqual("".join(d.get("content") or "" for d in deltas), m["content"] or "")
        self.assertEqual("".join(d.get("reasoning_content") or "" for d in deltas), m["reasoning_content"] or "")
        status, r = self.s.json("POST", "/v1/chat/completions", {**body, "reasoning_effort": "max"})
        self.assertEqual(status, 400, r)
        self.assertEqual(r["error"]["param"], "reasoning_effort")


SUITES = {"reasoning": Reasoning, "extras": Extras, "loglik": Loglik, "deepseek": DeepSeek, "harmony": Harmony}

if __name__ == "__main__":
    p = argparse.ArgumentParser()
    p.add_argument("--moeserve", required=True)
    p.add_argument("--model", required=True)
    p.add_argument("--deepseek-model", required=True)
    p.add_argument("--tokenizer-cache", default=os.path.expanduser("~/.cache/moeserve/tokenizers"))
    p.add_argument("--suite", choices=sorted(SUITES))
    ARGS, rest = p.parse_known_args()
    serve_test.ARGS = ARGS
    loader = unittest.TestLoader()
    suites = [SUITES[ARGS.suite]] if ARGS.suite else list(SUITES.values())
    result = unittest.TextTestRunner(verbosity=2).run(unittest.TestSuite(loader.loadTestsFromTestCase(c) for c in suites))
    sys.exit(0 if result.wasSuccessful() else 1)
