#!/usr/bin/python3
"""`moeserve serve --api-server-count 2`: two API server processes on one port (SO_REUSEPORT)
over the same engines (stdlib only; every wait bounded).

Suites (one CTest each):
  equal     many concurrent greedy requests (new connection each) == a single API server's texts;
            both servers answered some (moeserve:api_server_requests_total per server); every
            /metrics scrape, whichever server answers, shows the same summed request counts; a
            second deployment on the same port is refused
  dp        the same with --data-parallel-size 2 --enable-expert-parallel: both engines and both
            servers get requests
  shutdown  SIGTERM on the parent with streams in flight on both servers: all complete, exit 0,
            every child process gone, within a bounded time
  kill      --max-rank-restarts 0, SIGKILL of one API server process with streams in flight on both:
            its streams break off, the other server's complete, the parent exits 1 and nothing is
            left running, within a bounded time
  restart   SIGKILL of one API server with streams in flight on both, 5 times: its streams break off,
            the other's complete; it is started again in place and serves within RESTART_BOUND_S
            (reference texts through both servers), the engine aborted the dead one's requests; the
            summed counts never go back, moeserve:api_server_restarts_total 5; no fd or /dev/shm leak
  heal_ranks  -dp 2 + EP: a rank killed 3 times while both servers stream: every stream fails
            (lock-step), the parent restarts the rank, both servers are healthy again within
            RESTART_BOUND_S and serve the reference texts, group_restarts_total on either
  crash_loop  a restarted API server that exits at once: given up after --max-rank-restarts 2, the
            deployment stops with exit 1 and says why
  external_lb  -dp 2 -dpn 0 / -dpn 1, two API servers in each instance: greedy texts == one server's,
            each instance's servers both answered, its engine only
  validate  --api-server-count with ranks on other nodes or with --kv-transfer-config is refused
            with one line naming the flag
"""
import argparse
import concurrent.futures
import http.client
import json
import os
import re
import signal
import subprocess
import sys
import time
import unittest

from harness import ServeProcess

ARGS = None
TIMEOUT = 60  # seconds for any single HTTP exchange
PROMPTS = ["The capital of France is", "Hello", "Once upon a time", "1 2 3 4 5", "def main():", "Bye"]
MAX_TOKENS = 8
RESTART_BOUND_S = 30  # kill -> the new API server serves (measured: see docs/performance.md)
COMMON = ["--threads", "1", "--served-model-name", "tiny", "--kv-cache-memory", "32M",
          "--heartbeat-timeout-ms", "5000", "--max-num-seqs", "48"]


class Server(ServeProcess):
    """A `moeserve serve` process; with several API servers, ready once the parent says all are."""

    def __init__(self, *extra, wait=True, env=None):
        super().__init__([ARGS.moeserve, "serve", "--model", ARGS.model, "--host", "127.0.0.1", "--port", "0",
                          *COMMON, *(() if "--max-model-len" in extra else ("--max-model-len", "256")), *extra],
                         env=env, timeout=TIMEOUT)
        self.several = "--api-server-count" in extra or "-asc" in extra
        if wait:
            self.wait_ready()

    def wait_ready(self, timeout=60):
        deadline = time.time() + timeout
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError("server exited: " + self.log_text())
            text = self.log_text()
            m = re.search(r"listening on https?://\S+?:(\d+) ", text)
            ready = ("API servers ready" in text) if self.several else (m is not None)
            if m and ready:
                self.port = int(m.group(1))
                try:
                    if self.request("GET", "/health")[0] == 200:
                        return
                except OSError:
                    pass
            time.sleep(0.1)
        self.proc.kill()
        raise RuntimeError("server not ready within %d s: %s" % (timeout, self.log_text()[-3000:]))

    def complete(self, prompt, max_tokens=MAX_TOKENS):
        return super().complete(prompt, max_tokens)

    def complete_all(self, prompts, max_tokens=MAX_TOKENS):
        return super().complete_all(prompts, max_tokens)

    def rank_pid(self, rank):
        return self.child_with("--rank", rank)

    def api_server_pid(self, index):
        return self.child_with("--api-server-index", index)

def alive(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(") ")[1].split()[0] != "Z"
    except OSError:
        return False


def wait_gone(pids, timeout=10):
    deadline = time.time() + timeout
    while time.time() < deadline and any(alive(p) for p in pids):
        time.sleep(0.05)
    return [p for p in pids if alive(p)]


REFERENCE = {}


def reference_texts(max_tokens=MAX_TOKENS):
    """Greedy texts of PROMPTS from one API server over one engine (computed once per length)."""
    if max_tokens not in REFERENCE:
        s = Server()
        try:
            REFERENCE[max_tokens] = [s.complete(p, max_tokens) for p in PROMPTS]
        finally:
            assert s.stop() == 0
    return REFERENCE[max_tokens]


def per_label(m, family, label):
    out = {}
    for k, v in m.items():
        if k.startswith(family + "{") and f'{label}="' in k:
            out[k.split(f'{label}="')[1].split('"')[0]] = v
    return out


class ApiServers(unittest.TestCase):
    def check_equal(self, s, n_engines):
        expected = reference_texts()
        rounds = 4  # 24 requests at once, each on its own connection: the kernel spreads them
        got = s.complete_all(PROMPTS * rounds)
        self.assertEqual(got, expected * rounds)
        n = len(PROMPTS) * rounds
        time.sleep(1.2)  # > two snapshot periods: every server's counts are in the files
        scrapes = [s.metrics() for _ in range(8)]  # new connections: both servers answer some
        for m in scrapes:
            per_server = per_label(m, "moeserve:api_server_requests_total", "api_server")
            self.assertEqual(sorted(per_server), ["0", "1"])
            self.assertEqual(sum(per_server.values()), n, per_server)
            self.assertTrue(all(v > 0 for v in per_server.values()), per_server)  # both servers answered
            self.assertEqual(m['vllm:request_success_total{model_name="tiny",finished_reason="length"}'], n)
            self.assertEqual(m['vllm:e2e_request_latency_seconds_count{model_name="tiny"}'], n)
            generated = per_label(m, "vllm:generation_tokens_total", "engine")
            self.assertEqual(len(generated), n_engines)
            self.assertEqual(sum(generated.values()), n * MAX_TOKENS)  # engine series: the same everywhere
            if n_engines > 1:
                self.assertTrue(all(v > 0 for v in generated.values()), generated)
            self.assertEqual(m['moeserve:num_requests_in_flight{model_name="tiny"}'], 0)
        # Scrapes count too: the 200s grow by at least the earlier scrapes, whichever server answered.
        ok = [m['moeserve:http_responses_total{model_name="tiny",status="200"}'] for m in scrapes]
        self.assertGreaterEqual(min(ok), n)

    def test_equal(self):
        s = Server("--api-server-count", "2")
        try:
            self.check_equal(s, 1)
            # A second deployment on the same port would share it silently (SO_REUSEPORT): refused.
            out = subprocess.run([ARGS.moeserve, "serve", ARGS.model, "--port", str(s.port), "-asc", "2"],
                                 capture_output=True, timeout=30)
            self.assertEqual(out.returncode, 2, out.stderr[-500:])
            self.assertIn("another process already listens there", out.stderr.decode())
            self.assertIn("[api0]", s.log_text())
            self.assertIn("[api1]", s.log_text())
        finally:
            self.assertEqual(s.stop(), 0)

    def test_dp(self):
        s = Server("-asc", "2", "--data-parallel-size", "2", "--enable-expert-parallel")
        try:
            self.check_equal(s, 2)
        finally:
            self.assertEqual(s.stop(), 0)

    def open_streams(self, s, per_server=2, limit=40, tag="", max_tokens=200):
        """Streams of 200 tokens, each known to be in flight (its first event read), opened until
        each of the two servers has per_server of them (the kernel picks the server per connection;
        the request log, which needs --enable-log-requests, says which took each one). Bounded: a
        split that leaves a server without per_server of `limit` connections (p ~ 1e-10 here) fails
        the test; limit stays below --max-num-seqs, so every stream runs at once."""
        streams, taken = [], {"0": 0, "1": 0}
        for k in range(limit):
            prompt = f"Stream number {k}{tag} begins"  # unique: finds its line in the request log
            c = http.client.HTTPConnection("127.0.0.1", s.port, timeout=TIMEOUT)
            c.request("POST", "/v1/completions", body=json.dumps(
                {"prompt": prompt, "max_tokens": max_tokens, "temperature": 0, "ignore_eos": True, "stream": True}),
                headers={"Content-Type": "application/json"})
            r = c.getresponse()
            self.assertEqual(r.status, 200)
            self.assertTrue(r.readline().startswith(b"data: "))  # logged on arrival, before this
            streams.append((c, r))
            m = re.search(r"\[api(\d)\] api: received request \S+: prompt: \"%s\"" % re.escape(prompt), s.log_text())
            self.assertIsNotNone(m, prompt)
            taken[m.group(1)] += 1
            if min(taken.values()) >= per_server:
                return streams
        self.fail("the kernel gave %s of %d connections to the two servers" % (taken, limit))

    @staticmethod
    def finish_streams(streams):
        """Per stream: whether it ended normally (finish_reason length, then [DONE])."""
        def finish(stream):
            c, r = stream
            try:
                body = r.read()
            except (OSError, http.client.HTTPException):  # its server is gone
                return False
            finally:
                c.close()
            return b'"finish_reason":"length"' in body and body.rstrip().endswith(b"data: [DONE]")

        with concurrent.futures.ThreadPoolExecutor(len(streams)) as pool:
            return list(pool.map(finish, streams))

    def test_shutdown(self):
        # The drain may take its time: 200-token streams under ASan on a busy 2-core CI machine
        # outlasted the default --drain-timeout of 30 s once (the streams were then cut). What is
        # tested is that they are drained, not how fast.
        s = Server("--api-server-count", "2", "--enable-log-requests", "--drain-timeout", "300")
        children = s.children()
        self.assertEqual(len(children), 3)  # one rank, two API servers
        try:
            streams = self.open_streams(s)
            s.proc.send_signal(signal.SIGTERM)
            self.assertEqual(self.finish_streams(streams), [True] * len(streams))  # drained, not cut
            self.assertEqual(s.proc.wait(300), 0)
            self.assertEqual(wait_gone(children), [])
            log = s.log_text()
            self.assertIn("the API servers drain", log)
            for server in ("api0", "api1"):  # both had streams (open_streams)
                self.assertRegex(log, r"\[%s\] api: request \S+ finished: reason=length" % server)
        finally:
            s.stop()

    def test_kill(self):
        # What is tested is that a killed API server takes the deployment down once the other has
        # drained (exit 1, no process left), not how fast: under ASan on a busy 2-core CI machine the
        # survivor's 200-token streams once took 30.6 s, past an earlier 30 s bound.
        s = Server("--api-server-count", "2", "--enable-log-requests", "--drain-timeout", "300",
                   "--max-rank-restarts", "0")
        children = s.children()
        victim = s.api_server_pid(1)
        try:
            streams = self.open_streams(s)
            os.kill(victim, signal.SIGKILL)
            done = self.finish_streams(streams)  # the other server drains: its streams end normally
            sys.stderr.write("kill: %d of %d streams completed\n" % (sum(done), len(done)))
            self.assertIn(True, done)  # both servers had streams (open_streams)
            self.assertIn(False, done)
            self.assertEqual(s.proc.wait(300), 1)
            self.assertEqual(wait_gone(children), [])
            self.assertRegex(s.log_text(), r"API server 1 \(process \d+\) was killed by signal 9; --max-rank-restarts 0")
        finally:
            s.stop()

    def test_restart(self):
        expected = reference_texts()
        # Streams long enough to outlast the restart, so the engine has the dead server's ones to
        # abort: the restart took 0.6-0.9 s here and a 600-token stream 0.87 s, so once the
        # victim's stream finished before the restart was noticed ("aborting the 0 requests").
        # 2000 tokens (about 3 s here) leave a margin of 3x; the model's length bound fits them.
        s = Server("--api-server-count", "2", "--enable-log-requests", "--drain-timeout", "300", "--max-model-len",
                   "2048")
        rank = s.children()[0]
        shm_before = sorted(os.listdir("/dev/shm"))
        fds, succeeded, recovery = None, 0, []
        try:
            for k in range(1, 6):
                streams = self.open_streams(s, per_server=1, tag=f" of round {k}", max_tokens=2000)
                victim = s.api_server_pid(1)
                os.kill(victim, signal.SIGKILL)
                killed = time.time()
                done = self.finish_streams(streams)  # the victim's break off, the survivor's complete
                self.assertIn(True, done)
                self.assertIn(False, done)
                deadline = killed + RESTART_BOUND_S
                while "API server 1 serves again (restart %d)" % k not in s.log_text() and time.time() < deadline:
                    time.sleep(0.05)
                self.assertIn("API server 1 serves again (restart %d)" % k, s.log_text())
                recovery.append(time.time() - killed)
                self.assertNotEqual(s.api_server_pid(1), victim)
                self.assertRegex(s.log_text(), r"engine 0: API server 1 restarted; aborting the [1-9]\d* requests")
                self.assertEqual(s.complete_all(PROMPTS * 2), expected * 2)  # through both servers (new connections)
                time.sleep(1.2)  # > two snapshot periods
                m = s.metrics()
                total = sum(v for key, v in m.items() if key.startswith("vllm:request_success_total{"))
                self.assertGreaterEqual(total, succeeded)  # the restarted server continued its counts
                succeeded = total
                self.assertEqual(m['moeserve:api_server_restarts_total{model_name="tiny"}'], k)
                self.assertEqual(m['vllm:num_requests_running{model_name="tiny",engine="0"}'], 0)  # aborted
                counts = (len(os.listdir(f"/proc/{s.proc.pid}/fd")), len(os.listdir(f"/proc/{rank}/fd")))
                fds = fds or counts
                self.assertEqual(counts, fds, "open fds of the parent and the rank after restart %d" % k)
            sys.stderr.write("restart: kill -> serving again %s s\n" % ", ".join("%.2f" % t for t in recovery))
        finally:
            self.assertEqual(s.stop(), 0, s.log_text()[-3000:])
        self.assertEqual(sorted(os.listdir("/dev/shm")), shm_before)

    def test_heal_ranks(self):
        expected = reference_texts()
        s = Server("-asc", "2", "-dp", "2", "--enable-expert-parallel", "--distributed-timeout-ms", "3000",
                   "--enable-log-requests", "--max-model-len", "2048")
        try:
            for k in range(1, 4):
                streams = self.open_streams(s, per_server=1, tag=f" of kill {k}", max_tokens=1000)
                os.kill(s.rank_pid(k % 2), signal.SIGKILL)
                killed = time.time()
                done = self.finish_streams(streams)
                self.assertEqual(done, [False] * len(done))  # lock-step: every engine's running requests fail
                deadline = killed + RESTART_BOUND_S
                healthy = 0
                while healthy < 10 and time.time() < deadline:  # new connections: both servers answer
                    healthy = healthy + 1 if s.request("GET", "/health")[0] == 200 else 0
                    time.sleep(0.05)
                self.assertEqual(healthy, 10, "\n".join(line for line in s.log_text().splitlines()[-400:]
                                                        if "access:" not in line and "request" not in line))
                sys.stderr.write("heal_ranks: kill %d -> both servers healthy in %.2f s\n" % (k, time.time() - killed))
                self.assertEqual(s.complete_all(PROMPTS * 2), expected * 2)
                for _ in range(4):  # whichever server answers counts every restart
                    self.assertEqual(s.metrics()['moeserve:group_restarts_total{model_name="tiny"}'], k)
        finally:
            self.assertEqual(s.stop(), 0, s.log_text()[-3000:])

    def test_crash_loop(self):
        env = dict(os.environ, MOESERVE_DEBUG_EXIT_ON_REJOIN="1")
        s = Server("--api-server-count", "2", "--max-rank-restarts", "2", env=env)
        children = s.children()
        try:
            os.kill(s.api_server_pid(1), signal.SIGKILL)
            self.assertEqual(s.proc.wait(120), 1)
            self.assertEqual(wait_gone(children), [])
            log = s.log_text()
            self.assertIn("restarting it (2 of at most 2 in a row)", log)
            self.assertIn("restarted 2 times in a row without serving again, so it is not restarted "
                          "(--max-rank-restarts 2); stopping the deployment", log)
        finally:
            s.stop()

    def test_external_lb(self):
        expected = reference_texts()
        flags = ["-asc", "2", "-dp", "2", "--enable-expert-parallel"]
        first = Server(*flags, "-dpn", "0", "-dpp", "0", wait=False)
        second = None
        try:
            deadline = time.time() + 30
            m = None
            while m is None and time.time() < deadline and first.proc.poll() is None:
                m = re.search(r"rendezvous store on \S+?:(\d+) ", first.log_text())
                time.sleep(0.05)
            self.assertIsNotNone(m, first.log_text())
            second = Server(*flags, "-dpn", "1", "-dpp", m.group(1), wait=False)
            first.wait_ready()
            second.wait_ready()
            rounds = 2
            for index, s in enumerate([first, second]):
                self.assertEqual(s.complete_all(PROMPTS * rounds), expected * rounds)
                time.sleep(1.2)  # the other server's snapshot
                m = s.metrics()
                per_server = per_label(m, "moeserve:api_server_requests_total", "api_server")
                self.assertEqual(sum(per_server.values()), len(PROMPTS) * rounds, per_server)
                self.assertTrue(all(v > 0 for v in per_server.values()), per_server)
                generated = per_label(m, "vllm:generation_tokens_total", "engine")
                self.assertEqual(generated, {str(index): len(PROMPTS) * rounds * MAX_TOKENS})
        finally:
            codes = [s.stop() for s in (first, second) if s is not None]
        self.assertEqual(codes, [0, 0])

    def test_validate(self):
        for extra, message in [
            (["-asc", "2", "-dp", "2", "--data-parallel-size-local", "1", "--data-parallel-address", "127.0.0.1",
              "--data-parallel-rpc-port", "1"], "several API servers need every engine they reach on this node"),
            (["--api-server-count", "2", "--kv-transfer-config",
              '{"kv_connector": "MoeserveConnector", "kv_role": "kv_producer"}'], "with --kv-transfer-config"),
            (["--api-server-count", "65"], "--api-server-count must be in [1, 64]"),
        ]:
            with self.subTest(extra=extra):
                env = {**os.environ, "MOESERVE_RANK_PLANE_KEY": "integration-test-rank-plane-key-0123456789"}
                out = subprocess.run([ARGS.moeserve, "serve", ARGS.model, "--port", "0", *extra], capture_output=True,
                                     timeout=30, env=env)
                self.assertEqual(out.returncode, 2, out.stderr[-500:])
                self.assertIn(message, out.stderr.decode())


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--moeserve", required=True)
    parser.add_argument("--model", required=True)
    parser.add_argument("--suite", default=None)
    ARGS, rest = parser.parse_known_args()
    names = {"equal": "test_equal", "dp": "test_dp", "shutdown": "test_shutdown", "kill": "test_kill",
             "restart": "test_restart", "heal_ranks": "test_heal_ranks", "crash_loop": "test_crash_loop", "external_lb": "test_external_lb",
             "validate": "test_validate"}
    suite = unittest.TestSuite()
    for key, name in names.items():
        if ARGS.suite in (None, key):
            suite.addTest(ApiServers(name))
    result = unittest.TextTestRunner(verbosity=2).run(suite)
    sys.exit(0 if result.wasSuccessful() else 1)
