#!/usr/bin/python3
"""Integration tests of `moeserve serve` over real sockets (stdlib only; every wait bounded).

Suites: api (routes and response shapes, greedy == `moeserve generate`, streaming == non-
streaming), errors (OpenAI-shaped 400/401/404/405/413), lifecycle (disconnect aborts and frees
KV blocks, SIGTERM drains and exits 0, a killed rank gives errors and is restarted, or with
--max-rank-restarts 0 gives 503 for good, not hangs), load
(1,000 concurrent streaming clients).
"""
import argparse
import asyncio
import http.client
import json
import os
import re
import resource
import signal
import socket
import subprocess
import sys
import time
import unittest
import harness

from harness import parse_metrics, stop_process

ARGS = None
# Seconds for any single HTTP exchange; a sanitizer build runs the server 3-10x slower (8 distinct
# 1000-property schemas compiled under ASan beside a busy neighbour outlasted 30 s).
TIMEOUT = 90 if os.environ.get("MOESERVE_SANITIZER") else 30
API_KEY = "test-key"


def listening_port(log_text):
    """The port a `serve --port 0` reports once bound (never guessed by the test)."""
    m = re.search(r"listening on https?://\S+?:(\d+) ", log_text)
    return int(m.group(1)) if m else None


class Server:
    def __init__(self, *extra, api_key=API_KEY, model=None, env=None, preexec_fn=None, new_session=False, ssl_context=None):
        self.port = None
        self.ssl_context = ssl_context  # HTTPS: the client context (trusting the server's certificate)
        self.api_key = api_key
        self.model, self.extra = model or ARGS.model, extra
        # The log goes to a file: an unread pipe would fill up and block the server.
        self.log = harness.child_log()
        self.proc = subprocess.Popen(self.command(), stdout=subprocess.DEVNULL, stderr=self.log, env=env, preexec_fn=preexec_fn,
                                     start_new_session=new_session)
        deadline = time.time() + 60
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError("server exited: " + self.log_text())
            if self.port is None:
                self.port = listening_port(self.log_text())
                if self.port is None:
                    time.sleep(0.05)
                    continue
            try:
                if self.request("GET", "/health")[0] == 200:
                    return
            except OSError:
                pass
            time.sleep(0.1)
        self.proc.kill()
        raise RuntimeError("server not healthy within 60 s")

    def command(self):
        cmd = [ARGS.moeserve, "serve", "--model", self.model, "--port", "0",
               "--threads", "1", "--served-model-name", "tiny", "--max-model-len", "512",
               "--kv-cache-memory", "64M", *self.extra]
        if "--heartbeat-timeout-ms" not in self.extra:
            cmd += ["--heartbeat-timeout-ms", "5000"]
        if self.api_key:
            cmd += ["--api-key", self.api_key]
        return cmd

    def log_text(self):
        self.log.seek(0)
        return self.log.read().decode(errors="replace")

    def conn(self):
        if self.ssl_context:
            return http.client.HTTPSConnection("127.0.0.1", self.port, timeout=TIMEOUT, context=self.ssl_context)
        return http.client.HTTPConnection("127.0.0.1", self.port, timeout=TIMEOUT)

    def headers(self, auth=True):
        h = {"Content-Type": "application/json"}
        if auth and self.api_key:
            h["Authorization"] = "Bearer " + self.api_key
        return h

    def request(self, method, path, body=None, auth=True, raw=None):
        c = self.conn()
        data = raw if raw is not None else (json.dumps(body) if body is not None else None)
        c.request(method, path, body=data, headers=self.headers(auth))
        r = c.getresponse()
        payload = r.read()
        c.close()
        return r.status, payload

    def json(self, method, path, body=None, **kw):
        status, payload = self.request(method, path, body, **kw)
        return status, json.loads(payload) if payload else None

    def stream(self, path, body):
        """Returns the list of SSE data payloads (strings)."""
        c = self.conn()
        c.request("POST", path, body=json.dumps(body), headers=self.headers())
        r = c.getresponse()
        assert r.status == 200, (r.status, r.read())
        assert r.getheader("Content-Type") == "text/event-stream"
        events = [line[len(b"data: "):].decode() for line in r.read().split(b"\n\n") if line.startswith(b"data: ")]
        c.close()
        return events

    def metrics(self):
        status, payload = self.request("GET", "/metrics")
        assert status == 200
        return parse_metrics(payload)

    def stop(self, sig=signal.SIGTERM, timeout=30):
        return stop_process(self.proc, sig, timeout)

    def rank_pid(self):
        with open(f"/proc/{self.proc.pid}/task/{self.proc.pid}/children") as f:
            return int(f.read().split()[0])


# Every metric family vLLM v1 exports (vllm/v1/metrics/loggers.py, PrometheusStatLogger, v0.11,
# incl. those shown only with --show-hidden-metrics-for-version, LoRA's, and the speculative-decoding
# counters of vllm/v1/spec_decode/metrics.py, SpecDecodingProm), as prometheus_client names them:
# a counter "vllm:x" is exposed as vllm:x_total, a histogram as _bucket/_sum/_count.
VLLM_V1_METRICS = {
    "vllm:num_requests_running": "gauge",
    "vllm:num_requests_waiting": "gauge",
    "vllm:gpu_cache_usage_perc": "gauge",
    "vllm:gpu_prefix_cache_queries": "counter",
    "vllm:gpu_prefix_cache_hits": "counter",
    "vllm:kv_cache_usage_perc": "gauge",
    "vllm:prefix_cache_queries": "counter",
    "vllm:prefix_cache_hits": "counter",
    "vllm:num_preemptions": "counter",
    "vllm:prompt_tokens": "counter",
    "vllm:generation_tokens": "counter",
    "vllm:request_success": "counter",
    "vllm:request_prompt_tokens": "histogram",
    "vllm:request_generation_tokens": "histogram",
    "vllm:iteration_tokens_total": "histogram",
    "vllm:request_max_num_generation_tokens": "histogram",
    "vllm:request_params_n": "histogram",
    "vllm:request_params_max_tokens": "histogram",
    "vllm:time_to_first_token_seconds": "histogram",
    "vllm:time_per_output_token_seconds": "histogram",
    "vllm:inter_token_latency_seconds": "histogram",
    "vllm:e2e_request_latency_seconds": "histogram",
    "vllm:request_queue_time_seconds": "histogram",
    "vllm:request_inference_time_seconds": "histogram",
    "vllm:request_prefill_time_seconds": "histogram",
    "vllm:request_decode_time_seconds": "histogram",
    "vllm:lora_requests_info": "gauge",
    "vllm:cache_config_info": "gauge",
    "vllm:spec_decode_num_drafts": "counter",
    "vllm:spec_decode_num_draft_tokens": "counter",
    "vllm:spec_decode_num_accepted_tokens": "counter",
    "vllm:spec_decode_num_accepted_tokens_per_pos": "counter",
}


def metric(m, prefix):
    return sum(v for k, v in m.items() if k.startswith(prefix))


def assert_error_shape(test, status, body, expected_status):
    test.assertEqual(status, expected_status, body)
    test.assertEqual(set(body), {"error"})
    test.assertEqual(set(body["error"]), {"message", "type", "param", "code"})
    test.assertIsInstance(body["error"]["message"], str)


class Api(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.s = Server()

    @classmethod
    def tearDownClass(cls):
        assert cls.s.stop() == 0

    def test_health_version_models_metrics(self):
        self.assertEqual(self.s.request("GET", "/health")[0], 200)
        status, v = self.s.json("GET", "/version")
        self.assertEqual(status, 200)
        self.assertIn("version", v)
        status, load = self.s.json("GET", "/load")
        self.assertEqual((status, load), (200, {"server_load": 0}))
        status, models = self.s.json("GET", "/v1/models")
        self.assertEqual(models["object"], "list")
        self.assertEqual(models["data"][0]["id"], "tiny")
        self.assertEqual(models["data"][0]["object"], "model")
        self.assertEqual(models["data"][0]["max_model_len"], 512)
        m = self.s.metrics()
        for name in ["vllm:num_requests_running", "vllm:num_requests_waiting",
                     "vllm:prefix_cache_hits_total", "vllm:generation_tokens_total",
                     "vllm:time_to_first_token_seconds_count", "vllm:e2e_request_latency_seconds_count"]:
            self.assertTrue(any(k.startswith(name) for k in m), name)

    def test_metric_names_are_vllm_v1s(self):
        # Every vllm:* series we export is one vLLM v1 exports under that name and type, and every
        # vLLM metric we do not export is named in docs/serving.md ("Metrics vLLM has that we do
        # not export") with the reason.
        status, _ = self.s.json("POST", "/v1/completions", {"model": "tiny", "prompt": "Hi", "max_tokens": 2})
        self.assertEqual(status, 200)
        status, payload = self.s.request("GET", "/metrics")
        self.assertEqual(status, 200)
        samples = {line.split("{")[0].split(" ")[0] for line in payload.decode().splitlines()
                   if line.startswith("vllm:")}
        suffixes = {"counter": ["_total"], "gauge": [""], "histogram": ["_bucket", "_sum", "_count"]}
        expected = {f + x: f for f, kind in VLLM_V1_METRICS.items() for x in suffixes[kind]}
        self.assertTrue(samples, "no vllm:* series")
        self.assertEqual(sorted(samples - set(expected)), [], "vllm:* series vLLM v1 does not export")
        exported = {expected[n] for n in samples}
        m = self.s.metrics()
        for family in ("vllm:request_prefill_time_seconds", "vllm:request_decode_time_seconds",
                       "vllm:request_inference_time_seconds", "vllm:request_params_max_tokens"):
            self.assertGreaterEqual(metric(m, family + "_count"), 1, family)
        with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "docs", "serving.md")) as f:
            docs = f.read().split("### Metrics vLLM has that we do not export", 1)
        self.assertEqual(len(docs), 2, "docs/serving.md lost its section of missing vLLM metrics")
        section = docs[1].split("\n#", 1)[0]
        missing = [f for f in VLLM_V1_METRICS if f not in exported and f"`{f}`" not in section]
        self.assertEqual(missing, [], "vLLM metrics neither exported nor explained in docs/serving.md")

    def test_greedy_completion_equals_generate(self):
        prompt = "The capital of France is"
        status, r = self.s.json("POST", "/v1/completions", {"model": "tiny", "prompt": prompt, "max_tokens": 12, "temperature": 0})
        self.assertEqual(status, 200, r)
        self.assertEqual(r["object"], "text_completion")
        self.assertTrue(r["id"].startswith("cmpl-"))
        c = r["choices"][0]
        self.assertEqual(set(c), {"index", "text", "logprobs", "finish_reason", "stop_reason"})
        out = subprocess.run([ARGS.moeserve, "generate", "--model", ARGS.model, "--prompt", prompt,
                              "--max-tokens", "12", "--threads", "1"], capture_output=True, timeout=60, check=True)
        generated = out.stdout.decode()[len(prompt):-1]  # generate prints prompt + text + "\n"
        self.assertEqual(c["text"], generated)
        u = r["usage"]
        self.assertEqual(u["total_tokens"], u["prompt_tokens"] + u["completion_tokens"])
        self.assertEqual(u["completion_tokens"], 12 if c["finish_reason"] == "length" else u["completion_tokens"])

    def test_stream_concatenates_to_non_streamed(self):
        body = {"prompt": "Once upon a time", "max_tokens": 16, "temperature": 0, "ignore_eos": True}
        _, full = self.s.json("POST", "/v1/completions", body)
        events = self.s.stream("/v1/completions", {**body, "stream": True, "stream_options": {"include_usage": True}})
        self.assertEqual(events[-1], "[DONE]")
        chunks = [json.loads(e) for e in events[:-1]]
        usage = chunks[-1]
        self.assertEqual(usage["choices"], [])
        self.assertEqual(usage["usage"]["completion_tokens"], 16)
        text = "".join(ch["choices"][0]["text"] for ch in chunks[:-1])
        self.assertEqual(text, full["choices"][0]["text"])
        self.assertEqual(chunks[-2]["choices"][0]["finish_reason"], "length")

    def test_chat_stream_and_non_stream(self):
        body = {"messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}],
                "max_tokens": 10, "temperature": 0, "ignore_eos": True}
        status, r = self.s.json("POST", "/v1/chat/completions", body)
        self.assertEqual(status, 200, r)
        self.assertEqual(r["object"], "chat.completion")
        msg = r["choices"][0]["message"]
        self.assertEqual(msg["role"], "assistant")
        events = self.s.stream("/v1/chat/completions", {**body, "stream": True})
        self.assertEqual(events[-1], "[DONE]")
        chunks = [json.loads(e) for e in events[:-1]]
        self.assertEqual(chunks[0]["choices"][0]["delta"]["role"], "assistant")
        self.assertEqual(chunks[0]["object"], "chat.completion.chunk")
        self.assertEqual("".join(c["choices"][0]["delta"].get("content", "") for c in chunks), msg["content"])
        # tokenize with messages gives the chat prompt's length
        _, tok = self.s.json("POST", "/tokenize", {"messages": body["messages"]})
        self.assertEqual(tok["count"], r["usage"]["prompt_tokens"])

    def test_prompt_forms_and_n(self):
        _, tok = self.s.json("POST", "/tokenize", {"prompt": "Hello world"})
        self.assertEqual(tok["count"], len(tok["tokens"]))
        _, detok = self.s.json("POST", "/detokenize", {"tokens": tok["tokens"]})
        self.assertEqual(detok["prompt"], "Hello world")
        base = {"max_tokens": 4, "temperature": 0, "ignore_eos": True}
        _, a = self.s.json("POST", "/v1/completions", {**base, "prompt": "Hello world"})
        _, b = self.s.json("POST", "/v1/completions", {**base, "prompt": tok["tokens"]})
        self.assertEqual(a["choices"][0]["text"], b["choices"][0]["text"])
        _, c = self.s.json("POST", "/v1/completions", {**base, "prompt": ["Hello world", "Bye"]})
        self.assertEqual([x["index"] for x in c["choices"]], [0, 1])
        self.assertEqual(c["choices"][0]["text"], a["choices"][0]["text"])
        _, d = self.s.json("POST", "/v1/completions", {**base, "prompt": [tok["tokens"], tok["tokens"]], "n": 2})
        self.assertEqual(len(d["choices"]), 4)
        self.assertEqual({x["text"] for x in d["choices"]}, {a["choices"][0]["text"]})
        self.assertEqual(d["usage"]["completion_tokens"], 16)

    def test_logprobs(self):
        _, r = self.s.json("POST", "/v1/completions", {"prompt": "Hello", "max_tokens": 3, "temperature": 0, "logprobs": 2, "ignore_eos": True})
        lp = r["choices"][0]["logprobs"]
        self.assertEqual(set(lp), {"tokens", "token_logprobs", "top_logprobs", "text_offset"})
        self.assertEqual(len(lp["tokens"]), 3)
        self.assertEqual(len(lp["top_logprobs"][0]), 2)
        self.assertEqual("".join(lp["tokens"]), r["choices"][0]["text"])
        _, c = self.s.json("POST", "/v1/chat/completions", {"messages": [{"role": "user", "content": "x"}], "max_tokens": 2,
                                                            "logprobs": True, "top_logprobs": 3, "ignore_eos": True})
        content = c["choices"][0]["logprobs"]["content"]
        self.assertEqual(len(content), 2)
        self.assertEqual(set(content[0]), {"token", "logprob", "bytes", "top_logprobs"})
        self.assertEqual(len(content[0]["top_logprobs"]), 3)

    def test_stop_string(self):
        body = {"prompt": "Once upon a time", "max_tokens": 16, "temperature": 0, "ignore_eos": True}
        _, full = self.s.json("POST", "/v1/completions", body)
        text = full["choices"][0]["text"]
        stop = text[len(text) // 2:len(text) // 2 + 2]
        _, r = self.s.json("POST", "/v1/completions", {**body, "stop": [stop]})
        c = r["choices"][0]
        self.assertEqual(c["finish_reason"], "stop")
        self.assertEqual(c["stop_reason"], stop)
        self.assertEqual(c["text"], text[:text.find(stop)])
        _, r = self.s.json("POST", "/v1/completions", {**body, "stop": stop, "include_stop_str_in_output": True})
        self.assertEqual(r["choices"][0]["text"], text[:text.find(stop) + len(stop)])

    def test_seeded_sampling_is_reproducible(self):
        body = {"prompt": "Hello", "max_tokens": 8, "temperature": 1.0, "seed": 123, "ignore_eos": True, "top_k": 50, "min_p": 0.01}
        _, a = self.s.json("POST", "/v1/completions", body)
        _, b = self.s.json("POST", "/v1/completions", body)
        self.assertEqual(a["choices"][0]["text"], b["choices"][0]["text"])


class Errors(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.s = Server("--max-request-body-bytes", "4096")

    @classmethod
    def tearDownClass(cls):
        assert cls.s.stop() == 0

    def check(self, body, status, param=None, path="/v1/completions", raw=None):
        code, payload = self.s.request("POST", path, body, raw=raw)
        err = json.loads(payload)
        assert_error_shape(self, code, err, status)
        if param:
            self.assertEqual(err["error"]["param"], param)
        return err

    def test_invalid_params(self):
        ok = {"prompt": "hi", "max_tokens": 2}
        self.check({**ok, "max_tokens": "x"}, 400, "max_tokens")
        self.check({**ok, "max_tokens": 0}, 400, "max_tokens")
        self.check({**ok, "temperature": -1}, 400, "temperature")
        self.check({**ok, "top_p": 0}, 400, "top_p")
        self.check({**ok, "n": 0}, 400, "n")
        self.check({**ok, "logprobs": 50}, 400, "logprobs")
        self.check({**ok, "stop": 5}, 400, "stop")
        self.check({**ok, "logit_bias": "xx"}, 400, "logit_bias")
        self.check({**ok, "logit_bias": {"7": "x"}}, 400, "logit_bias")
        self.check({**ok, "prompt": []}, 400, "prompt")
        self.check({**ok, "prompt": [1, 10**9]}, 400, "prompt")
        self.check({"max_tokens": 2}, 400, "prompt")
        self.check({**ok, "prompt": "word " * 600}, 400, "prompt")
        self.check({**ok, "max_tokens": 10000}, 400, "prompt")
        self.check({"messages": "hi"}, 400, "messages", path="/v1/chat/completions")
        self.check({"messages": [{"role": "wizard", "content": "x"}]}, 400, "messages", path="/v1/chat/completions")
        self.check({"messages": [{"role": "user", "content": "x"}], "top_logprobs": 2}, 400, "top_logprobs", path="/v1/chat/completions")
        self.check(None, 400, raw="{not json")
        self.check(None, 400, raw="[1, 2]")
        self.check(None, 400, raw="[" * 3000)

    def test_not_found_unauthorized_too_large(self):
        err = self.check({"model": "gpt-4", "prompt": "hi"}, 404, "model")
        self.assertEqual(err["error"]["code"], "model_not_found")
        status, body = self.s.json("GET", "/v1/nothing")
        assert_error_shape(self, status, body, 404)
        status, body = self.s.json("GET", "/v1/completions")
        assert_error_shape(self, status, body, 405)
        status, body = self.s.json("POST", "/v1/completions", {"prompt": "hi"}, auth=False)
        assert_error_shape(self, status, body, 401)
        self.assertEqual(self.s.request("GET", "/health", auth=False)[0], 200)
        self.check(None, 413, raw=json.dumps({"prompt": "x" * 10000}))
        # the server is still fine afterwards
        status, r = self.s.json("POST", "/v1/completions", {"prompt": "hi", "max_tokens": 2})
        self.assertEqual(status, 200, r)


class Lifecycle(unittest.TestCase):
    def test_disconnect_aborts_and_frees_blocks(self):
        s = Server()
        try:
            c = s.conn()
            c.request("POST", "/v1/completions", body=json.dumps({"prompt": "Hello", "max_tokens": 400, "ignore_eos": True, "stream": True}),
                      headers=s.headers())
            r = c.getresponse()
            self.assertEqual(r.status, 200)
            self.assertTrue(r.read(6).startswith(b"data: "))
            c.sock.shutdown(socket.SHUT_RDWR)
            c.close()
            deadline = time.time() + 15
            while time.time() < deadline:
                m = s.metrics()
                if metric(m, 'vllm:request_success_total{model_name="tiny",finished_reason="abort"}') == 1 \
                        and metric(m, "vllm:kv_cache_usage_perc") == 0 and metric(m, "vllm:num_requests_running") == 0:
                    break
                time.sleep(0.1)
            self.assertEqual(metric(m, 'vllm:request_success_total{model_name="tiny",finished_reason="abort"}'), 1)
            self.assertEqual(metric(m, "vllm:kv_cache_usage_perc"), 0)
            self.assertEqual(metric(m, "vllm:num_requests_running"), 0)
            self.assertLess(metric(m, "vllm:generation_tokens_total"), 400)
        finally:
            self.assertEqual(s.stop(), 0)

    def test_sigterm_drains_and_exits_zero(self):
        s = Server()
        c = s.conn()
        c.request("POST", "/v1/completions", body=json.dumps({"prompt": "Hello", "max_tokens": 64, "ignore_eos": True, "stream": True}),
                  headers=s.headers())
        r = c.getresponse()
        s.proc.send_signal(signal.SIGTERM)
        body = r.read().decode()  # the in-flight stream completes
        self.assertTrue(body.rstrip().endswith("data: [DONE]"), body[-200:])
        self.assertEqual(s.proc.wait(30), 0)

    def test_killed_rank_fails_requests_and_health(self):
        """Without self-healing (--max-rank-restarts 0): the stream ends with an error, then /health
        and new requests are 503 for good."""
        s = Server("--max-rank-restarts", "0")
        try:
            r = self.running_stream(s)
            os.kill(s.rank_pid(), signal.SIGKILL)
            body = r.read().decode()  # ends (error event + [DONE]), does not hang
            self.assertIn('"error"', body)
            self.assertTrue(body.rstrip().endswith("data: [DONE]"))
            deadline = time.time() + 10
            while s.request("GET", "/health")[0] != 503 and time.time() < deadline:
                time.sleep(0.05)
            self.assertEqual(s.request("GET", "/health")[0], 503)
            status, err = s.json("POST", "/v1/completions", {"prompt": "hi", "max_tokens": 2})
            assert_error_shape(self, status, err, 503)
        finally:
            self.assertEqual(s.stop(), 0)

    def test_killed_rank_is_restarted(self):
        """Self-healing (the default) with one rank: the stream ends with an error, the rank process
        is started again, and the server answers again, the same text as before."""
        s = Server()
        try:
            status, before = s.json("POST", "/v1/completions", {"prompt": "Hello", "max_tokens": 8, "temperature": 0})
            self.assertEqual(status, 200, before)
            r = self.running_stream(s)
            os.kill(s.rank_pid(), signal.SIGKILL)
            body = r.read().decode()
            self.assertIn('"error"', body)
            self.assertTrue(body.rstrip().endswith("data: [DONE]"))
            deadline = time.time() + 60
            while s.request("GET", "/health")[0] != 200 and time.time() < deadline:
                time.sleep(0.1)
            self.assertEqual(s.request("GET", "/health")[0], 200)
            status, after = s.json("POST", "/v1/completions", {"prompt": "Hello", "max_tokens": 8, "temperature": 0})
            self.assertEqual(status, 200, after)
            self.assertEqual(after["choices"][0]["text"], before["choices"][0]["text"])
        finally:
            self.assertEqual(s.stop(), 0)

    def running_stream(self, s):
        """The response of a long stream, known to be running (its first event read)."""
        c = s.conn()
        c.request("POST", "/v1/completions", body=json.dumps({"prompt": "Hello", "max_tokens": 500, "ignore_eos": True, "stream": True}),
                  headers=s.headers())
        r = c.getresponse()
        self.assertTrue(r.read(6).startswith(b"data: "))
        return r


class Load(unittest.TestCase):
    def test_thousand_concurrent_streams(self):
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, min(hard, 4096)), hard))
        s = Server("--max-num-seqs", "256")
        n = int(os.environ.get("MOESERVE_LOAD_CLIENTS", "1000"))
        body = json.dumps({"prompt": "Hi", "max_tokens": 2, "ignore_eos": True, "stream": True}).encode()

        async def one(i):
            reader, writer = await asyncio.open_connection("127.0.0.1", s.port)
            writer.write(b"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                         b"Authorization: Bearer " + API_KEY.encode() + b"\r\nConnection: close\r\n"
                         b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)
            await writer.drain()
            data = await reader.read()
            writer.close()
            return b"data: [DONE]" in data

        async def all_of_them():
            return await asyncio.wait_for(asyncio.gather(*(one(i) for i in range(n))), timeout=90)

        try:
            start = time.time()
            results = asyncio.run(all_of_them())
            elapsed = time.time() - start
            self.assertEqual(sum(results), n)
            print(f"\n{n} concurrent streams done in {elapsed:.2f} s ({n / elapsed:.0f} req/s)", file=sys.stderr)
        finally:
            self.assertEqual(s.stop(), 0)


if __name__ == "__main__":
    p = argparse.ArgumentParser()
    p.add_argument("--moeserve", required=True)
    p.add_argument("--model", required=True)
    p.add_argument("--suite", choices=["api", "errors", "lifecycle", "load", "all"], default="all")
    ARGS, rest = p.parse_known_args()
    suites = {"api": Api, "errors": Errors, "lifecycle": Lifecycle, "load": Load}
    loader = unittest.TestLoader()
    chosen = suites.values() if ARGS.suite == "all" else [suites[ARGS.suite]]
    suite = unittest.TestSuite(loader.loadTestsFromTestCase(c) for c in chosen)
    result = unittest.TextTestRunner(verbosity=2).run(suite)
    sys.exit(0 if result.wasSuccessful() else 1)
