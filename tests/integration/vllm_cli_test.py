#!/usr/bin/python3
"""vLLM launch lines start `moeserve serve` unchanged but for the binary name and the model path
(issue: vLLM CLI). Each line must start, answer a completion and a chat request, and stop with
exit 0 on SIGTERM; refused lines fail at once with one `error:` line and exit 2. The port of a
line is replaced by 0 (the server binds a free one and logs it). Every wait is bounded.
"""
import argparse
import http.client
import json
import os
import shlex
import signal
import ssl
import subprocess
import sys
import tempfile
import unittest

import serve_test
from serve_test import Server

ARGS = None

# Lines as users write them (the vLLM docs' and the seeds' shapes), model path first.
STARTS = [
    "--served-model-name qwen3 --max-model-len 512",
    "--tensor-parallel-size 1 --max-model-len 512 --gpu-memory-utilization 0.9 --enforce-eager --trust-remote-code "
    "--disable-log-requests --swap-space 4 --dtype bfloat16 --kv-cache-dtype auto --enable-chunked-prefill "
    "--max-num-batched-tokens 2048 --max-num-seqs 8 --seed 0 --uvicorn-log-level warning --disable-log-stats "
    "--enable-prefix-caching --distributed-executor-backend mp --block-size 16 --load-format safetensors",
    "-tp 1 -pp 1 --max-model-len 512 --served-model-name qwen3 other-name --max-log-len 100 --revision main "
    "--api-server-count 1 --generation-config auto --disable-custom-all-reduce --enable-prompt-tokens-details",
    "-dp 2 --enable-expert-parallel --max-model-len 512 --data-parallel-size-local 2 --kv-cache-memory-bytes 64M",
    "--max-model-len=512 --compilation-config 3 --tokenizer-mode auto --root-path /api --kv-cache-dtype fp32",
    "--max-model-len 512 --kv-cache-dtype bfloat16 --max-num-seqs 4",
    "--max-model-len 512 --kv-cache-dtype fp8 --max-num-seqs 4",
    "--max-model-len 512 --scheduling-policy priority --enable-server-load-tracking --max-logprobs 5",
    "--max-model-len 512 --dtype float32 --enable-log-requests --disable-log-requests",
    "--max-model-len 512 -asc 2",
    # issue 30: n-gram speculative decoding
    "--max-model-len 512 --speculative-config '{\"method\": \"ngram\", \"num_speculative_tokens\": 4, "
    "\"prompt_lookup_max\": 4, \"prompt_lookup_min\": 2}'",
    # issue 34: common vLLM flags with one supported value or no effect here
    "--max-model-len 512 --device cpu --task generate --response-role assistant --guided-decoding-backend xgrammar "
    "--limit-mm-per-prompt '{\"image\": 0}' --disable-log-stats",
]
REFUSED = [
    ("--distributed-executor-backend ray -tp 1", "there is no Ray here"),
    ("--distributed-executor-backend=ray", "there is no Ray here"),
    ("--ssl-keyfile /nonexistent/k.pem --ssl-certfile /nonexistent/c.pem", "--ssl-certfile '/nonexistent/c.pem'"),
    ("--ssl-certfile /nonexistent/c.pem", "needs both --ssl-certfile and --ssl-keyfile"),
    ("-pp 2", "no pipeline parallelism"),
    ("--api-server-count 0", "--api-server-count must be in [1, 64]"),
    ("-asc 2 --headless -dp 2 -dpr 1 -dpl 1 -dpa 127.0.0.1 -dpp 29599", "cannot be used with --headless"),
    ("--dtype float16", "--dtype float16: float16 is not run here"),
    ("--dtype half", "--dtype half: float16 is not run here"),
    ("--dtype int8", "expected auto, bfloat16 (bf16) or float32"),
    ("--kv-cache-dtype fp8_e5m2", "expected auto, bf16 (bfloat16), fp32 (float32) or fp8 (fp8_e4m3)"),
    ("--kv-cache-dtype int4", "expected auto, bf16"),
    ("--not-a-vllm-flag", "not-a-vllm-flag"),
    ("--allowed-origins '*'", "expected a JSON list of strings"),
    ("--tool-call-parser mistral_v9", "'mistral_v9' is not one of"),
    ("--enable-auto-tool-choice", "needs --tool-call-parser"),
    ("--reasoning-parser nope", "'nope' is not one of"),
    ("--enable-lora", "--enable-lora: there are no LoRA adapters here"),
    ("--device cuda", "--device cuda: moeserve runs on the CPU only (accepted: auto, cpu)"),
    ("--task embed", "--task embed: only text generation is served here"),
    ("--response-role bot", "--response-role bot: chat answers always carry role 'assistant'"),
]


def launch(line):
    args = shlex.split(line)
    return [ARGS.model, *args, "--kv-cache-memory", "64M"] if "--kv-cache-memory-bytes" not in line else [ARGS.model, *args]


class LaunchLines(unittest.TestCase):
    def test_lines_start_serve_and_stop(self):
        for line in STARTS:
            with self.subTest(line=line):
                s = VllmServer(*launch(line))
                try:
                    prefix = "/api" if "--root-path /api" in line else ""
                    status, r = s.json("POST", prefix + "/v1/completions", {"prompt": "Hello", "max_tokens": 3})
                    self.assertEqual(status, 200, r)
                    status, r = s.json("POST", "/v1/chat/completions",
                                       {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 3})
                    self.assertEqual(status, 200, r)
                    if "qwen3" in line:
                        self.assertEqual(r["model"], "qwen3")
                    if "other-name" in line:  # any served name is accepted, the first reported
                        status, r = s.json("POST", "/v1/completions", {"model": "other-name", "prompt": "a", "max_tokens": 1})
                        self.assertEqual((status, r["model"]), (200, "qwen3"))
                        status, models = s.json("GET", "/v1/models")
                        self.assertEqual([m["id"] for m in models["data"]], ["qwen3", "other-name"])
                        self.assertEqual(s.json("GET", "/v1/models/other-name")[0], 200)
                        self.assertEqual(s.json("GET", "/v1/models/nope")[0], 404)
                    if "--enforce-eager" in line:
                        self.assertIn("flag with no effect here: --enforce-eager", s.log_text())
                    if "--guided-decoding-backend" in line:
                        self.assertIn("flag with no effect here: --guided-decoding-backend", s.log_text())
                        self.assertIn("flag with no effect here: --limit-mm-per-prompt", s.log_text())
                    if "--enable-log-requests" not in line or "--disable-log-requests" in line:
                        # off by default, as in vLLM; the older --disable-log-requests wins
                        self.assertNotIn("finished: reason=", s.log_text())
                        self.assertNotIn("received request", s.log_text())
                    if "--dtype float32" in line:
                        self.assertIn("running f32 (--dtype float32)", s.log_text())
                    self.assertEqual(s.request("GET", "/ping")[0], 200)
                    self.assertEqual(s.request("POST", "/ping")[0], 200)
                finally:
                    self.assertEqual(s.stop(), 0)

    def test_refused_lines_fail_with_one_line(self):
        for line, message in REFUSED:
            with self.subTest(line=line):
                out = subprocess.run([ARGS.moeserve, "serve", ARGS.model, *shlex.split(line), "--port", "0"],
                                     capture_output=True, timeout=30)
                self.assertEqual(out.returncode, 2, out.stderr[-500:])
                err = out.stderr.decode()
                self.assertIn(message, err)
                self.assertNotIn("terminate called", err)

    def test_request_log_lines(self):
        # --enable-log-requests: one line per prompt as it arrives (id, prompt and ids cut to
        # --max-log-len, sampling params) and one as it finishes.
        s = VllmServer(ARGS.model, "--max-model-len", "512", "--kv-cache-memory", "64M", "--enable-log-requests",
                       "--max-log-len", "5")
        try:
            body = {"prompt": "Hello there, how are you today?", "max_tokens": 2, "temperature": 0.25, "seed": 3}
            self.assertEqual(s.json("POST", "/v1/completions", body)[0], 200)
            self.assertEqual(s.json("POST", "/v1/chat/completions",
                                    {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2})[0], 200)
            lines = [l for l in s.log_text().splitlines() if "received request" in l]
            self.assertEqual(len(lines), 2, lines)
            first = lines[0]
            self.assertRegex(first, r'received request cmpl-\S+-0: prompt: "Hello", params: SamplingParams\(n=1, ')
            self.assertIn("temperature=0.25,", first)
            self.assertIn("seed=3,", first)
            self.assertIn("max_tokens=2,", first)
            ids = first.split("prompt_token_ids: [")[1].rstrip("]").split(", ")
            self.assertEqual(len(ids), 5, first)
            self.assertRegex(lines[1], r"received request chatcmpl-\S+-0: prompt: \S")
            self.assertEqual(s.log_text().count("finished: reason="), 2)
        finally:
            self.assertEqual(s.stop(), 0)

    def test_dtype_float32_greedy_equals_bfloat16(self):
        # The widened weights change f32 summation order only: greedy text is the same.
        body = {"prompt": "Hello there", "max_tokens": 8, "temperature": 0, "ignore_eos": True}
        texts = []
        for dtype in ("bfloat16", "float32"):
            s = VllmServer(ARGS.model, "--max-model-len", "512", "--kv-cache-memory", "64M", "--dtype", dtype,
                           "--kv-cache-dtype", "fp32")
            try:
                status, r = s.json("POST", "/v1/completions", body)
                self.assertEqual(status, 200, r)
                texts.append(r["choices"][0]["text"])
            finally:
                self.assertEqual(s.stop(), 0)
        self.assertEqual(texts[0], texts[1])

    def test_chat_template_flag_file_and_text(self):
        template = "{% for m in messages %}<{{ m.role }}>{{ m.content }}{% endfor %}{% if add_generation_prompt %}<a>{% endif %}"
        with tempfile.NamedTemporaryFile("w", suffix=".jinja", delete=False) as f:
            f.write(template)
        try:
            for value in (f.name, template):
                s = VllmServer(ARGS.model, "--max-model-len", "512", "--kv-cache-memory", "64M", "--chat-template", value)
                try:
                    status, r = s.json("POST", "/tokenize", {"messages": [{"role": "user", "content": "hi"}]})
                    self.assertEqual(status, 200, r)
                    status, d = s.json("POST", "/detokenize", {"tokens": r["tokens"]})
                    self.assertEqual(d["prompt"], "<user>hi<a>")
                finally:
                    self.assertEqual(s.stop(), 0)
        finally:
            os.unlink(f.name)

    def test_generation_config(self):
        base = ["--max-model-len", "512", "--kv-cache-memory", "64M"]
        greedy_body = {"prompt": "Hello there", "max_tokens": 4, "temperature": 0, "ignore_eos": True}
        s = VllmServer(ARGS.model, *base, "--generation-config", "vllm")
        try:
            greedy = s.json("POST", "/v1/completions", greedy_body)[1]
            sampled = s.json("POST", "/v1/completions", {**greedy_body, "temperature": None, "seed": 7})[1]
            first = s.json("POST", "/tokenize", {"prompt": greedy["choices"][0]["text"], "add_special_tokens": False})[1]["tokens"][0]
        finally:
            self.assertEqual(s.stop(), 0)
        self.assertNotEqual(sampled["choices"][0]["text"], greedy["choices"][0]["text"])  # temperature 1 (seeded)
        with tempfile.TemporaryDirectory() as d:
            for name in os.listdir(ARGS.model):
                if name != "generation_config.json":
                    os.symlink(os.path.abspath(os.path.join(ARGS.model, name)), os.path.join(d, name))
            with open(os.path.join(d, "generation_config.json"), "w") as f:
                json.dump({"temperature": 0.0, "max_new_tokens": 3, "eos_token_id": [first]}, f)
            s = VllmServer(d, *base)  # --generation-config auto, the default
            try:
                r = s.json("POST", "/v1/completions", {**greedy_body, "temperature": None, "seed": 7, "ignore_eos": False})[1]
                # greedy by the file's temperature, and its extra EOS id stops at the first token
                self.assertEqual(r["choices"][0]["finish_reason"], "stop", r)
                self.assertEqual(r["usage"]["completion_tokens"], 1, r)
                r = s.json("POST", "/v1/completions", {"prompt": "Hello there", "ignore_eos": True})[1]
                self.assertEqual(r["usage"]["completion_tokens"], 3, r)  # max_new_tokens when max_tokens is absent
                self.assertIn("generation_config.json (--generation-config)", s.log_text())
            finally:
                self.assertEqual(s.stop(), 0)
            s = VllmServer(d, *base, "--override-generation-config", '{"max_new_tokens": 2}')
            try:
                r = s.json("POST", "/v1/completions", {"prompt": "Hello there", "ignore_eos": True})[1]
                self.assertEqual(r["usage"]["completion_tokens"], 2, r)
            finally:
                self.assertEqual(s.stop(), 0)

    def test_tokenizer_flag(self):
        # A model folder without tokenizer files serves with --tokenizer naming another folder.
        with tempfile.TemporaryDirectory() as d:
            for name in os.listdir(ARGS.model):
                if not name.startswith("tokenizer"):
                    os.symlink(os.path.join(ARGS.model, name), os.path.join(d, name))
            s = VllmServer(d, "--tokenizer", ARGS.model, "--max-model-len", "512", "--kv-cache-memory", "64M")
            try:
                status, r = s.json("POST", "/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}],
                                                                     "max_tokens": 3, "response_format": {"type": "json_object"}})
                self.assertEqual(status, 200, r)
            finally:
                self.assertEqual(s.stop(), 0)

    def test_vllm_api_key_env(self):
        s = VllmServer(ARGS.model, "--max-model-len", "512", "--kv-cache-memory", "64M",
                       env={**os.environ, "VLLM_API_KEY": "k-env"}, api_key=None)
        try:
            self.assertEqual(s.request("GET", "/v1/models")[0], 401)
            s.api_key = "k-env"
            self.assertEqual(s.request("GET", "/v1/models")[0], 200)
        finally:
            self.assertEqual(s.stop(), 0)


def raw_request(s, method, path, headers):
    c = s.conn()
    c.request(method, path, headers=headers)
    r = c.getresponse()
    body = r.read()
    c.close()
    return r.status, {k.lower(): v for k, v in r.getheaders()}, body


class Cors(unittest.TestCase):
    def test_preflight_and_headers(self):
        s = VllmServer(ARGS.model, "--max-model-len", "512", "--kv-cache-memory", "64M",
                       "--allowed-origins", '["http://app.example"]', "--allowed-methods", '["GET", "POST"]',
                       "--allow-credentials", api_key="k")
        try:
            pre = {"Origin": "http://app.example", "Access-Control-Request-Method": "POST",
                   "Access-Control-Request-Headers": "authorization, content-type"}
            status, h, _ = raw_request(s, "OPTIONS", "/v1/chat/completions", pre)
            self.assertEqual(status, 200)
            self.assertEqual(h["access-control-allow-origin"], "http://app.example")
            self.assertEqual(h["access-control-allow-credentials"], "true")
            self.assertEqual(h["access-control-allow-methods"], "GET, POST")
            self.assertEqual(h["access-control-allow-headers"], "authorization, content-type")
            self.assertEqual(h["access-control-max-age"], "600")
            status, _, body = raw_request(s, "OPTIONS", "/v1/models", {**pre, "Access-Control-Request-Method": "DELETE"})
            self.assertEqual((status, body), (400, b"Disallowed CORS method"))
            status, _, body = raw_request(s, "OPTIONS", "/v1/models", {**pre, "Origin": "http://evil.example"})
            self.assertEqual((status, body), (400, b"Disallowed CORS origin"))
            # The listed origin's requests run (its Origin passes the loopback server's policy) and
            # carry the CORS headers; another site's are refused.
            auth = {"Authorization": "Bearer k"}
            status, h, _ = raw_request(s, "GET", "/v1/models", {**auth, "Origin": "http://app.example"})
            self.assertEqual(status, 200)
            self.assertEqual(h["access-control-allow-origin"], "http://app.example")
            self.assertEqual(h["vary"], "Origin")
            status, h, _ = raw_request(s, "GET", "/v1/models", {**auth, "Origin": "http://evil.example"})
            self.assertEqual(status, 403)
            self.assertNotIn("access-control-allow-origin", h)
        finally:
            self.assertEqual(s.stop(), 0)

    def test_defaults_answer_any_origin_with_a_star(self):
        s = VllmServer(ARGS.model, "--max-model-len", "512", "--kv-cache-memory", "64M")
        try:
            status, h, _ = raw_request(s, "OPTIONS", "/v1/completions",
                                       {"Origin": "http://localhost:3000", "Access-Control-Request-Method": "POST"})
            self.assertEqual(status, 200)
            self.assertEqual(h["access-control-allow-origin"], "*")
            status, h, _ = raw_request(s, "GET", "/v1/models", {"Origin": "http://localhost:3000"})
            self.assertEqual((status, h["access-control-allow-origin"]), (200, "*"))
        finally:
            self.assertEqual(s.stop(), 0)


class Https(unittest.TestCase):
    def test_self_signed_certificate(self):
        with tempfile.TemporaryDirectory() as d:
            key, cert = os.path.join(d, "k.pem"), os.path.join(d, "c.pem")
            subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", key, "-out", cert,
                            "-days", "1", "-subj", "/CN=localhost", "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1"],
                           check=True, capture_output=True, timeout=60)
            ctx = ssl.create_default_context(cafile=cert)
            s = VllmServer(ARGS.model, "--max-model-len", "512", "--kv-cache-memory", "64M",
                           "--ssl-keyfile", key, "--ssl-certfile", cert, ssl_context=ctx)
            try:
                c = s.conn()
                c.request("POST", "/v1/completions", body=json.dumps({"prompt": "Hello", "max_tokens": 3}),
                          headers={"Content-Type": "application/json"})
                r = c.getresponse()
                self.assertEqual(r.status, 200)
                self.assertEqual(len(json.loads(r.read())["choices"]), 1)
                c.request("POST", "/v1/completions", body=json.dumps({"prompt": "Hi", "max_tokens": 2, "stream": True}),
                          headers={"Content-Type": "application/json"})  # same connection, streamed
                r = c.getresponse()
                self.assertEqual(r.status, 200)
                self.assertTrue(r.read().endswith(b"data: [DONE]\n\n"))
                c.close()
                # Plain HTTP on the TLS port gets no answer (the handshake fails, the server closes).
                plain = http.client.HTTPConnection("127.0.0.1", s.port, timeout=10)
                with self.assertRaises((http.client.HTTPException, ConnectionError, OSError)):
                    plain.request("GET", "/health")
                    plain.getresponse().read()
                self.assertIn("listening on https://", s.log_text())
            finally:
                self.assertEqual(s.stop(), 0)


class VllmServer(Server):
    """A server started from a launch line alone (no test defaults but --port 0)."""

    def __init__(self, *line, env=None, api_key=None, ssl_context=None):
        self.raw_line = list(line)
        super().__init__(api_key=api_key, env=env, ssl_context=ssl_context)

    def command(self):
        return [ARGS.moeserve, "serve", *self.raw_line, "--port", "0"]


if __name__ == "__main__":
    p = argparse.ArgumentParser()
    p.add_argument("--moeserve", required=True)
    p.add_argument("--model", required=True)
    ARGS, rest = p.parse_known_args()
    serve_test.ARGS = ARGS
    loader = unittest.TestLoader()
    suite = unittest.TestSuite([loader.loadTestsFromTestCase(c) for c in (LaunchLines, Cors, Https)])
    result = unittest.TextTestRunner(verbosity=2).run(suite)
    sys.exit(0 if result.wasSuccessful() else 1)
