#!/usr/bin/python3
"""Self-healing groups (issue 31): the outage a killed rank costs. Starts `moeserve serve` with the
given layout, then KILLS times: starts a long stream, SIGKILLs one rank process (alternating over
the ranks), and measures from the kill to (a) the stream's error event, (b) /health 200 again and
(c) the first completion that succeeds after it. Prints p50/max of each. stdlib only.
With --victim api-server (serve flags with --api-server-count 2): SIGKILLs API server 1 instead and
measures from the kill to (b) the parent's "API server 1 serves again" line and (c) the first
completion after it (the other server answers meanwhile, so /health stays 200).

  benchmarks/recovery_bench.py --moeserve build/src/moeserve/cli/moeserve --model DIR \\
      [--kills 5] [--victim rank|api-server] [-- serve flags, default: --data-parallel-size 2
      --enable-expert-parallel]
"""
import argparse
import http.client
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time


def request(port, method, path, body=None, timeout=120):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    c.request(method, path, body=json.dumps(body) if body is not None else None,
              headers={"Content-Type": "application/json", "Connection": "close"})
    r = c.getresponse()
    payload = r.read()
    c.close()
    return r.status, payload


def children(pid):
    out = []
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/children") as f:
                out += [int(p) for p in f.read().split()]
        except FileNotFoundError:
            pass
    return out


def child_pid(server_pid, flag, value):
    """The child process whose argv has `flag value` (--rank N, --api-server-index N)."""
    for pid in children(server_pid):
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            argv = f.read().split(b"\0")
        if flag in argv and argv[argv.index(flag) + 1] == str(value).encode():
            return pid
    raise RuntimeError(f"no process with {flag.decode()} {value}")


def log_has(log, text):
    log.seek(0)
    return text.encode() in log.read()


def kill_api_server(proc, port, log, k):
    """SIGKILLs API server 1; the times from the kill to its restart serving and to a completion."""
    killed = time.time()
    os.kill(child_pid(proc.pid, b"--api-server-index", 1), signal.SIGKILL)
    while not log_has(log, f"API server 1 serves again (restart {k + 1})"):
        if time.time() > killed + 300 or proc.poll() is not None:
            log.seek(0)
            raise RuntimeError("API server 1 did not serve again: " + log.read().decode(errors="replace")[-3000:])
        time.sleep(0.01)
    serving = time.time() - killed
    while request(port, "POST", "/v1/completions", {"prompt": "Hi", "max_tokens": 4})[0] != 200:
        time.sleep(0.02)
    return serving, time.time() - killed


def wait_healthy(port, proc, deadline):
    while time.time() < deadline:
        if proc.poll() is not None:
            raise RuntimeError("the server exited")
        try:
            if request(port, "GET", "/health", timeout=5)[0] == 200:
                return time.time()
        except OSError:
            pass
        time.sleep(0.02)
    raise RuntimeError("not healthy in time")


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--moeserve", required=True)
    p.add_argument("--model", required=True)
    p.add_argument("--kills", type=int, default=5)
    p.add_argument("--ranks", type=int, default=2, help="ranks to kill in turn (global ranks 0..N-1)")
    p.add_argument("--victim", choices=["rank", "api-server"], default="rank")
    args, serve_flags = p.parse_known_args()
    serve_flags = [f for f in serve_flags if f != "--"] or ["--data-parallel-size", "2", "--enable-expert-parallel"]
    log = tempfile.TemporaryFile()
    proc = subprocess.Popen([args.moeserve, "serve", "--model", args.model, "--port", "0", "--served-model-name",
                             "m", *serve_flags], stdout=subprocess.DEVNULL, stderr=log)
    try:
        port, deadline = None, time.time() + 600
        while port is None and time.time() < deadline:
            log.seek(0)
            m = re.search(rb"listening on http://\S+?:(\d+) ", log.read())
            port = int(m.group(1)) if m else None
            time.sleep(0.05)
        wait_healthy(port, proc, time.time() + 600)
        error_s, healthy_s, served_s = [], [], []
        if args.victim == "api-server":
            while not log_has(log, "API servers ready"):  # one killed before the parent saw all ready stops all
                if time.time() > deadline or proc.poll() is not None:
                    raise RuntimeError("the API servers were not ready")
                time.sleep(0.05)
            for k in range(args.kills):
                serving, served = kill_api_server(proc, port, log, k)
                healthy_s.append(serving)
                served_s.append(served)
            for name, xs in (("serving again", healthy_s), ("first completion", served_s)):
                print(f"{name:16s} after the kill: p50 {statistics.median(xs):.3f} s, max {max(xs):.3f} s "
                      f"({len(xs)} kills: {' '.join(f'{x:.3f}' for x in xs)})")
            return 0
        for k in range(args.kills):
            c = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
            c.request("POST", "/v1/completions", body=json.dumps({"prompt": "Hello", "max_tokens": 2000, "ignore_eos": True,
                                                                   "stream": True}),
                      headers={"Content-Type": "application/json", "Connection": "close"})
            r = c.getresponse()
            r.read(6)
            killed = time.time()
            os.kill(child_pid(proc.pid, b"--rank", k % args.ranks), signal.SIGKILL)
            body = r.read().decode()
            error_s.append(time.time() - killed)
            assert '"error"' in body, body[-300:]
            healthy_s.append(wait_healthy(port, proc, killed + 300) - killed)
            while request(port, "POST", "/v1/completions", {"prompt": "Hi", "max_tokens": 4})[0] != 200:
                time.sleep(0.02)
            served_s.append(time.time() - killed)
            c.close()
        for name, xs in (("stream error", error_s), ("/health 200", healthy_s), ("first completion", served_s)):
            print(f"{name:16s} after the kill: p50 {statistics.median(xs):.3f} s, max {max(xs):.3f} s "
                  f"({len(xs)} kills: {' '.join(f'{x:.3f}' for x in xs)})")
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            proc.kill()
    return 0


if __name__ == "__main__":
    sys.exit(main())
