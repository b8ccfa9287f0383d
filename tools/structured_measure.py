#!/usr/bin/python3
"""Decode speed with and without a structured-output constraint, in one server run.

Starts `moeserve serve` on a model, then for concurrency 1 and 32 streams requests without a
constraint, with a new JSON schema (cold: its grammar's mask cache is empty), with the same
schema again (warm), and without again; prints the mean time per output token (TPOT, from the
first to the last streamed token of each request) and the aggregate output tok/s.
Usage: structured_measure.py --moeserve B --model M [--threads 2] [--max-tokens 64 (c=32: half)]
"""
import argparse
import concurrent.futures
import http.client
import json
import socket
import subprocess
import tempfile
import time

def schema(kind, tag):
    """A JSON schema whose grammar text is unique to tag (so its first use is a cold cache)."""
    if kind == "typical":  # unbounded strings: the state inside a string repeats (cache hits)
        return {"type": "object", "properties": {
            "title_" + tag: {"type": "string"}, "year": {"type": "integer"},
            "tags": {"type": "array", "items": {"type": "string"}}}, "required": ["title_" + tag, "year", "tags"]}
    # bounded strings: every character position is a new state (the cache's worst case)
    return {"type": "object", "properties": {"v_" + tag: {"type": "array", "items": {"type": "string", "maxLength": 200}}},
            "required": ["v_" + tag]}


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def one(port, schema, max_tokens, seed):
    body = {"model": "m", "prompt": f"Request {seed}: describe a film as JSON.", "max_tokens": max_tokens,
            "temperature": 1.0, "seed": seed, "stream": True}
    if schema is None:
        body["ignore_eos"] = True
    else:
        body["guided_json"] = schema
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=900)
    c.request("POST", "/v1/completions", body=json.dumps(body), headers={"Content-Type": "application/json"})
    r = c.getresponse()
    times = []
    buf = b""
    while True:
        chunk = r.read1(65536)
        if not chunk:
            break
        buf += chunk
        while b"\n\n" in buf:
            event, buf = buf.split(b"\n\n", 1)
            if event.startswith(b"data: {") and b'"text":""' not in event:
                times.append(time.monotonic())
    c.close()
    return times


def run(port, schema, concurrency, max_tokens):
    start = time.monotonic()
    with concurrent.futures.ThreadPoolExecutor(concurrency) as ex:
        results = list(ex.map(lambda k: one(port, schema, max_tokens, k), range(concurrency)))
    wall = time.monotonic() - start
    tpots = [(t[-1] - t[0]) / (len(t) - 1) for t in results if len(t) > 1]
    tokens = sum(len(t) for t in results)
    return sum(tpots) / len(tpots) * 1000, tokens / wall, tokens


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--moeserve", required=True)
    p.add_argument("--model", required=True)
    p.add_argument("--threads", default="2")
    p.add_argument("--max-tokens", type=int, default=64)
    a = p.parse_args()
    port = free_port()
    log = tempfile.TemporaryFile()
    proc = subprocess.Popen([a.moeserve, "serve", "--model", a.model, "--port", str(port), "--threads", a.threads,
                             "--served-model-name", "m", "--max-model-len", "1024", "--kv-cache-memory", "2G"],
                            stdout=subprocess.DEVNULL, stderr=log)
    try:
        deadline = time.time() + 300
        while time.time() < deadline:
            try:
                c = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
                c.request("GET", "/health")
                if c.getresponse().status == 200:
                    break
            except OSError:
                time.sleep(0.5)
        one(port, None, 4, 0)  # warm up
        print("| concurrency | constraint | mean TPOT ms | output tok/s | tokens |")
        print("| --- | --- | --- | --- | --- |")
        for concurrency, max_tokens in ((1, a.max_tokens), (32, a.max_tokens // 2)):
            for kind in ("typical", "bounded"):
                tag = f"{concurrency}{kind}"
                for name, sch in (("none", None), (f"{kind} schema, cold", schema(kind, tag)),
                                  (f"{kind} schema, warm", schema(kind, tag)), ("none", None)):
                    tpot, tps, tokens = run(port, sch, concurrency, max_tokens)
                    print(f"| {concurrency} | {name} | {tpot:.1f} | {tps:.1f} | {tokens} |", flush=True)
    finally:
        proc.terminate()
        proc.wait(60)


if __name__ == "__main__":
    main()
