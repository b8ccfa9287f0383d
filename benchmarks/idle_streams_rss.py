#!/usr/bin/python3
"""Memory held per open streaming request (issue 17: "RSS per 1000 idle streams").

Starts `moeserve serve` on 127.0.0.1 (--port 0) with a few running slots (--max-num-seqs), opens
STREAMS streaming completions on their own sockets and reads nothing back, so all but the running
few wait in the engine's queue with their HTTP connection, request state and prompt held: the
idle streams of a server at that concurrency. It reports the RSS of the server's process tree
before, with all of them admitted (vllm:num_requests_running + waiting = STREAMS) and after the
clients hang up (every request must be cancelled: running + waiting back to 0), per 1000 streams.
The KV cache is allocated at start (--kv-cache-memory), so the delta is the per-request cost.
  /usr/bin/python3 benchmarks/idle_streams_rss.py --bin build/src/moeserve/cli/moeserve --model DIR
"""
import argparse
import json
import os
import re
import resource
import socket
import subprocess
import sys
import tempfile
import time


def tree_rss_kib(pid):
    """VmRSS of pid and all its descendants, KiB."""
    children = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
        except OSError:
            continue
        children.setdefault(ppid, []).append(int(d))
    total, todo = 0, [pid]
    while todo:
        p = todo.pop()
        todo.extend(children.get(p, []))
        try:
            with open(f"/proc/{p}/status") as f:
                m = re.search(r"VmRSS:\s+(\d+) kB", f.read())
            total += int(m.group(1)) if m else 0
        except OSError:
            pass
    return total


def metric(port, name):
    s = socket.create_connection(("127.0.0.1", port), timeout=30)
    s.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    data = b""
    while chunk := s.recv(65536):
        data += chunk
    s.close()
    vals = re.findall(rf"^{re.escape(name)}(?:{{[^}}]*}})? ([0-9.e+]+)$", data.decode(), re.M)
    return sum(float(v) for v in vals)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default="build/src/moeserve/cli/moeserve")
    ap.add_argument("--model", required=True)
    ap.add_argument("--streams", type=int, default=1000)
    ap.add_argument("--running", type=int, default=8, help="--max-num-seqs")
    ap.add_argument("--prompt-words", type=int, default=100, help="words per prompt (~tokens)")
    ap.add_argument("--max-tokens", type=int, default=4096)
    a = ap.parse_args()
    need = a.streams + 256
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < need:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(need, hard), hard))
    log = tempfile.NamedTemporaryFile(prefix="idle-streams-", suffix=".log", delete=False)
    server = subprocess.Popen(
        [a.bin, "serve", "--model", a.model, "--served-model-name", "m", "--host", "127.0.0.1", "--port", "0",
         "--max-num-seqs", str(a.running), "--max-connections", str(a.streams + 64), "--kv-cache-memory", "256MiB",
         "--max-model-len", str(a.prompt_words * 4 + a.max_tokens)],
        stdout=subprocess.DEVNULL, stderr=log)
    port = None
    for _ in range(1200):  # 120 s
        text = open(log.name, errors="replace").read()
        m = re.search(r"listening on https?://[^:]+:(\d+) ", text)
        if m:
            port = int(m.group(1))
            break
        if server.poll() is not None:
            sys.exit(f"server exited: {text[-2000:]}")
        time.sleep(0.1)
    if port is None:
        sys.exit("server did not start in 120 s")
    time.sleep(1.0)
    before = tree_rss_kib(server.pid)
    words = " ".join(f"w{i % 97}" for i in range(a.prompt_words))
    socks = []
    for i in range(a.streams):
        body = json.dumps({"model": "m", "prompt": f"{i} {words}", "max_tokens": a.max_tokens, "stream": True,
                           "ignore_eos": True}).encode()
        s = socket.create_connection(("127.0.0.1", port), timeout=30)
        s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                  + f"Content-Length: {len(body)}\r\n\r\n".encode() + body)
        socks.append(s)
    admitted = 0
    for _ in range(600):  # 60 s
        admitted = metric(port, "vllm:num_requests_running") + metric(port, "vllm:num_requests_waiting")
        if admitted >= a.streams:
            break
        time.sleep(0.1)
    time.sleep(1.0)
    held = tree_rss_kib(server.pid)
    for s in socks:
        s.close()
    left = None
    for _ in range(600):  # 60 s
        left = metric(port, "vllm:num_requests_running") + metric(port, "vllm:num_requests_waiting")
        if left == 0:
            break
        time.sleep(0.1)
    time.sleep(1.0)
    after = tree_rss_kib(server.pid)
    server.terminate()
    rc = server.wait(timeout=60)
    print(f"streams {a.streams} (running {a.running}, prompt ~{a.prompt_words} words, max_tokens {a.max_tokens}); "
          f"admitted {admitted:.0f}; left after hang-up {left:.0f}; server exit {rc}")
    print(f"RSS KiB: before {before}, with the streams {held}, after hang-up {after}")
    print(f"per 1000 streams: {(held - before) * 1000 / a.streams / 1024:.1f} MiB; "
          f"not returned after hang-up: {(after - before) * 1000 / a.streams / 1024:.1f} MiB per 1000")
    os.unlink(log.name)
    return 0 if admitted >= a.streams and left == 0 and rc == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
