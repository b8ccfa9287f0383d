#!/usr/bin/python3
"""What an operator meets first (issue 34), against the real binary (stdlib only; every wait bounded).

Suites:
  startup  each fault that used to surface after the port opened is refused before `bind`: the
           test holds the port it passes, so a server that bound first would report the busy
           port instead; one `error:` line, exit 2, the same line from `generate`; --version,
           an unknown command.
  logs     the stats and access lines are there, and absent under --disable-log-stats and
           --disable-uvicorn-access-log.
  proxy    nginx in front, configured by the block docs/serving.md shows (only its two ports
           changed; nginx's port picked by the kernel): a forwarded Host that --allowed-hosts
           names passes, a rebinding Host is 403.
"""
import argparse
import http.client
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import unittest
import harness

import serve_test
from harness import stop_process
from serve_test import Server

ARGS = None
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def wait_for(predicate, timeout, step=0.1):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if predicate():
            return True
        time.sleep(step)
    return predicate()


def model_copy(d, edit=None, replace=None):
    """A model folder of symlinks to ARGS.model's files; edit(config) rewrites config.json, and
    replace maps a file name to the bytes it gets instead."""
    os.makedirs(d)
    for name in os.listdir(ARGS.model):
        os.symlink(os.path.join(ARGS.model, name), os.path.join(d, name))
    for name, data in (replace or {}).items():
        os.unlink(os.path.join(d, name))
        with open(os.path.join(d, name), "wb") as f:
            f.write(data)
    if edit:
        config = json.load(open(os.path.join(ARGS.model, "config.json")))
        edit(config)
        os.unlink(os.path.join(d, "config.json"))
        json.dump(config, open(os.path.join(d, "config.json"), "w"))
    return d


def read(path):
    with open(path, "rb") as f:
        return f.read()


class Startup(unittest.TestCase):
    def faults(self, tmp):
        """(name, model dir, flags, words the line must have) of every fault of issue 34 item 2."""
        cut = model_copy(os.path.join(tmp, "cut"), replace={"config.json": read(os.path.join(ARGS.model, "config.json"))[:200]})
        llama = model_copy(os.path.join(tmp, "llama"), edit=lambda c: c.update(model_type="llama"))
        shape = model_copy(os.path.join(tmp, "shape"), edit=lambda c: c.update(moe_intermediate_size=2 * c["moe_intermediate_size"]))
        shards = sorted(n for n in os.listdir(ARGS.model) if n.endswith(".safetensors"))
        last = os.path.join(ARGS.model, shards[-1])
        truncated = model_copy(os.path.join(tmp, "truncated"), replace={shards[-1]: read(last)[:-100]})
        return [
            ("cut config.json", cut, [], [cut + "/config.json", "not valid JSON"]),
            ("unsupported model_type", llama, [], ["config.json", "model_type 'llama' is not supported"]),
            ("mis-shaped weights", shape, [], ["model.layers.0.mlp", "but config.json's architecture needs"]),
            ("truncated shard", truncated, [], [shards[-1], "truncated"]),
            ("awq", ARGS.model, ["--quantization", "awq"], ["--quantization 'awq' is not supported"]),
            ("max-num-seqs 0", ARGS.model, ["--max-num-seqs", "0"], ["--max-num-seqs must be >= 1"]),
            ("utilization 1.5", ARGS.model, ["--gpu-memory-utilization", "1.5"], ["--gpu-memory-utilization must be in (0, 1]"]),
            ("threads 0", ARGS.model, ["--threads", "0"], ["--threads must be >= 1"]),
        ]

    def refused_before_bind(self, model, flags):
        """The one error line of `serve` on a port this test holds, after checking that it
        exited 2 without having bound, listened or started a rank."""
        with socket.socket() as holder:
            holder.bind(("127.0.0.1", 0))
            holder.listen(1)
            port = holder.getsockname()[1]
            out = subprocess.run([ARGS.moeserve, "serve", model, "--port", str(port), *flags],
                                 capture_output=True, timeout=60)
        err = out.stderr.decode()
        self.assertEqual(out.returncode, 2, err[-800:])
        for absent in ("cannot listen", "listening on", "rank", "terminate called"):
            self.assertNotIn(absent, err)
        errors = [line for line in err.splitlines() if line.startswith("error:")]
        self.assertEqual(len(errors), 1, err)
        self.assertEqual(err.splitlines()[-1], errors[0])
        return errors[0]

    def test_faults_refused_before_bind_with_the_same_line_in_generate(self):
        with tempfile.TemporaryDirectory() as tmp:
            for name, model, flags, words in self.faults(tmp):
                with self.subTest(fault=name):
                    line = self.refused_before_bind(model, flags)
                    for w in words:
                        self.assertIn(w, line)
                    gen = subprocess.run([ARGS.moeserve, "generate", "--model", model, "--prompt", "hi",
                                          "--max-tokens", "1", *flags], capture_output=True, timeout=60)
                    self.assertEqual(gen.returncode, 2)
                    self.assertEqual(gen.stderr.decode().strip().splitlines()[-1], line)

    def test_mistyped_chat_template_is_refused(self):
        line = self.refused_before_bind(ARGS.model, ["--chat-template", "./templates/chatml.jinja"])
        self.assertIn("--chat-template './templates/chatml.jinja' looks like a file path", line)
        # A template given as text is still taken as the template (vllm_cli_test runs it).

    def test_version_and_unknown_command(self):
        out = subprocess.run([ARGS.moeserve, "--version"], capture_output=True, timeout=30)
        self.assertEqual(out.returncode, 0)
        self.assertRegex(out.stdout.decode(), r"^moeserve \d+\.\d+\.\d+ \(kernels: (ref|avx2|avx512|amx)\)\n$")
        out = subprocess.run([ARGS.moeserve, "foo"], capture_output=True, timeout=30)
        self.assertEqual(out.returncode, 2)
        self.assertTrue(out.stderr.decode().startswith("error: unknown command foo (commands: make-model,"),
                        out.stderr)


class Logs(unittest.TestCase):
    def test_stats_and_access_lines(self):
        env = dict(os.environ, VLLM_LOG_STATS_INTERVAL="0.5")
        s = Server(env=env)
        try:
            status, r = s.json("POST", "/v1/completions", {"prompt": "Hello", "max_tokens": 4, "ignore_eos": True})
            self.assertEqual(status, 200, r)
            self.assertEqual(s.json("GET", "/v1/models/nope")[0], 404)
            access = r'access: 127\.0\.0\.1:\d+ - "POST /v1/completions" 200 \d+\.\d{3}s prompt_tokens=\d+ completion_tokens=4'
            self.assertTrue(wait_for(lambda: re.search(access, s.log_text()), 10), s.log_text())
            self.assertRegex(s.log_text(), r'access: 127\.0\.0\.1:\d+ - "GET /v1/models/nope" 404 ')
            # The interval that saw the request reports its tokens (the server polls every second).
            stats = (r"stats: Engine 000: Avg prompt throughput: [\d.]+ tokens/s, Avg generation throughput: "
                     r"[1-9][\d.]* tokens/s, Running: \d+ reqs, Waiting: \d+ reqs, KV cache usage: [\d.]+%, "
                     r"Prefix cache hit rate: [\d.]+%")
            self.assertTrue(wait_for(lambda: re.search(stats, s.log_text()), 10), s.log_text())
        finally:
            self.assertEqual(s.stop(), 0)

    def test_flags_turn_them_off(self):
        env = dict(os.environ, VLLM_LOG_STATS_INTERVAL="0.5")
        s = Server("--disable-log-stats", "--disable-uvicorn-access-log", env=env)
        try:
            self.assertEqual(s.json("POST", "/v1/completions", {"prompt": "Hello", "max_tokens": 2})[0], 200)
            time.sleep(2.5)  # past two stats intervals and the server's one-second poll
            self.assertNotIn("stats:", s.log_text())
            self.assertNotIn("access:", s.log_text())
        finally:
            self.assertEqual(s.stop(), 0)

    def test_bad_interval_is_refused(self):
        env = dict(os.environ, VLLM_LOG_STATS_INTERVAL="soon")
        out = subprocess.run([ARGS.moeserve, "serve", ARGS.model, "--port", "0"], capture_output=True, timeout=30, env=env)
        self.assertEqual(out.returncode, 2)
        self.assertIn("error: VLLM_LOG_STATS_INTERVAL must be a number of seconds > 0; got 'soon'", out.stderr.decode())


def nginx_example():
    """The nginx block of docs/serving.md (after the nginx-example marker)."""
    doc = open(os.path.join(REPO, "docs", "serving.md")).read()
    m = re.search(r"<!-- nginx-example -->\n```nginx\n(.*?)```", doc, re.S)
    assert m, "docs/serving.md has no nginx example"
    return m.group(1)


def free_port():
    """A port the kernel picks (bound to port 0, then released for nginx to bind)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Nginx:
    """nginx running the docs' block in the foreground on a port the kernel picked. Another
    process may take that port between its release and nginx's bind: nginx then exits at once
    with "Address already in use" and is started again on a new port (at most 5 tries)."""

    def __init__(self, upstream_port):
        self.dir = tempfile.TemporaryDirectory()
        self.log = harness.child_log()
        for _ in range(5):
            self.port = free_port()
            self.proc = self.start(upstream_port)
            if wait_for(lambda: self.proc.poll() is not None or self.answers(), 20) and self.proc.poll() is None:
                return
            if "Address already in use" not in self.log_text():
                break
        raise RuntimeError("nginx did not start: " + self.log_text())

    def start(self, upstream_port):
        block = nginx_example().replace("listen 80;", f"listen 127.0.0.1:{self.port};")
        block = block.replace("127.0.0.1:8000", f"127.0.0.1:{upstream_port}")
        d = self.dir.name
        temp = "".join(f"    {k}_temp_path {d}/{k};\n" for k in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi"))
        conf = (f"pid {d}/nginx.pid;\nerror_log stderr warn;\nevents {{ worker_connections 64; }}\n"
                f"http {{\n    access_log off;\n{temp}{block}}}\n")
        with open(os.path.join(d, "nginx.conf"), "w") as f:
            f.write(conf)
        return subprocess.Popen(
            [shutil.which("nginx") or "/usr/sbin/nginx", "-e", "stderr", "-p", d, "-c", os.path.join(d, "nginx.conf"),
             "-g", "daemon off; master_process off;"], stdout=subprocess.DEVNULL, stderr=self.log)

    def answers(self):
        try:
            c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=5)
            c.request("GET", "/")
            c.getresponse().read()
            c.close()
            return True
        except OSError:
            return False

    def log_text(self):
        self.log.seek(0)
        return self.log.read().decode(errors="replace")

    def stop(self):
        stop_process(self.proc, timeout=10)
        self.dir.cleanup()


class Proxy(unittest.TestCase):
    def request(self, port, path, host, body=None, key=serve_test.API_KEY):
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        headers = {"Host": host, "Content-Type": "application/json", "Authorization": "Bearer " + key}
        c.request("POST" if body is not None else "GET", path, body=json.dumps(body) if body is not None else None,
                  headers=headers)
        r = c.getresponse()
        payload = r.read()
        c.close()
        return r.status, payload

    def test_nginx_example_forwards_the_host(self):
        self.assertIsNotNone(shutil.which("nginx") or os.path.exists("/usr/sbin/nginx") or None,
                             "nginx is not installed: run scripts/setup.sh")
        s = Server("--allowed-hosts", "api.example.com", "--root-path", "/llm")
        self.assertIn("Host: loopback names or api.example.com; X-Forwarded-Host believed from 127.0.0.1, ::1; "
                      "--root-path /llm", s.log_text())
        proxy = Nginx(s.port)
        try:
            status, body = self.request(proxy.port, "/llm/v1/completions", "api.example.com",
                                        {"prompt": "Hello", "max_tokens": 3})
            self.assertEqual(status, 200, body)
            self.assertEqual(json.loads(body)["usage"]["completion_tokens"], 3)
            status, body = self.request(proxy.port, "/llm/v1/models", "api.example.com")
            self.assertEqual(status, 200, body)
            # A rebinding page's Host reaches moeserve only as X-Forwarded-Host: refused.
            status, body = self.request(proxy.port, "/llm/v1/models", "evil.example")
            self.assertEqual(status, 403, body)
            self.assertIn("X-Forwarded-Host 'evil.example' is not allowed", json.loads(body)["error"]["message"])
            # Straight to moeserve, a stranger's X-Forwarded-Host is checked too (loopback peers are
            # trusted by default), and the public name in Host passes.
            self.assertEqual(self.request(s.port, "/v1/models", "api.example.com")[0], 200)
            self.assertRegex(s.log_text(), r'access: 127\.0\.0\.1 - "GET /llm/v1/models" 403 ')
        finally:
            proxy.stop()
            self.assertEqual(s.stop(), 0)


if __name__ == "__main__":
    p = argparse.ArgumentParser()
    p.add_argument("--moeserve", required=True)
    p.add_argument("--model", required=True)
    p.add_argument("--suite", choices=["startup", "logs", "proxy", "all"], default="all")
    ARGS, rest = p.parse_known_args()
    serve_test.ARGS = ARGS
    suites = {"startup": Startup, "logs": Logs, "proxy": Proxy}
    chosen = suites.values() if ARGS.suite == "all" else [suites[ARGS.suite]]
    loader = unittest.TestLoader()
    suite = unittest.TestSuite(loader.loadTestsFromTestCase(c) for c in chosen)
    result = unittest.TextTestRunner(verbosity=2).run(suite)
    sys.exit(0 if result.wasSuccessful() else 1)
