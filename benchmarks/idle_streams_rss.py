#!/usr/bin/python3
"""Memory held per open streaming request (issue 17: "RSS per 1000 idle streams").

Starts `moeserve serve` on 127.0.0.1 (--port 0) with a few running slots (--max-num-seqs), opens
STREAMS streaming completions on their own sockets and reads nothing back, so all but the running
few wait in the engine's queue with their HTTP connection, request state and prompt held: the
idle streams of a server at that concurrency. It reports the RSS of the server's process tree
before, with all of them admitted (vllm:num_requests_running + waiting = STREAMS) and after the
clients hang up (every request must be cancelled: running + waiting back to 0), per 1000 streams;
then the same again for --rounds rounds: memory kept after a hang-up that does not grow from round
to round is the allocator's, not a leak. Round 1 also pays one-off costs (step buffers grown to the
largest batch, expert weights faulted in), so the per-stream figure is the last round's.
The KV cache is allocated at start but its pages become resident as the running few write them,
so it is kept small (--kv-cache-memory 16 MiB): at most that much of a delta is KV.
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
    """VmRSS of pid and of each of its descendants, KiB: {pid: (name, rss)}."""
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
    out, todo = {}, [pid]
    while todo:
        p = todo.pop()
        todo.extend(children.get(p, []))
        try:
            with open(f"/proc/{p}/status") as f:
                text = f.read()
            m = re.search(r"VmRSS:\s+(\d+) kB", text)
            out[p] = (re.search(r"Name:\s+(\S+)", text).group(1), int(m.group(1)) if m else 0)
        except OSError:
            pass
    return out


def describe(rss):
    return f"{sum(r for _, r in rss.values())} (" + ", ".join(f"{n} {r}" for n, r in rss.values()) + ")"


def delta_mib_per_1000(a, b, streams):
    return (sum(r for _, r in b.values()) - sum(r for _, r in a.values())) * 1000 / streams / 1024


def metric(port, name):
    s = socket.create_connection(("127.0.0.1", port), timeout=30)
    s.sendall(b"GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
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
    ap.add_argument("--max-tokens", type=int, default=512)
    ap.add_argument("--kv-cache-memory", default="16MiB")
    ap.add_argument("--rounds", type=int, default=3, help="open and hang up STREAMS this many times")
    a = ap.parse_args()
    need = a.streams + 256
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < need:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(need, hard), hard))
    log = tempfile.NamedTemporaryFile(prefix="idle-streams-", suffix=".log", delete=False)
    server = subprocess.Popen(
        [a.bin, "serve", "--model", a.model, "--served-model-name", "m", "--host", "127.0.0.1", "--port", "0",
         "--max-num-seqs", str(a.running), "--max-connections", str(a.streams + 64), "--kv-cache-memory", a.kv_cache_memory,
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
    # Warm-up: the first forwards fault in the weights and size the step buffers; neither is per stream.
    warm = socket.create_connection(("127.0.0.1", port), timeout=120)
    body = json.dumps({"model": "m", "prompt": "warm up", "max_tokens": 8, "ignore_eos": True}).encode()
    warm.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                 + f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode() + body)
    while warm.recv(65536):
        pass
    warm.close()
    time.sleep(1.0)
    before = tree_rss_kib(server.pid)
    words = " ".join(f"w{i % 97}" for i in range(a.prompt_words))

    def requests_in_engine():
        return metric(port, "vllm:num_requests_running") + metric(port, "vllm:num_requests_waiting")

    rounds = []  # (admitted, held rss, left after hang-up, rss after)
    for r in range(a.rounds):
        socks = []
        for i in range(a.streams):
            body = json.dumps({"model": "m", "prompt": f"{r} {i} {words}", "max_tokens": a.max_tokens,
                               "stream": True, "ignore_eos": True}).encode()
            s = socket.create_connection(("127.0.0.1", port), timeout=30)
            s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                      + f"Content-Length: {len(body)}\r\n\r\n".encode() + body)
            socks.append(s)
        admitted = 0
        for _ in range(600):  # 60 s
            admitted = requests_in_engine()
            if admitted >= a.streams:
                break
            time.sleep(0.1)
        time.sleep(1.0)
        held = tree_rss_kib(server.pid)
        for s in socks:
            s.close()
        left = None
        for _ in range(600):  # 60 s
            left = requests_in_engine()
            if left == 0:
                break
            time.sleep(0.1)
        time.sleep(1.0)
        rounds.append((admitted, held, left, tree_rss_kib(server.pid)))
    server.terminate()
    rc = server.wait(timeout=60)
    print(f"streams {a.streams} per round, {a.rounds} rounds (running {a.running}, prompt ~{a.prompt_words} "
          f"words, max_tokens {a.max_tokens}); server exit {rc}")
    print(f"RSS KiB (process tree, then each process): before {describe(before)}")
    for r, (admitted, held, left, after) in enumerate(rounds):
        print(f"round {r + 1}: admitted {admitted:.0f}, with the streams {describe(held)}; "
              f"{left:.0f} left after hang-up, then {describe(after)}")
    # Round 1 also grows the step buffers to the largest batch and faults in every expert's
    # weights (the warm-up request reaches only a few); from round 2 on the delta is the streams'.
    prev = rounds[-2][3] if len(rounds) > 1 else before
    _, held, _, after = rounds[-1]
    per_proc = ", ".join(f"{held[p][0]} {(held[p][1] - prev[p][1]) * 1000 / a.streams / 1024:.1f}"
                         for p in held if p in prev)
    print(f"per 1000 idle streams (round {len(rounds)}): {delta_mib_per_1000(prev, held, a.streams):.1f} MiB "
          f"({per_proc}); round 1: {delta_mib_per_1000(before, rounds[0][1], a.streams):.1f} MiB; "
          f"kept after the last hang-up: {delta_mib_per_1000(prev, after, a.streams):.1f} MiB per 1000")
    ok = all(adm >= a.streams and left == 0 for adm, _, left, _ in rounds)
    return 0 if ok and rc == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
