#!/usr/bin/python3
"""`moeserve serve` over several rank processes (stdlib only; every wait bounded).

Suites (one CTest each):
  dp_ep     dp=2 + --enable-expert-parallel: greedy texts of concurrent prompts == single rank; both
            engines get requests; per-engine /metrics
  dp_tp_ep  dp=2, tp=2, ep=4: same check
  tp        tp=2: same check
  pd_hybrid dp=2 + ep + --pd-hybrid: same texts; /metrics shows dummy steps
  netns     two emulated hosts (ip netns + veth, 10.201.x.{1,2}): head with DP rank 0, a --headless
            node with DP rank 1; requests to the head answer correctly (skipped if not permitted)
  dp_independent  dp=2 without EP: no lock-step (no dummy steps, no control collective), texts ==
            single rank; SIGKILL of one engine's rank fails only its requests, the other keeps serving
  kill      dp=2 + EP with --max-rank-restarts 0 (no self-healing): SIGKILL of one rank process ->
            in-flight request ends with an error, /health 503, new requests 503, within a bounded time
  heal      dp=2 + EP, self-healing: SIGKILL of a rank (5 times, either rank) while a stream runs ->
            the stream ends with an error, /health is 200 again within HEAL_BOUND_S and greedy texts
            equal the reference; no descriptors or shared memory leak; group_restarts_total = 5;
            p50/max recovery time printed
  heal_tp   tp=2: the same for the follower and the leader (twice each)
  netns_heal  as netns, then SIGKILL of the headless node's rank: its node restarts it, the group
            re-forms across the hosts, the head answers the reference texts again (skipped if not permitted)
  crash_loop  a restarted rank that exits at once (test hook): the API server gives up after
            --max-rank-restarts tries, /health 503 says why, requests 503
  eplb      dp=2 + EP + --enable-eplb (2 redundant slots), the router skewed onto two experts of rank 0
            (test hook): greedy texts == a single rank's with the same skew before, during and after
            the moves; the imbalance ratio drops from ~2 below 1.3; the metrics and the log line; a
            rank killed after the move: the group heals, the same texts, and it moves again
  validate  bad layouts are refused at start with a message naming the flags; nodes whose
            configurations differ are refused with a message (no hang)
  families  the tiny models of issue 35's families (--family-models: Mixtral, Qwen2-MoE, GLM-4.5,
            Kimi-K2 with its tiktoken tokenizer): dp=2 + EP and tp=2 give a single rank's greedy texts
"""
import argparse
import concurrent.futures
import contextlib
import http.client
import json
import os
import re
import signal
import subprocess
import sys
import time
import unittest
import harness

from harness import ServeProcess, netns_request, sh

ARGS = None
TIMEOUT = 60  # seconds for any single HTTP exchange
PROMPTS = ["The capital of France is", "Hello", "Once upon a time", "1 2 3 4 5", "def main():", "Bye"]
MAX_TOKENS = 8
COMMON = ["--threads", "1", "--served-model-name", "tiny", "--max-model-len", "256", "--kv-cache-memory", "32M",
          "--heartbeat-timeout-ms", "5000", "--max-num-seqs", "8"]


# Multi-node deployments share one rank-plane key (ipc/auth.h); a fixed one is fine in tests.
RANK_PLANE_KEY = "integration-test-rank-plane-key-0123456789"


def wait_for_store_port(proc, log, timeout=30):
    """The rendezvous port a head started with --data-parallel-rpc-port 0 reports once bound."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        log.seek(0)
        m = re.search(r"rendezvous store on \S+?:(\d+) ", log.read().decode(errors="replace"))
        if m:
            return int(m.group(1))
        if proc.poll() is not None:
            raise RuntimeError("head exited before binding its rendezvous store")
        time.sleep(0.05)
    raise RuntimeError("head did not report its rendezvous port")


class Server(ServeProcess):
    """A `moeserve serve` process (optionally prefixed, e.g. by `ip netns exec NS`)."""

    def __init__(self, *extra, prefix=(), host="127.0.0.1", wait=True, env=None, model=None):
        super().__init__([*prefix, ARGS.moeserve, "serve", "--model", model or ARGS.model, "--host", host, "--port", "0",
                          *COMMON, *extra], env=env, timeout=TIMEOUT)
        self.host = host
        self.prefix = prefix
        if wait:
            self.wait_healthy()

    def wait_healthy(self, timeout=60):
        deadline = time.time() + timeout
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError("server exited: " + self.log_text())
            if self.port is None:
                m = re.search(r"listening on https?://\S+?:(\d+) ", self.log_text())
                if m is None:
                    time.sleep(0.05)
                    continue
                self.port = int(m.group(1))
            try:
                if self.request("GET", "/health")[0] == 200:
                    return
            except OSError:
                pass
            time.sleep(0.1)
        self.proc.kill()
        raise RuntimeError("server not healthy within %d s: %s" % (timeout, log_tail(self, 3000)))

    def request(self, method, path, body=None):
        if self.prefix:  # inside a namespace: reach it from there with a tiny client
            return netns_request(self.prefix, self.host, self.port, method, path, body, TIMEOUT)
        return super().request(method, path, body)

    def complete(self, prompt, max_tokens=MAX_TOKENS):
        return super().complete(prompt, max_tokens)

    def complete_all(self, prompts, max_tokens=MAX_TOKENS):
        return super().complete_all(prompts, max_tokens)

    def rank_pids(self):
        return self.children()


def per_engine(m, family, **labels):
    """{engine: value} of a per-engine metric family, filtered by extra labels."""
    out = {}
    for k, v in m.items():
        if not k.startswith(family + "{"):
            continue
        if all(f'{lk}="{lv}"' in k for lk, lv in labels.items()):
            engine = k.split('engine="')[1].split('"')[0]
            out[int(engine)] = v
    return out


# Bound on a kill's outage: the survivors notice at once (the peer's sockets close), the new rank
# process starts and maps its weights, the group re-forms; seconds here, more under sanitizers.
HEAL_BOUND_S = 60


def rank_pid(s, rank):
    """The pid of global rank `rank` among the server's children (a restarted one included)."""
    return s.child_with("--rank", rank)

def open_descriptors(s):
    """Descriptors open in the server and its rank processes (sockets, files, shared memory)."""
    return sum(len(os.listdir(f"/proc/{pid}/fd")) for pid in [s.proc.pid, *s.children()])


def settled_descriptors(s, timeout=10):
    """open_descriptors once the count has held still for half a second (bounded): a connection the
    checks just closed may still be open on the server's side for a moment."""
    deadline = time.time() + timeout
    last, since = open_descriptors(s), time.time()
    while time.time() < deadline and time.time() - since < 0.5:
        time.sleep(0.1)
        now = open_descriptors(s)
        if now != last:
            last, since = now, time.time()
    return last


@contextlib.contextmanager
def log_tail_on_failure(s):
    """Writes the server's log tail to stderr when the block fails, so that a failure in CI, whose
    record keeps little of the output, says what the ranks did."""
    try:
        yield
    except BaseException:
        sys.stderr.write("\n--- server log tail ---\n%s\n--- end of server log ---\n" % log_tail(s, 8000))
        raise


def log_tail(s, chars):
    """The end of the server's log without the access lines of the tests' /health polls."""
    lines = [line for line in s.log_text().splitlines() if '"GET /health"' not in line]
    return "\n".join(lines)[-chars:]


def metric(s, name):
    """The value of an unlabelled-but-for-the-model series."""
    return next(v for k, v in s.metrics().items() if k.split("{")[0] == name)


REFERENCE = {}
SEEDED = {}
EPLB_SKEW = "2,3:20"  # tiny model: experts 2 and 3 (both on EP rank 0, no initial copies) take nearly every token


def reference_texts():
    """Greedy texts of PROMPTS from a single-rank server (computed once)."""
    if not REFERENCE:
        s = Server()
        try:
            REFERENCE["texts"] = [s.complete(p) for p in PROMPTS]
        finally:
            assert s.stop() == 0
    return REFERENCE["texts"]


class Parallel(unittest.TestCase):
    def long_stream(self, s):
        """The response of a 200-token stream, known to be running (its first event read)."""
        c = http.client.HTTPConnection("127.0.0.1", s.port, timeout=TIMEOUT)
        c.request("POST", "/v1/completions", body=json.dumps({"prompt": "Hello", "max_tokens": 200, "ignore_eos": True,
                                                               "stream": True}),
                  headers={"Content-Type": "application/json", "Connection": "close"})  # no socket left behind
        r = c.getresponse()
        self.assertTrue(r.read(6).startswith(b"data: "))
        return r

    def check_equal_outputs(self, s, n_engines, extra_tokens=0):
        expected = reference_texts()
        got = s.complete_all(PROMPTS)
        self.assertEqual(got, expected, s.log_text()[-4000:])
        m = s.metrics()
        generated = per_engine(m, "vllm:generation_tokens_total")
        self.assertEqual(sorted(generated), list(range(n_engines)))
        self.assertEqual(sum(generated.values()), len(PROMPTS) * MAX_TOKENS + extra_tokens)
        if n_engines > 1:
            self.assertTrue(all(v > 0 for v in generated.values()), (generated, s.log_text()[-4000:]))  # both got work
        return m

    def test_dp_ep(self):
        s = Server("--data-parallel-size", "2", "--enable-expert-parallel")
        try:
            m = self.check_equal_outputs(s, 2)
            self.assertEqual(set(per_engine(m, "vllm:num_requests_running")), {0, 1})
            self.assertEqual(set(per_engine(m, "vllm:kv_cache_usage_perc")), {0, 1})
            # Unseeded samples are independent across the DP engines (each gets two of the four);
            # seeded ones reproduce whatever the layout.
            body = {"prompt": "Once upon a time", "max_tokens": 12, "temperature": 1.0, "n": 4, "ignore_eos": True}
            status, r = s.request("POST", "/v1/completions", body)
            self.assertEqual(status, 200, r)
            texts = [c["text"] for c in json.loads(r)["choices"]]
            self.assertEqual(len(set(texts)), 4, texts)
            # Two choices of a 4-token prompt keep every step at 8 rows or fewer in both layouts,
            # whatever the arrival timing: at AVX-512 the linears' GEMV (up to 8 rows) and GEMM
            # sum in different orders (docs/kernels.md), so a 16-row prefill in the single engine
            # against 8-row ones here can move a sample (seen here under load; the likely cause of this
            # test's rare failure in CI).
            seeded_body = {**body, "n": 2, "seed": 11}
            status, seeded = s.request("POST", "/v1/completions", seeded_body)
            self.assertEqual(status, 200, seeded)
            SEEDED["dp_ep"] = [c["text"] for c in json.loads(seeded)["choices"]]
        finally:
            s.assert_stops_cleanly(self)
        single = Server()
        try:
            status, r = single.request("POST", "/v1/completions", seeded_body)
            self.assertEqual(status, 200, r)
            self.assertEqual([c["text"] for c in json.loads(r)["choices"]], SEEDED["dp_ep"])
        finally:
            single.assert_stops_cleanly(self)

    def test_families(self):
        for model in ARGS.family_models:
            with self.subTest(model=os.path.basename(model)):
                single = Server(model=model)
                try:
                    expected = single.complete_all(PROMPTS)
                finally:
                    single.assert_stops_cleanly(self)
                for layout in (("--data-parallel-size", "2", "--enable-expert-parallel"),
                               ("--tensor-parallel-size", "2")):
                    s = Server(*layout, model=model)
                    try:
                        self.assertEqual(s.complete_all(PROMPTS), expected, (layout, s.log_text()[-4000:]))
                    finally:
                        s.assert_stops_cleanly(self)

    def test_dp_tp_ep(self):
        s = Server("--data-parallel-size", "2", "--tensor-parallel-size", "2", "--enable-expert-parallel")
        try:
            self.check_equal_outputs(s, 2)
        finally:
            s.assert_stops_cleanly(self)

    def test_tp(self):
        s = Server("--tensor-parallel-size", "2")
        try:
            self.check_equal_outputs(s, 1)
        finally:
            s.assert_stops_cleanly(self)

    def test_pd_hybrid(self):
        s = Server("--data-parallel-size", "2", "--enable-expert-parallel", "--pd-hybrid")
        try:
            # An uneven load: one long request on top, so one engine idles while the other decodes.
            with concurrent.futures.ThreadPoolExecutor(2) as pool:
                long_one = pool.submit(s.complete, PROMPTS[0], 24)
                time.sleep(0.05)
                self.check_equal_outputs(s, 2, extra_tokens=24)
                self.assertTrue(long_one.result(TIMEOUT).startswith(reference_texts()[0]))
            m = s.metrics()
            dummy = per_engine(m, "moeserve:engine_steps_total", phase="dummy")
            self.assertGreater(sum(dummy.values()), 0, dummy)
            # The coordinator's counters: dummy forwards by phase, time in the control collective.
            by_phase = {p: sum(per_engine(m, "moeserve:dummy_steps_total", phase=p).values())
                        for p in ("prefill", "decode")}
            self.assertGreater(sum(by_phase.values()), 0, by_phase)
            control = per_engine(m, "moeserve:dp_control_seconds_total")
            self.assertEqual(sorted(control), [0, 1], control)
            self.assertTrue(all(v > 0 for v in control.values()), control)
            self.assertIn("PD hybrid", s.log_text())
        finally:
            s.assert_stops_cleanly(self)

    def test_external_lb(self):
        # vLLM's external load balancing: one instance per DP rank (-dpn), each its own API server
        # on its own port reaching its own engine; the engines still step as one DP/EP group, and
        # heal as one when a rank dies.
        layout = ["--data-parallel-size", "2", "--enable-expert-parallel", "--distributed-timeout-ms", "5000"]
        dp0 = Server(*layout, "-dpn", "0", "--data-parallel-rpc-port", "0", wait=False)
        dp1 = None
        try:
            rpc = wait_for_store_port(dp0.proc, dp0.log)
            dp1 = Server(*layout, "--data-parallel-rank", "1", "--data-parallel-rpc-port", str(rpc), wait=False)
            dp0.wait_healthy()
            dp1.wait_healthy()
            self.assertNotEqual(dp0.port, dp1.port)
            expected = reference_texts()
            # Half the prompts to each instance, at once: both engines work in the same steps.
            with concurrent.futures.ThreadPoolExecutor(len(PROMPTS)) as pool:
                got = list(pool.map(lambda ip: (dp0, dp1)[ip[0] % 2].complete(ip[1]), enumerate(PROMPTS)))
            self.assertEqual(got, expected)
            for rank, s in enumerate((dp0, dp1)):
                generated = per_engine(s.metrics(), "vllm:generation_tokens_total")
                self.assertEqual(generated, {rank: len(PROMPTS) // 2 * MAX_TOKENS}, (rank, generated))
            self.assertIn("1 engine(s) ready", dp1.log_text())
            # Self-healing: each instance restarts its own rank; the group re-forms across both.
            for n, (owner, other) in enumerate([(dp1, dp0), (dp0, dp1)]):
                streams = [self.long_stream(dp0), self.long_stream(dp1)]
                os.kill(owner.rank_pids()[0], signal.SIGKILL)
                for r in streams:  # lock-step: both engines' running requests fail
                    self.assertIn('"error"', r.read().decode(), f"kill {n + 1}")
                owner.wait_healthy(HEAL_BOUND_S)
                other.wait_healthy(HEAL_BOUND_S)
                with concurrent.futures.ThreadPoolExecutor(len(PROMPTS)) as pool:
                    got = list(pool.map(lambda ip: (dp0, dp1)[ip[0] % 2].complete(ip[1]), enumerate(PROMPTS)))
                self.assertEqual(got, expected, f"after kill {n + 1}")
            self.assertEqual(metric(dp0, "moeserve:group_restarts_total"), 1)  # each counts its own rank's
            self.assertEqual(metric(dp1, "moeserve:group_restarts_total"), 1)
        finally:
            if dp1 is not None:
                dp1.assert_stops_cleanly(self)
            dp0.assert_stops_cleanly(self)

    def test_dp_independent(self):
        # DP without EP: each DP group holds every expert, so the engines step on their own.
        # Without self-healing a dead engine stays lost (heal_dp_independent: restarted).
        s = Server("--data-parallel-size", "2", "--distributed-timeout-ms", "3000", "--max-rank-restarts", "0")
        try:
            # An uneven load (one long request on top): in lock-step the idle engine would run dummy
            # steps while the other decodes; here it runs none.
            with concurrent.futures.ThreadPoolExecutor(2) as pool:
                long_one = pool.submit(s.complete, PROMPTS[0], 24)
                time.sleep(0.05)
                self.check_equal_outputs(s, 2, extra_tokens=24)
                self.assertTrue(long_one.result(TIMEOUT).startswith(reference_texts()[0]))
            m = s.metrics()
            dummy = per_engine(m, "moeserve:engine_steps_total", phase="dummy")
            self.assertEqual(sum(dummy.values()), 0, dummy)
            control = per_engine(m, "moeserve:dp_control_seconds_total")
            self.assertEqual(sum(control.values()), 0, control)
            self.assertNotIn("DP lock-step", s.log_text())

            # Kill engine 1's rank while it streams: that request fails, engine 0 keeps serving.
            r = self.long_stream(s)
            routed = per_engine(s.metrics(), "vllm:num_requests_running")
            victim = max(routed, key=routed.get)  # the engine running the stream
            os.kill(s.rank_pids()[victim], signal.SIGKILL)
            body = r.read().decode()  # ends (error event + [DONE]) rather than hanging
            self.assertIn('"error"', body)
            self.assertTrue(body.rstrip().endswith("data: [DONE]"))
            self.assertEqual(s.request("GET", "/health")[0], 503)  # the deployment is degraded
            expected = reference_texts()
            self.assertEqual(s.complete_all(PROMPTS), expected)  # the survivor answers everything
            status, streamed = s.request("POST", "/v1/completions", {"prompt": "hi", "max_tokens": 2, "stream": True})
            self.assertEqual(status, 200, streamed)
            self.assertIn(f"rank {victim})", s.log_text())
        finally:
            s.assert_stops_cleanly(self)

    def test_kill_rank(self):
        s = Server("--data-parallel-size", "2", "--enable-expert-parallel", "--distributed-timeout-ms", "3000",
                   "--max-rank-restarts", "0")
        try:
            r = self.long_stream(s)
            start = time.time()
            os.kill(s.rank_pids()[1], signal.SIGKILL)
            body = r.read().decode()  # ends (error event + [DONE]) rather than hanging
            self.assertIn('"error"', body)
            self.assertTrue(body.rstrip().endswith("data: [DONE]"))
            deadline = time.time() + 15
            while s.request("GET", "/health")[0] != 503 and time.time() < deadline:
                time.sleep(0.05)
            self.assertEqual(s.request("GET", "/health")[0], 503)
            status, _ = s.request("POST", "/v1/completions", {"prompt": "hi", "max_tokens": 2})
            self.assertEqual(status, 503)
            print(f"\nkilled rank noticed in {time.time() - start:.2f} s", file=sys.stderr)
        finally:
            s.assert_stops_cleanly(self)

    def test_desync(self):
        """The desync guard (guarded_comm.h) in a real dp=2 + EP deployment: a test hook makes rank 1
        leave out its DP vote all-gather of round 200 (the engines vote every round, idle or not).
        Both ranks fail at the next round with the guard's line naming both sides, long before the
        60 s --distributed-timeout-ms. Both processes live on: the group re-forms (its next generation
        runs without the hook), /health is 200 again and the texts equal the reference."""
        env = dict(os.environ, MOESERVE_DEBUG_SKIP_COLLECTIVE="dp:1:200:0")
        start = time.time()
        s = Server("--data-parallel-size", "2", "--enable-expert-parallel", "--distributed-timeout-ms", "60000",
                   env=env, wait=False)
        try:
            deadline = time.time() + 30
            while time.time() < deadline and s.log_text().count("ranks out of step") < 2:
                time.sleep(0.05)
            log = s.log_text()
            lines = [l for l in log.splitlines() if "ranks out of step" in l]
            self.assertGreaterEqual(len(lines), 2, log[-3000:])
            for line in lines[:2]:
                self.assertIn("rank 0 ran collective", line)
                self.assertIn("rank 1 ran collective", line)
            print(f"\nguard fired {time.time() - start:.2f} s after the launch: {lines[0]}", file=sys.stderr)
            deadline = time.time() + 15
            while s.port is None and time.time() < deadline:
                m = re.search(r"listening on https?://\S+?:(\d+) ", s.log_text())
                s.port = int(m.group(1)) if m else None
                time.sleep(0.05)
            self.assertIsNotNone(s.port, s.log_text()[-3000:])
            s.wait_healthy(HEAL_BOUND_S)
            self.assertIn("the group re-formed (generation 1)", s.log_text())
            self.assertEqual(s.complete_all(PROMPTS), reference_texts())
            self.assertEqual(metric(s, "moeserve:group_restarts_total"), 0)  # nobody died
        finally:
            s.assert_stops_cleanly(self)

    def check_heals(self, s, victims):
        """Kills each of `victims` (global ranks) in turn while a stream runs; each time the stream
        ends with an error and the deployment serves the reference texts again within HEAL_BOUND_S.
        Nothing leaks: descriptors of the server's processes, /dev/shm entries. Returns the times
        from each kill to /health 200."""
        expected = reference_texts()
        with log_tail_on_failure(s):
            self.assertEqual(s.complete_all(PROMPTS), expected)
            fds_before, shm_before = settled_descriptors(s), set(os.listdir("/dev/shm"))
            times = []
            for n, victim in enumerate(victims):
                r = self.long_stream(s)
                start = time.time()
                os.kill(rank_pid(s, victim), signal.SIGKILL)
                body = r.read().decode()  # ends (error event + [DONE]) rather than hanging
                self.assertIn('"error"', body, f"kill {n + 1} (rank {victim})")
                self.assertTrue(body.rstrip().endswith("data: [DONE]"), body[-300:])
                s.wait_healthy(HEAL_BOUND_S)
                times.append(time.time() - start)
                self.assertEqual(s.complete_all(PROMPTS), expected, f"after kill {n + 1} (rank {victim})")
            self.assertEqual(metric(s, "moeserve:group_restarts_total"), len(victims))
            # Fewer is no leak: a connection of the first checks may still have been open at the
            # count before, and a leak shows as more.
            self.assertLessEqual(settled_descriptors(s), fds_before)
            self.assertEqual(set(os.listdir("/dev/shm")) - shm_before, set())
        times.sort()
        print(f"\nrecovery after a kill: p50 {times[len(times) // 2]:.2f} s, max {times[-1]:.2f} s "
              f"over {len(times)} kills", file=sys.stderr)
        return times

    def test_heal(self):
        s = Server("--data-parallel-size", "2", "--enable-expert-parallel", "--distributed-timeout-ms", "3000")
        try:
            self.check_heals(s, [1, 0, 1, 0, 1])
        finally:
            s.assert_stops_cleanly(self)

    def test_heal_tp(self):
        s = Server("--tensor-parallel-size", "2", "--distributed-timeout-ms", "3000")
        try:
            self.check_heals(s, [1, 0, 1, 0])
        finally:
            s.assert_stops_cleanly(self)

    def test_heal_dp_independent(self):
        # DP without EP, tp=2: a dead rank's DP group re-forms alone; the other engine serves on.
        s = Server("--data-parallel-size", "2", "--tensor-parallel-size", "2", "--distributed-timeout-ms", "3000")
        expected = reference_texts()
        try:
            with log_tail_on_failure(s):
                self.assertEqual(s.complete_all(PROMPTS), expected)
                fds_before, shm_before = settled_descriptors(s), set(os.listdir("/dev/shm"))
                for n, victim in enumerate([3, 2, 1]):  # group 1's follower and leader, group 0's follower
                    # Least outstanding tokens: the first stream goes to engine 0, the second to 1.
                    streams = [self.long_stream(s), self.long_stream(s)]
                    os.kill(rank_pid(s, victim), signal.SIGKILL)
                    bodies = [r.read().decode() for r in streams]
                    failed = ['"error"' in body for body in bodies]
                    self.assertEqual(failed, [victim < 2, victim >= 2], f"kill {n + 1} (rank {victim})")
                    self.assertTrue(all(body.rstrip().endswith("data: [DONE]") for body in bodies))
                    # The other DP group takes requests while the victim's re-forms.
                    self.assertEqual(s.request("POST", "/v1/completions", {"prompt": "hi", "max_tokens": 2})[0], 200)
                    s.wait_healthy(HEAL_BOUND_S)
                    self.assertEqual(s.complete_all(PROMPTS), expected, f"after kill {n + 1} (rank {victim})")
                self.assertEqual(metric(s, "moeserve:group_restarts_total"), 3)
                self.assertLessEqual(settled_descriptors(s), fds_before)
                self.assertEqual(set(os.listdir("/dev/shm")) - shm_before, set())
                # Only the victim's group re-formed: engine 1's leader after kill 1 (kill 2 replaced it),
                # engine 0's after kill 3 only.
                log = s.log_text()
                self.assertEqual(log.count("engine 1: the group re-formed"), 1)
                self.assertEqual(log.count("engine 0: the group re-formed"), 1)
        finally:
            s.assert_stops_cleanly(self)

    def test_crash_loop(self):
        env = dict(os.environ, MOESERVE_DEBUG_EXIT_ON_REJOIN="1")
        s = Server("--data-parallel-size", "2", "--enable-expert-parallel", "--distributed-timeout-ms", "3000",
                   "--max-rank-restarts", "2", env=env)
        try:
            os.kill(rank_pid(s, 1), signal.SIGKILL)
            deadline = time.time() + HEAL_BOUND_S
            status, body = s.request("GET", "/health")
            while b"restarted 2 times in a row" not in body and time.time() < deadline:
                time.sleep(0.1)
                status, body = s.request("GET", "/health")
            self.assertEqual(status, 503)
            self.assertIn("restarted 2 times in a row", body.decode())
            self.assertIn("is not restarted (--max-rank-restarts 2)", s.log_text())
            status, _ = s.request("POST", "/v1/completions", {"prompt": "hi", "max_tokens": 2})
            self.assertEqual(status, 503)
            self.assertEqual(metric(s, "moeserve:group_restarts_total"), 2)
        finally:
            s.assert_stops_cleanly(self)
        # Independent DP groups (no EP): only the crash-looping rank's group is given up.
        s = Server("--data-parallel-size", "2", "--distributed-timeout-ms", "3000", "--max-rank-restarts", "2",
                   env=env)
        try:
            os.kill(rank_pid(s, 1), signal.SIGKILL)
            deadline = time.time() + HEAL_BOUND_S
            while "is not restarted (--max-rank-restarts 2)" not in s.log_text() and time.time() < deadline:
                time.sleep(0.1)
            status, body = s.request("GET", "/health")
            self.assertEqual(status, 503)
            self.assertIn("restarted 2 times in a row", body.decode())
            self.assertEqual(s.complete_all(PROMPTS), reference_texts())  # engine 0 serves on
        finally:
            s.assert_stops_cleanly(self)

    def test_eplb(self):
        skew = {**os.environ, "MOESERVE_DEBUG_ROUTER_SKEW": EPLB_SKEW}
        ref = Server(env=skew)
        try:
            expected = ref.complete_all(PROMPTS)
        finally:
            ref.assert_stops_cleanly(self)
        config = json.dumps({"window_size": 8, "step_interval": 8, "num_redundant_experts": 2, "log_balancedness": True})
        s = Server("--data-parallel-size", "2", "--enable-expert-parallel", "--enable-eplb", "--eplb-config", config,
                   "--distributed-timeout-ms", "3000", env=skew)
        try:
            for _ in range(40):  # bounded: a decision every 8 forwards, each round runs ~10 per engine
                self.assertEqual(s.complete_all(PROMPTS), expected)  # before, during and after the moves
                m = s.metrics()
                ratio = per_engine(m, "moeserve:eplb_imbalance_ratio")
                decisions = per_engine(m, "moeserve:eplb_decisions_total")
                rebalances = per_engine(m, "moeserve:eplb_rebalances_total")
                if rebalances[0] >= 1 and decisions[0] >= 3:
                    break
            # The balance before any move is the first decision's log line: a metrics poll may come
            # only after the first move has landed (a busy machine runs several decisions a round).
            first = re.search(r"rank loads \[[0-9 ]*\], max/mean ([0-9.]+)", s.log_text())
            self.assertIsNotNone(first)
            before = float(first.group(1))
            self.assertGreater(before, 1.8)  # the two hot experts are both on rank 0 at first
            self.assertGreaterEqual(rebalances[0], 1)
            self.assertLess(ratio[0], 1.3)
            if decisions[0] == decisions[1]:  # an engine idle in dummy steps may not have sent its latest stats
                self.assertEqual(ratio[0], ratio[1])  # both engines of the EP group saw the same loads
            self.assertGreater(per_engine(m, "moeserve:eplb_moved_experts_total")[0], 0)
            self.assertEqual(len(per_engine(m, "moeserve:eplb_expert_load", ep_rank="1")), 2)
            self.assertIn("max/mean", s.log_text())
            print(f"EPLB: max/mean {before:.3f} -> {ratio[0]:.3f}, {decisions[0]:.0f} decisions", file=sys.stderr)
            # A rank killed after the move: the group re-forms on the initial placement (the new
            # process starts there, the survivor goes back), texts stay the same, and it moves again.
            r = self.long_stream(s)
            os.kill(rank_pid(s, 1), signal.SIGKILL)
            self.assertIn('"error"', r.read().decode())  # the failure is seen: /health then waits for the re-formed group
            s.wait_healthy(HEAL_BOUND_S)
            moved = rebalances[0]
            for _ in range(40):
                self.assertEqual(s.complete_all(PROMPTS), expected)
                if per_engine(s.metrics(), "moeserve:eplb_rebalances_total")[0] > moved:
                    break
            self.assertGreater(per_engine(s.metrics(), "moeserve:eplb_rebalances_total")[0], moved)
        finally:
            s.assert_stops_cleanly(self)

    def test_validate(self):
        cases = [
            (["--data-parallel-size", "2", "--data-parallel-size-local", "3"], "exceeds --data-parallel-size"),
            (["--data-parallel-size", "2", "--data-parallel-start-rank", "1", "--data-parallel-size-local", "1"], "--headless"),
            (["--data-parallel-size", "2", "--data-parallel-size-local", "1"], "--data-parallel-address"),
            (["--data-parallel-size", "2", "--data-parallel-size-local", "1", "--data-parallel-address", "127.0.0.1"], "MOESERVE_RANK_PLANE_KEY"),
            (["--tensor-parallel-size", "3"], "num_attention_heads"),
            (["--headless", "--data-parallel-size", "2", "--data-parallel-start-rank", "1"], "--data-parallel-rpc-port"),
            (["--data-parallel-size", "2", "--data-parallel-rank", "1"], "--data-parallel-rank 1 needs --data-parallel-rpc-port"),
            (["--data-parallel-size", "2", "--data-parallel-rank", "2"], "--data-parallel-rank must be in [0, 2)"),
            (["--data-parallel-size", "2", "-dpn", "0", "--headless", "--data-parallel-rpc-port", "1"], "does not go with --headless"),
            (["--enable-eplb"], "--enable-eplb balances experts between expert-parallel ranks"),
            (["--eplb-config", "{}"], "--eplb-config: set, but --enable-eplb is not"),
            (["--enable-eplb", "--eplb-config", '{"window_size": 0}'], "'window_size' must be an integer"),
            (["--enable-eplb", "--eplb-config", '{"policy": "x"}'], "field 'policy' is not supported"),
            (["--data-parallel-size", "2", "--enable-expert-parallel", "--enable-eplb", "--eplb-config",
              '{"num_redundant_experts": 1}'], "must be a multiple of the expert-parallel size"),
        ]
        for flags, message in cases:
            out = subprocess.run([ARGS.moeserve, "serve", "--model", ARGS.model, *COMMON, *flags], capture_output=True, timeout=30)
            self.assertNotEqual(out.returncode, 0, flags)
            self.assertIn(message, out.stderr.decode(), flags)
        # Nodes that disagree (here --block-size) are refused with a message, not a hang.
        layout = [ARGS.moeserve, "serve", "--model", ARGS.model, *COMMON, "--data-parallel-size", "2", "--data-parallel-size-local", "1",
                  "--data-parallel-address", "127.0.0.1", "--distributed-timeout-ms", "5000"]
        env = {**os.environ, "MOESERVE_RANK_PLANE_KEY": RANK_PLANE_KEY}
        head_log = harness.child_log()
        head = subprocess.Popen([*layout, "--port", "0", "--data-parallel-rpc-port", "0"], stdout=subprocess.DEVNULL,
                                stderr=head_log, env=env)
        rpc = wait_for_store_port(head, head_log)
        node = subprocess.run([*layout, "--data-parallel-rpc-port", str(rpc), "--headless", "--data-parallel-start-rank", "1",
                               "--block-size", "32"], capture_output=True, timeout=30, env=env)
        head.wait(timeout=30)
        head_log.seek(0)
        head_err = head_log.read()
        self.assertNotEqual(node.returncode, 0)
        # Whichever side sees the mismatch first names it; the other may only see the peer leave
        # (e.g. "lost the rendezvous store" when the head aborts first).
        both = node.stderr.decode() + head_err.decode()
        self.assertIn("disagree on the model or parallel configuration", both)
        self.assertNotEqual(head.returncode, 0)
        self.assertIn("during startup", head_err.decode())



class Netns(unittest.TestCase):
    @contextlib.contextmanager
    def two_hosts(self):
        """A head (DP rank 0) and a --headless node (DP rank 1) in two network namespaces joined by
        a veth pair: yields (head Server, node Popen), both healthy, answering the reference texts."""
        pid = os.getpid()
        a, b = f"msw_a_{pid}", f"msw_b_{pid}"
        va, vb = f"mswa{pid % 100000}", f"mswb{pid % 100000}"
        net = f"10.201.{pid % 200 + 20}"
        addr_a, addr_b = net + ".1", net + ".2"
        try:
            if sh(f"ip netns add {a}") != 0 or sh(f"ip netns add {b}") != 0:
                self.skipTest("cannot create network namespaces here (needs root / CAP_NET_ADMIN)")
            for cmd in [f"ip link add {va} type veth peer name {vb}", f"ip link set {va} netns {a}", f"ip link set {vb} netns {b}",
                        f"ip -n {a} addr add {addr_a}/24 dev {va}", f"ip -n {b} addr add {addr_b}/24 dev {vb}",
                        f"ip -n {a} link set {va} up", f"ip -n {b} link set {vb} up",
                        f"ip -n {a} link set lo up", f"ip -n {b} link set lo up"]:
                if sh(cmd) != 0:
                    self.skipTest("cannot set up the veth pair: " + cmd)
            expected = reference_texts()
            layout = ["--data-parallel-size", "2", "--data-parallel-size-local", "1", "--enable-expert-parallel",
                      "--data-parallel-address", addr_a, "--distributed-timeout-ms", "8000"]
            key = {"MOESERVE_RANK_PLANE_KEY": RANK_PLANE_KEY}
            head = Server(*layout, "--data-parallel-start-rank", "0", "--data-parallel-rpc-port", "0", prefix=("ip", "netns", "exec", a),
                          host=addr_a, wait=False, env={**os.environ, **key, "GLOO_SOCKET_IFNAME": va})
            rpc = wait_for_store_port(head.proc, head.log)
            node_log = harness.child_log()
            self.node_argv = ["ip", "netns", "exec", b, ARGS.moeserve, "serve", "--model", ARGS.model, "--headless",
                              *COMMON, *layout, "--data-parallel-rpc-port", str(rpc), "--data-parallel-start-rank", "1"]
            self.node_env = {**os.environ, **key, "GLOO_SOCKET_IFNAME": vb}
            node = subprocess.Popen(self.node_argv, stdout=subprocess.DEVNULL, stderr=node_log, env=self.node_env)
            try:
                head.wait_healthy(60)
                got = head.complete_all(PROMPTS[:3])  # concurrent: both engines get some
                self.assertEqual(got, expected[:3])
                m = head.metrics()
                generated = per_engine(m, "vllm:generation_tokens_total")
                self.assertGreater(generated.get(1, 0), 0, generated)  # the headless node's engine answered
                yield head, node
            finally:
                head.stop(5)
                if node.poll() is None:
                    node.kill()
                    node.wait(5)
                node_log.seek(0)
                sys.stderr.write(node_log.read().decode(errors="replace")[-2000:] if ARGS.verbose_logs else "")
        finally:
            sh(f"ip netns del {a}")
            sh(f"ip netns del {b}")

    def test_two_hosts(self):
        with self.two_hosts() as (head, node):
            # Kill the headless node: the head reports it (503) within a bounded time, no hang.
            start = time.time()
            node.kill()
            node.wait(5)
            deadline = time.time() + 30
            while head.request("GET", "/health")[0] != 503 and time.time() < deadline:
                time.sleep(0.1)
            self.assertEqual(head.request("GET", "/health")[0], 503)
            status, _ = head.request("POST", "/v1/completions", {"prompt": "hi", "max_tokens": 2})
            self.assertEqual(status, 503)
            print(f"\nheadless node loss noticed in {time.time() - start:.2f} s", file=sys.stderr)
            head.assert_stops_cleanly(self)

    def test_headless_rank_heals(self):
        """SIGKILL of the headless node's rank process: the node restarts it, the group re-forms
        across the two hosts, and the head serves the reference texts again."""
        with self.two_hosts() as (head, node):
            with open(f"/proc/{node.pid}/task/{node.pid}/children") as f:  # `ip netns exec` execs the node
                rank = int(f.read().split()[0])
            start = time.time()
            os.kill(rank, signal.SIGKILL)
            time.sleep(0.5)
            head.wait_healthy(HEAL_BOUND_S)
            print(f"\nheadless rank restarted, group serving again in {time.time() - start:.2f} s", file=sys.stderr)
            self.assertEqual(head.complete_all(PROMPTS[:3]), reference_texts()[:3])
            self.assertIsNone(node.poll())  # the node lives on
            head.assert_stops_cleanly(self)

    def test_lost_node_heals(self):
        """SIGKILL of the headless node's process, its rank dying with it (a lost node), then the
        node started again with the same command, as its supervisor (systemd) would: its rank
        rejoins the group, and the head serves the reference texts again."""
        with self.two_hosts() as (head, node):
            start = time.time()
            node.kill()
            node.wait(5)
            again_log = harness.child_log()
            again = subprocess.Popen(self.node_argv, stdout=subprocess.DEVNULL, stderr=again_log, env=self.node_env)
            try:
                head.wait_healthy(HEAL_BOUND_S)
                print(f"\nlost node started again, group serving in {time.time() - start:.2f} s", file=sys.stderr)
                self.assertEqual(head.complete_all(PROMPTS[:3]), reference_texts()[:3])
                again_log.seek(0)
                self.assertIn("this node's ranks were in a group before: they rejoin it", again_log.read().decode())
                head.assert_stops_cleanly(self)
                self.assertEqual(again.wait(30), 0)  # its rank was told to stop with the deployment
            finally:
                if again.poll() is None:
                    again.kill()
                    again.wait(5)


if __name__ == "__main__":
    p = argparse.ArgumentParser()
    p.add_argument("--moeserve", required=True)
    p.add_argument("--model", required=True)
    p.add_argument("--verbose-logs", action="store_true")
    p.add_argument("--suite", required=True, choices=["dp_ep", "dp_tp_ep", "tp", "pd_hybrid", "netns", "kill", "validate", "external_lb",
                                                   "dp_independent", "desync", "heal", "heal_tp", "heal_dp_independent", "crash_loop",
                                                   "netns_heal", "netns_lost_node", "eplb", "families"])
    p.add_argument("--family-models", nargs="*", default=[])
    ARGS, rest = p.parse_known_args()
    names = {"dp_ep": "Parallel.test_dp_ep", "dp_tp_ep": "Parallel.test_dp_tp_ep", "tp": "Parallel.test_tp", "pd_hybrid": "Parallel.test_pd_hybrid",
             "kill": "Parallel.test_kill_rank", "validate": "Parallel.test_validate", "netns": "Netns.test_two_hosts",
             "external_lb": "Parallel.test_external_lb", "dp_independent": "Parallel.test_dp_independent", "desync": "Parallel.test_desync",
             "heal": "Parallel.test_heal", "heal_tp": "Parallel.test_heal_tp",
             "heal_dp_independent": "Parallel.test_heal_dp_independent", "crash_loop": "Parallel.test_crash_loop",
             "netns_heal": "Netns.test_headless_rank_heals", "netns_lost_node": "Netns.test_lost_node_heals",
             "eplb": "Parallel.test_eplb", "families": "Parallel.test_families"}
    suite = unittest.defaultTestLoader.loadTestsFromName(names[ARGS.suite], sys.modules[__name__])
    ok = unittest.TextTestRunner(verbosity=2).run(suite).wasSuccessful()
    sys.exit(0 if ok else 1)
