#!/usr/bin/python3
"""PD disaggregation end to end: `moeserve proxy` in front of prefill (kv_producer) and decode
(kv_consumer) instances of `moeserve serve` (stdlib only; every wait bounded).

Suites (one CTest each):
  equal   proxy + 1 prefill + 1 decode: greedy outputs == one instance, for Qwen3-MoE and DeepSeek-V3
          (tiny): concurrent completions, a prompt long enough for chunked prefill on the prefill
          side, a repeated prompt (prefix hit on the decode side: it fetches only what it lacks),
          n > 1, chat streaming; /metrics of both roles count the transfers
  multi   2 prefill + 2 decode instances, uneven prompts at once: outputs equal, every instance used
  netns   prefill + proxy in one network namespace, decode in another (veth, 10.202.x.{1,2}); the
          KV crosses over TCP between the namespaces' addresses (skipped if not permitted)
  forged  kv_transfer_params a client made up (other endpoints, tokens, ids): 400, and the decode rank's
          descriptors and threads stay flat over 3,000 of them; the proxy's access policy (403, 415, 401)
  chaos   the hardening chaos through a PD pair and its proxy: a disconnect storm, forged transfers,
          paused prefill ranks; then nothing held on either side, everything alive, outputs equal
  spec    the decode instance drafts (--speculative-config ngram on the trained Qwen3-MoE KJV model,
          deepseek_mtp on the DeepSeek one): greedy outputs == one instance without speculation,
          drafts accepted on the decode side
  faults  a prefill instance stopped (SIGSTOP) before its KV is fetched: the decode fails that
          request within its timeout; the proxy then serves from the other prefill instance; a decode
          instance killed mid-stream ends the client's stream with an error event, and the next
          request goes to the surviving decode instance
  families  issue 35's tiny models (--family-models: Mixtral, Qwen2-MoE, GLM-4.5, Kimi-K2) through a
          proxy, a prefill and a decode instance: greedy outputs == one instance, every prompt's KV
          fetched by the decode side
"""
import argparse
import asyncio
import concurrent.futures
import http.client
import json
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time
import unittest
import harness

from harness import child_with, netns_request, parse_metrics, sh, stop_process

ARGS = None
TIMEOUT = 60  # seconds for any single HTTP exchange
KEY = "integration-test-pd-rank-plane-key-0123456789"  # instances of one PD deployment share it
COMMON = ["--threads", "1", "--served-model-name", "tiny", "--max-model-len", "512", "--kv-cache-memory", "32M",
          "--max-num-seqs", "8"]
PROMPTS = ["The capital of France is", "Hello", "Once upon a time there was a", "1 2 3 4 5", "def main():"]
LONG = " ".join(["the quick brown fox jumps over the lazy dog"] * 12)  # ~110 tokens: several prefill chunks


def kv_config(role, timeout_ms=5000, ip="127.0.0.1", hold_ms=None):
    extra = {"timeout_ms": timeout_ms, **({"hold_ms": hold_ms} if hold_ms else {})}
    return json.dumps({"kv_connector": "MoeserveConnector", "kv_role": role, "kv_ip": ip,
                       "kv_connector_extra_config": extra})


class Proc:
    """A moeserve process that reports "listening on http://HOST:PORT " and answers /health."""

    def __init__(self, cmd, host="127.0.0.1", prefix=()):
        self.host, self.port, self.prefix = host, None, prefix
        self.log = harness.child_log()
        self.proc = subprocess.Popen([*prefix, *cmd], stdout=subprocess.DEVNULL, stderr=self.log,
                                     env={**os.environ, "MOESERVE_RANK_PLANE_KEY": KEY})

    def log_text(self):
        self.log.seek(0)
        return self.log.read().decode(errors="replace")

    def wait_healthy(self, timeout=60):
        deadline = time.time() + timeout
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError("exited: " + self.log_text()[-3000:])
            if self.port is None:
                m = re.search(r"listening on http://\S+?:(\d+) ", self.log_text())
                if m is None:
                    time.sleep(0.05)
                    continue
                self.port = int(m.group(1))
            try:
                if self.request("GET", "/health")[0] == 200:
                    return self
            except OSError:
                pass
            time.sleep(0.1)
        self.proc.kill()
        raise RuntimeError("not healthy within %d s: %s" % (timeout, self.log_text()[-3000:]))

    @property
    def url(self):
        return "http://%s:%d" % (self.host, self.port)

    def request(self, method, path, body=None):
        if self.prefix:
            return netns_request(self.prefix, self.host, self.port, method, path, body, TIMEOUT)
        c = http.client.HTTPConnection(self.host, self.port, timeout=TIMEOUT)
        c.request(method, path, body=json.dumps(body) if body is not None else None,
                  headers={"Content-Type": "application/json"})
        r = c.getresponse()
        payload = r.read()
        c.close()
        return r.status, payload

    def post(self, path, body):
        status, payload = self.request("POST", path, body)
        assert status == 200, (status, payload)
        return json.loads(payload)

    def metrics(self):
        status, payload = self.request("GET", "/metrics")
        assert status == 200
        return parse_metrics(payload)

    def stop(self, timeout=30):
        return stop_process(self.proc, signal.SIGTERM, timeout)

    def rank_pids(self):
        with open(f"/proc/{self.proc.pid}/task/{self.proc.pid}/children") as f:
            return [int(p) for p in f.read().split()]



def serve(model, *extra, host="127.0.0.1", prefix=()):
    return Proc([ARGS.moeserve, "serve", "--model", model, "--host", host, "--port", "0", *COMMON, *extra],
                host=host, prefix=prefix)


def proxy(prefills, decodes, *extra, host="127.0.0.1", prefix=()):
    cmd = [ARGS.moeserve, "proxy", "--host", host, "--port", "0", "--down-ms", "30000", *extra, "--prefill",
           *[p.url for p in prefills], "--decode", *[d.url for d in decodes]]
    return Proc(cmd, host=host, prefix=prefix)


def started(*procs):
    for p in procs:
        p.wait_healthy()
    return procs


def completion(prompt, max_tokens=8, **extra):
    return {"prompt": prompt, "max_tokens": max_tokens, "temperature": 0, "ignore_eos": True, **extra}


def texts(server, bodies):
    with concurrent.futures.ThreadPoolExecutor(len(bodies)) as pool:
        answers = list(pool.map(lambda b: server.post("/v1/completions", b), bodies))
    return [[c["text"] for c in a["choices"]] for a in answers]


def stream_chat(server, body):
    """The content of a streamed chat answer per choice index."""
    c = http.client.HTTPConnection(server.host, server.port, timeout=TIMEOUT)
    c.request("POST", "/v1/chat/completions", body=json.dumps({**body, "stream": True}),
              headers={"Content-Type": "application/json"})
    r = c.getresponse()
    assert r.status == 200, r.read()
    out = {}
    for line in r.read().decode().splitlines():
        if line.startswith("data: ") and line != "data: [DONE]":
            for ch in json.loads(line[6:])["choices"]:
                out[ch["index"]] = out.get(ch["index"], "") + (ch["delta"].get("content") or "")
    c.close()
    return out


def family(m, name, **labels):
    return sum(v for k, v in m.items() if k.startswith(name + "{") and all(f'{a}="{b}"' in k for a, b in labels.items()))


class Disaggregated(unittest.TestCase):
    def check_equal(self, model):
        single = serve(model)
        prefill = serve(model, "--kv-transfer-config", kv_config("kv_producer"), "--max-num-batched-tokens", "32")
        decode = serve(model, "--kv-transfer-config", kv_config("kv_consumer"))
        started(single, prefill, decode)
        front = proxy([prefill], [decode]).wait_healthy()
        try:
            bodies = [completion(p) for p in PROMPTS] + [completion(LONG, 6), completion("Hello", 5, n=3)]
            want = texts(single, bodies)
            self.assertEqual(texts(front, bodies), want)
            # The long prompt again: the decode instance has its full blocks cached from the first
            # time and fetches only the last one.
            before = family(decode.metrics(), "moeserve:kv_transfer_bytes_total", role="consumer")
            self.assertEqual(texts(front, [completion(LONG, 6)]), [want[len(PROMPTS)]])
            fetched = family(decode.metrics(), "moeserve:kv_transfer_bytes_total", role="consumer") - before
            sent_all = family(prefill.metrics(), "moeserve:kv_transfer_bytes_total", role="producer")
            self.assertGreater(fetched, 0)
            self.assertLess(fetched * 4, sent_all)  # a fraction of what a full prompt's KV is
            chat = {"messages": [{"role": "user", "content": "Say hi"}], "max_tokens": 6, "temperature": 0, "n": 2}
            self.assertEqual(stream_chat(front, chat), stream_chat(single, chat))
            pm, dm = prefill.metrics(), decode.metrics()
            self.assertGreaterEqual(family(pm, "moeserve:kv_transfers_total", role="producer"), 10)
            self.assertGreaterEqual(family(dm, "moeserve:kv_transfers_total", role="consumer"), 10)
            self.assertEqual(family(dm, "moeserve:kv_transfer_failures_total", role="consumer"), 0)
            # The decode instance computed no prompt token: every prompt's KV came from the prefill.
            self.assertEqual(family(dm, "vllm:prompt_tokens_total"), 0)
            self.assertGreater(family(pm, "vllm:prompt_tokens_total"), 0)
            self.check_bench_breakdown(model, front, prefill, decode)
            fm = front.metrics()  # the proxy's own split of each request's time
            self.assertGreater(fm["moeserve:proxy_prefills_total"], 0)
            self.assertEqual(fm["moeserve:proxy_decodes_total"], fm["moeserve:proxy_prefills_total"])
            self.assertGreater(fm["moeserve:proxy_prefill_seconds_total"], 0)
            self.assertGreater(fm["moeserve:proxy_decode_first_byte_seconds_total"], 0)
            # A request asking the decode instance for a prefill is refused in the OpenAI shape.
            status, payload = decode.request("POST", "/v1/completions",
                                             {**completion("x"), "kv_transfer_params": {"do_remote_decode": True}})
            self.assertEqual(status, 400, payload)
            self.assertIn("kv_producer", json.loads(payload)["error"]["message"])
        finally:
            for p in (front, single, prefill, decode):
                p.stop()

    def check_bench_breakdown(self, model, front, prefill, decode):
        """`bench serve` through the proxy breaks the TTFT down from the instances' /metrics."""
        with tempfile.TemporaryDirectory() as out:
            run = subprocess.run([ARGS.moeserve, "bench", "serve", "--base-url", front.url, "--model", model,
                                  "--served-model-name", "tiny", "--num-prompts", "4", "--random-input-len", "40",
                                  "--random-output-len", "4", "--ignore-eos", "--disable-tqdm", "--save-result",
                                  "--result-dir", out, "--result-filename", "r.json", "--pd-prefill-url", prefill.url,
                                  "--pd-decode-url", decode.url], capture_output=True, text=True, timeout=120)
            self.assertEqual(run.returncode, 0, run.stderr)
            self.assertIn("PD TTFT breakdown", run.stdout)
            with open(os.path.join(out, "r.json")) as f:
                b = json.load(f)["pd_ttft_breakdown"]
        self.assertEqual((b["prefills"], b["kv_transfers"]), (4, 4), b)
        self.assertGreater(b["prefill_ms"], 0, b)
        self.assertGreater(b["kv_bytes_per_transfer"], 0, b)
        self.assertGreaterEqual(b["kv_wait_ms"], b["kv_fetch_ms"], b)

    def test_equal_qwen3(self):
        self.check_equal(ARGS.model)

    def test_equal_deepseek(self):
        self.check_equal(ARGS.deepseek_model)

    def test_families(self):
        for model in ARGS.family_models:
            with self.subTest(model=os.path.basename(model)):
                single = serve(model)
                prefill = serve(model, "--kv-transfer-config", kv_config("kv_producer"))
                decode = serve(model, "--kv-transfer-config", kv_config("kv_consumer"))
                started(single, prefill, decode)
                front = proxy([prefill], [decode]).wait_healthy()
                try:
                    bodies = [completion(p) for p in PROMPTS]
                    self.assertEqual(texts(front, bodies), texts(single, bodies))
                    dm = decode.metrics()
                    self.assertGreaterEqual(family(dm, "moeserve:kv_transfers_total", role="consumer"), len(PROMPTS))
                    self.assertEqual(family(dm, "vllm:prompt_tokens_total"), 0)
                finally:
                    for proc in (front, single, prefill, decode):
                        proc.stop()

    def test_speculative_decode(self):
        models = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "models")
        # "adaptive": false: every decode drafts. The adaptive budget may choose 0 drafts from the step
        # times it measures (on a loaded machine it did), and then no draft is accepted to count.
        ngram = ('{"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_max": 3, "prompt_lookup_min": 1, '
                 '"adaptive": false}')
        mtp = '{"method": "deepseek_mtp", "num_speculative_tokens": 1, "adaptive": false}'
        # n-gram drafts; DeepSeek's MTP layer, whose K/V travel with the prompt's blocks
        for name, spec in (("qwen3-moe-kjv", ngram), ("deepseek-v3-kjv", mtp)):
            with self.subTest(model=name):
                self.check_speculative_pair(os.path.join(models, name), spec)

    def check_speculative_pair(self, model, spec):
        single = serve(model)
        prefill = serve(model, "--kv-transfer-config", kv_config("kv_producer"), "--speculative-config", spec)
        decode = serve(model, "--kv-transfer-config", kv_config("kv_consumer"), "--speculative-config", spec)
        started(single, prefill, decode)
        front = proxy([prefill], [decode]).wait_healthy()
        try:
            bodies = [completion(p, 32) for p in ("And God said, Let there be light", "The LORD is my shepherd",
                                                   "In the beginning God created the heaven and the earth")]
            self.assertEqual(texts(front, bodies), texts(single, bodies))
            self.assertGreater(family(decode.metrics(), "vllm:spec_decode_num_accepted_tokens_total"), 0)
        finally:
            for p in (front, single, prefill, decode):
                p.stop()

    def test_multi(self):
        single = serve(ARGS.model)
        ps = [serve(ARGS.model, "--kv-transfer-config", kv_config("kv_producer")) for _ in range(2)]
        ds = [serve(ARGS.model, "--kv-transfer-config", kv_config("kv_consumer")) for _ in range(2)]
        started(single, *ps, *ds)
        front = proxy(ps, ds).wait_healthy()
        try:
            bodies = [completion(LONG if i % 3 == 0 else PROMPTS[i % len(PROMPTS)], 4 + i % 5) for i in range(12)]
            self.assertEqual(texts(front, bodies), texts(single, bodies))
            for inst in ps + ds:
                self.assertGreater(family(inst.metrics(), "vllm:request_success_total"), 0, inst.url)
        finally:
            for p in (front, single, *ps, *ds):
                p.stop()

    def test_faults(self):
        ps = [serve(ARGS.model, "--kv-transfer-config", kv_config("kv_producer")) for _ in range(2)]
        # A step watchdog far below the fetch timeout: a request waiting for its KV is not a stuck step.
        ds = [serve(ARGS.model, "--kv-transfer-config", kv_config("kv_consumer", timeout_ms=2000),
                    "--step-watchdog-timeout", "0.3") for _ in range(2)]
        started(*ps, *ds)
        front = proxy(ps, ds).wait_healthy()
        try:
            # 1. The prefill instance stops after the prefill, before its KV is fetched.
            pre = ps[0].post("/v1/completions", {**completion("Hello", 1), "kv_transfer_params": {"do_remote_decode": True}})
            for pid in ps[0].rank_pids():
                os.kill(pid, signal.SIGSTOP)
            start = time.time()
            with concurrent.futures.ThreadPoolExecutor(1) as pool:
                pending = pool.submit(ds[0].request, "POST", "/v1/completions",
                                      {**completion("Hello", 8), "kv_transfer_params": pre["kv_transfer_params"]})
                health = []
                while not pending.done() and len(health) < 100:  # /health while the fetch waits
                    health.append(ds[0].request("GET", "/health")[0])
                    time.sleep(0.05)
                status, payload = pending.result()
            self.assertGreater(len(health), 10)
            self.assertEqual(set(health), {200}, str(health) + ds[0].log_text()[-6000:])
            self.assertGreaterEqual(status, 500, payload)
            self.assertIn("nothing arrived for 2000 ms", json.loads(payload)["error"]["message"])
            self.assertLess(time.time() - start, 20)
            ps[0].proc.kill()  # the API server; its ranks die with it
            for pid in ps[0].rank_pids() if ps[0].proc.poll() is None else []:
                os.kill(pid, signal.SIGKILL)
            ps[0].proc.wait(10)
            # The survivors serve: the proxy skips the dead prefill instance.
            self.assertEqual(len(texts(front, [completion(p) for p in PROMPTS[:3]])), 3)
            # 2. A decode instance dies mid-stream.
            c = http.client.HTTPConnection(front.host, front.port, timeout=TIMEOUT)
            c.request("POST", "/v1/completions", body=json.dumps({**completion(LONG, 400), "stream": True}),
                      headers={"Content-Type": "application/json"})
            r = c.getresponse()
            self.assertEqual(r.status, 200)
            first = r.readline()
            while not first.startswith(b"data: "):
                first = r.readline()
            busy = [d for d in ds if family(d.metrics(), "vllm:num_requests_running") > 0]
            self.assertEqual(len(busy), 1)
            start = time.time()
            for pid in busy[0].rank_pids():
                os.kill(pid, signal.SIGKILL)
            busy[0].proc.kill()
            rest = r.read().decode()  # ends: the proxy closes the stream with an error event
            c.close()
            self.assertLess(time.time() - start, 30)
            self.assertIn('"error"', rest)
            self.assertTrue(rest.rstrip().endswith("data: [DONE]"), rest[-300:])
            survivor = [d for d in ds if d is not busy[0]][0]
            before = family(survivor.metrics(), "vllm:request_success_total")
            self.assertEqual(len(texts(front, [completion("Hello", 4)])), 1)
            self.assertGreater(family(survivor.metrics(), "vllm:request_success_total"), before)
        finally:
            for p in (front, *ps, *ds):
                if p.proc.poll() is None:
                    p.stop()


    def test_forged_transfers(self):
        """kv_transfer_params a client made up: refused with 400 before anything is dialled, and
        3,000 distinct endpoints leave the decode rank's descriptors and threads flat."""
        prefill = serve(ARGS.model, "--kv-transfer-config", kv_config("kv_producer"))
        decode = serve(ARGS.model, "--kv-transfer-config", kv_config("kv_consumer"))
        started(prefill, decode)
        try:
            pre = prefill.post("/v1/completions", {**completion("Hello", 1), "kv_transfer_params": {"do_remote_decode": True}})
            real = pre["kv_transfer_params"]["transfers"][0]
            self.assertRegex(real["token"], "^[0-9a-f]{64}$")
            rank = decode.rank_pids()[0]

            def counts():
                return len(os.listdir(f"/proc/{rank}/fd")), len(os.listdir(f"/proc/{rank}/task"))

            before = counts()
            port = real["endpoint"].rsplit(":", 1)[1]
            forged = [{**real, "endpoint": "tcp://127.0.0.1:" + "0" * (i % 9) + port + "/" * (i // 9)} for i in range(1, 3001)]
            forged += [{**real, "token": "0" * 64}, {**real, "id": real["id"] + "x"}, {k: real[k] for k in ("endpoint", "id")}]
            for i, t in enumerate(forged):
                status, payload = decode.request("POST", "/v1/completions", {
                    **completion("Hello", 2), "kv_transfer_params": {"do_remote_prefill": True, "transfers": [t]}})
                self.assertEqual(status, 400, (i, payload))
                self.assertEqual(json.loads(payload)["error"]["param"], "kv_transfer_params")
            after = counts()
            self.assertLessEqual(after[0], before[0] + 4, (before, after))
            self.assertLessEqual(after[1], before[1] + 2, (before, after))
            # The real answer, unchanged, still decodes.
            out = decode.post("/v1/completions", {**completion("Hello", 4), "kv_transfer_params": pre["kv_transfer_params"]})
            self.assertEqual(out["choices"][0]["finish_reason"], "length")
        finally:
            for p in (prefill, decode):
                p.stop()

    def test_proxy_access_policy(self):
        """The proxy refuses what `serve` refuses (hardening 2, item 4): cross-site and DNS-rebinding
        requests, form and text bodies, /metrics for a foreign Host, and clients without its key,
        the body unread (answered while the client still has 15 MB to send)."""
        prefill = serve(ARGS.model, "--kv-transfer-config", kv_config("kv_producer"))
        decode = serve(ARGS.model, "--kv-transfer-config", kv_config("kv_consumer"))
        started(prefill, decode)
        open_front = proxy([prefill], [decode]).wait_healthy()
        keyed = proxy([prefill], [decode], "--api-key", "proxy-key-1").wait_healthy()
        try:
            body = json.dumps(completion("Hello", 2)).encode()

            def raw(port, method, path, headers, payload=b""):
                c = http.client.HTTPConnection("127.0.0.1", port, timeout=TIMEOUT)
                c.request(method, path, body=payload or None, headers=headers)
                r = c.getresponse()
                out = (r.status, r.read())
                c.close()
                return out

            json_ct = {"Content-Type": "application/json"}
            for headers, path, payload, want in [
                ({"Content-Type": "text/plain"}, "/v1/completions", body, 415),
                ({"Content-Type": "application/x-www-form-urlencoded"}, "/v1/completions", body, 415),
                ({**json_ct, "Origin": "http://evil.example"}, "/v1/completions", body, 403),
                ({**json_ct, "Host": "evil.example"}, "/v1/completions", body, 403),
                ({"Host": "evil.example"}, "/metrics", b"", 403),
            ]:
                status, payload_out = raw(open_front.port, "POST" if payload else "GET", path, headers, payload)
                self.assertEqual(status, want, (headers, path, payload_out))
            self.assertEqual(raw(open_front.port, "POST", "/v1/completions", json_ct, body)[0], 200)
            self.assertEqual(raw(open_front.port, "GET", "/metrics", {})[0], 200)
            # The keyed proxy: 401 without the key, decided from the headers alone.
            self.assertEqual(raw(keyed.port, "POST", "/v1/completions", json_ct, body)[0], 401)
            self.assertEqual(raw(keyed.port, "POST", "/v1/completions", {**json_ct, "Authorization": "Bearer proxy-key-1"},
                                 body)[0], 200)
            with socket.create_connection(("127.0.0.1", keyed.port), timeout=TIMEOUT) as c:
                c.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                          b"Content-Length: 15000000\r\n\r\n" + b" " * 65536)
                c.settimeout(10)
                self.assertTrue(c.recv(4096).startswith(b"HTTP/1.1 401"))
        finally:
            for p in (open_front, keyed, prefill, decode):
                p.stop()


    def test_chaos(self):
        """The hardening chaos, through a PD pair and its proxy (hardening 2): a disconnect storm of
        streams through the proxy, forged transfers straight at the decode instance, the prefill
        ranks paused with requests in flight. Then nothing is left: no request running or waiting,
        no KV block held on either side (a transfer nobody fetched expires), the proxy and both
        instances alive, and a request through the proxy decodes as one instance would."""
        from hardening_test import disconnect_storm  # the same storm the single-instance chaos runs
        single = serve(ARGS.model)
        # Streams the storm cut after their prefill leave transfers nobody fetches: held for 3 s.
        prefill = serve(ARGS.model, "--kv-transfer-config", kv_config("kv_producer", timeout_ms=2000, hold_ms=3000))
        decode = serve(ARGS.model, "--kv-transfer-config", kv_config("kv_consumer", timeout_ms=2000))
        started(single, prefill, decode)
        front = proxy([prefill], [decode]).wait_healthy()
        procs = (front, single, prefill, decode)
        try:
            want = texts(single, [completion("Hello", 6)])
            asyncio.run(disconnect_storm(front.port, 200, 1.0, 11))
            pre = prefill.post("/v1/completions", {**completion("Hello", 1), "kv_transfer_params": {"do_remote_decode": True}})
            real = pre["kv_transfer_params"]["transfers"][0]
            for forged in ({**real, "token": "f" * 64}, {**real, "endpoint": "tcp://127.0.0.1:1"}):
                status, _ = decode.request("POST", "/v1/completions", {
                    **completion("Hello", 2), "kv_transfer_params": {"do_remote_prefill": True, "transfers": [forged]}})
                self.assertEqual(status, 400)
            with concurrent.futures.ThreadPoolExecutor(4) as pool:
                pending = [pool.submit(front.request, "POST", "/v1/completions", completion(p, 16)) for p in PROMPTS[:4]]
                time.sleep(0.2)
                for pid in prefill.rank_pids():
                    os.kill(pid, signal.SIGSTOP)
                time.sleep(1.0)
                for pid in prefill.rank_pids():
                    os.kill(pid, signal.SIGCONT)
                statuses = [f.result()[0] for f in pending]  # each answered, none hangs
            self.assertTrue(all(st == 200 or st >= 500 for st in statuses), statuses)

            def idle(server):
                m = server.metrics()
                return (family(m, "vllm:num_requests_running") == 0 and family(m, "vllm:num_requests_waiting") == 0
                        and family(m, "vllm:kv_cache_usage_perc") == 0)

            deadline = time.time() + 60
            while time.time() < deadline and not (idle(prefill) and idle(decode)):
                time.sleep(0.2)
            self.assertTrue(idle(prefill), {k: v for k, v in prefill.metrics().items() if "bucket" not in k})
            self.assertTrue(idle(decode), {k: v for k, v in decode.metrics().items() if "bucket" not in k})
            for p in procs:
                self.assertIsNone(p.proc.poll(), p.log_text()[-2000:])
            self.assertEqual(texts(front, [completion("Hello", 6)]), want)
        finally:
            for p in procs:
                if p.proc.poll() is None:
                    p.stop()


TP2 = ("--tensor-parallel-size", "2")
DP2_EP = ("--data-parallel-size", "2", "--enable-expert-parallel")
# (prefill, decode) layouts of #32; each rank of a TP=2 instance holds its own KV heads (Qwen3-MoE)
# or the whole latent (DeepSeek's MLA), so a consumer rank fetches its parts from the producer
# ranks that hold them; through a proxy that streams the KV and one that does not.
LAYOUTS = [(TP2, ()), ((), TP2), (TP2, TP2), (DP2_EP, ()), ((), DP2_EP)]


class Layouts(unittest.TestCase):
    def check_layouts(self, model):
        single = serve(model).wait_healthy()
        try:
            bodies = [completion(p) for p in PROMPTS[:3]] + [completion(LONG, 6), completion("Hello", 5, n=2)]
            want = texts(single, bodies)
        finally:
            single.stop()
        for prefill_layout, decode_layout in LAYOUTS:
            with self.subTest(prefill=prefill_layout, decode=decode_layout):
                prefill = serve(model, "--kv-transfer-config", kv_config("kv_producer"), "--max-num-batched-tokens",
                                "32", *prefill_layout)
                decode = serve(model, "--kv-transfer-config", kv_config("kv_consumer"), *decode_layout)
                started(prefill, decode)
                # The KV streamed while the prefill runs (the default), and fetched after it.
                front = proxy([prefill], [decode]).wait_healthy()
                after = proxy([prefill], [decode], "--kv-streaming", "false").wait_healthy()
                try:
                    self.assertEqual(texts(front, bodies), want)
                    self.assertEqual(texts(after, bodies), want)
                    dm = decode.metrics()
                    self.assertEqual(family(dm, "vllm:prompt_tokens_total"), 0)  # every prompt's KV was fetched
                    self.assertEqual(family(dm, "moeserve:kv_transfer_failures_total", role="consumer"), 0)
                    self.assert_nothing_held(prefill, decode)
                finally:
                    for p in (front, after, prefill, decode):
                        p.stop()

    def assert_nothing_held(self, *servers):
        """Every transfer released on both sides: no KV block in use (bounded wait)."""
        for server in servers:
            deadline = time.time() + 20
            while time.time() < deadline and family(server.metrics(), "vllm:kv_cache_usage_perc") != 0:
                time.sleep(0.1)
            self.assertEqual(family(server.metrics(), "vllm:kv_cache_usage_perc"), 0, server.url)

    def test_qwen3(self):
        self.check_layouts(ARGS.model)

    def test_deepseek(self):
        self.check_layouts(ARGS.deepseek_model)

    def test_incompatible(self):
        """Layouts that cannot exchange KV (another KV cache dtype, another block size): the request
        fails naming both; the TP=2 producer frees the blocks when they expire."""
        prefill = serve(ARGS.model, "--kv-transfer-config", kv_config("kv_producer", hold_ms=2000), *TP2)
        fp8 = serve(ARGS.model, "--kv-transfer-config", kv_config("kv_consumer"), "--kv-cache-dtype", "fp8")
        blocks = serve(ARGS.model, "--kv-transfer-config", kv_config("kv_consumer"), "--block-size", "32", *TP2)
        started(prefill, fp8, blocks)
        try:
            for decode in (fp8, blocks):
                pre = prefill.post("/v1/completions", {**completion("Hello", 1),
                                                       "kv_transfer_params": {"do_remote_decode": True}})
                status, payload = decode.request("POST", "/v1/completions", {
                    **completion("Hello", 4), "kv_transfer_params": pre["kv_transfer_params"]})
                self.assertGreaterEqual(status, 500, payload)
                message = json.loads(payload)["error"]["message"]
                self.assertIn("KV layouts differ: the prefill engine has 'gqa", message)
                self.assertIn("the decode engine 'gqa", message)
            self.assert_nothing_held(prefill, fp8, blocks)
        finally:
            for p in (prefill, fp8, blocks):
                p.stop()


class KilledProducer(unittest.TestCase):
    def test_rank_killed_during_streamed_transfer(self):
        """A TP=2 prefill instance whose rank 1 takes 300 ms per forward (a test hook) prefills a long
        prompt in chunks of 8 tokens while the decode instance already streams its KV; rank 1 is
        killed then. The request fails within the timeout, naming the prefill instance; no KV block
        stays in use on either side; the prefill instance heals (its rank restarted) and serves the
        same texts again."""
        single = serve(ARGS.model)
        os.environ["MOESERVE_DEBUG_FOLLOWER_FORWARD_DELAY_MS"] = "300"
        try:
            prefill = serve(ARGS.model, "--kv-transfer-config", kv_config("kv_producer"), *TP2,
                            "--max-num-batched-tokens", "8")
        finally:
            del os.environ["MOESERVE_DEBUG_FOLLOWER_FORWARD_DELAY_MS"]
        decode = serve(ARGS.model, "--kv-transfer-config", kv_config("kv_consumer", timeout_ms=5000))
        started(single, prefill, decode)
        front = proxy([prefill], [decode]).wait_healthy()
        try:
            bodies = [completion(p) for p in PROMPTS[:2]]
            want = texts(single, bodies)
            start = time.time()
            with concurrent.futures.ThreadPoolExecutor(1) as pool:
                pending = pool.submit(front.request, "POST", "/v1/completions", completion(LONG, 8))
                deadline = time.time() + 30  # the decode instance waits for the KV it streams
                while time.time() < deadline and family(decode.metrics(), "moeserve:kv_waiting_requests") == 0:
                    time.sleep(0.05)
                self.assertEqual(family(decode.metrics(), "moeserve:kv_waiting_requests"), 1)
                self.assertFalse(pending.done())  # ~14 chunks of 300 ms: the prefill still runs
                os.kill(child_with(prefill.proc.pid, "--rank", 1), signal.SIGKILL)
                status, payload = pending.result()
            self.assertGreaterEqual(status, 500, payload)
            self.assertIn("prefill", json.loads(payload)["error"]["message"])
            self.assertLess(time.time() - start, 40)
            Layouts.assert_nothing_held(self, decode, prefill)
            prefill.wait_healthy()
            try:
                self.assertEqual(texts(front, bodies), want)
            except AssertionError:
                sys.stderr.write("PREFILL " + prefill.log_text()[-8000:] + "\nDECODE " + decode.log_text()[-3000:])
                raise
        finally:
            for p in (front, single, prefill, decode):
                p.stop()


class Netns(unittest.TestCase):
    def test_two_hosts(self):
        pid = os.getpid()
        a, b = f"mspd_a_{pid}", f"mspd_b_{pid}"
        va, vb = f"mspa{pid % 100000}", f"mspb{pid % 100000}"
        net = f"10.202.{pid % 200 + 20}"
        addr_a, addr_b = net + ".1", net + ".2"
        procs = []
        try:
            if sh(f"ip netns add {a}") != 0 or sh(f"ip netns add {b}") != 0:
                self.skipTest("cannot create network namespaces here (needs root / CAP_NET_ADMIN)")
            for cmd in [f"ip link add {va} type veth peer name {vb}", f"ip link set {va} netns {a}", f"ip link set {vb} netns {b}",
                        f"ip -n {a} addr add {addr_a}/24 dev {va}", f"ip -n {b} addr add {addr_b}/24 dev {vb}",
                        f"ip -n {a} link set {va} up", f"ip -n {b} link set {vb} up",
                        f"ip -n {a} link set lo up", f"ip -n {b} link set lo up"]:
                if sh(cmd) != 0:
                    self.skipTest("cannot set up the veth pair: " + cmd)
            in_a, in_b = ("ip", "netns", "exec", a), ("ip", "netns", "exec", b)
            single = serve(ARGS.model)
            prefill = serve(ARGS.model, "--kv-transfer-config", kv_config("kv_producer", ip=addr_a), host=addr_a, prefix=in_a)
            decode = serve(ARGS.model, "--kv-transfer-config", kv_config("kv_consumer"), host=addr_b, prefix=in_b)
            procs = [single, prefill, decode]
            started(*procs)
            front = proxy([prefill], [decode], host=addr_a, prefix=in_a).wait_healthy()
            procs.append(front)
            bodies = [completion(p) for p in PROMPTS[:3]]
            want = texts(single, bodies)
            self.assertEqual([[c["text"] for c in front.post("/v1/completions", body)["choices"]] for body in bodies], want)
            self.assertGreater(family(decode.metrics(), "moeserve:kv_transfer_bytes_total", role="consumer"), 0)
            self.assertIn(f"tcp://{addr_a}:", prefill.log_text())  # the KV endpoint is on the namespace's address
        finally:
            for p in procs:
                p.stop()
            sh(f"ip netns del {a}")
            sh(f"ip netns del {b}")


if __name__ == "__main__":
    p = argparse.ArgumentParser()
    p.add_argument("--moeserve", required=True)
    p.add_argument("--model", required=True)
    p.add_argument("--deepseek-model", required=True)
    p.add_argument("--suite", required=True, choices=["equal", "multi", "netns", "faults", "forged", "chaos", "spec",
                                                            "layouts", "kill", "families"])
    p.add_argument("--family-models", nargs="*", default=[])
    ARGS, rest = p.parse_known_args()
    names = {"equal": ["Disaggregated.test_equal_qwen3", "Disaggregated.test_equal_deepseek"],
             "layouts": ["Layouts.test_qwen3", "Layouts.test_deepseek", "Layouts.test_incompatible"],
             "kill": ["KilledProducer.test_rank_killed_during_streamed_transfer"],
             "multi": ["Disaggregated.test_multi"], "faults": ["Disaggregated.test_faults"],
             "forged": ["Disaggregated.test_forged_transfers", "Disaggregated.test_proxy_access_policy"],
             "chaos": ["Disaggregated.test_chaos"], "netns": ["Netns.test_two_hosts"],
             "spec": ["Disaggregated.test_speculative_decode"], "families": ["Disaggregated.test_families"]}
    suite = unittest.defaultTestLoader.loadTestsFromNames(names[ARGS.suite], sys.modules[__name__])
    ok = unittest.TextTestRunner(verbosity=2).run(suite).wasSuccessful()
    sys.exit(0 if ok else 1)
