#!/usr/bin/env bash
# Integration: `moeserve bench serve` against the real `moeserve serve` with the tiny model on a
# port it binds itself: 8 prompts (32 in / 16 out) must all succeed and the result JSON must have
# every field. Every wait is bounded; the server is stopped by its pid.
set -euo pipefail
BIN="$1"
WORK="$2"
rm -rf "$WORK" && mkdir -p "$WORK"
timeout 120 "$BIN" make-model --arch qwen3_moe --size tiny --out "$WORK/tiny" > /dev/null
# --port 0: the server binds a free port and logs it (a port picked here could be taken meanwhile).
"$BIN" serve --model "$WORK/tiny" --port 0 --kv-cache-memory 256M > "$WORK/serve.log" 2>&1 &
SERVER=$!
trap 'kill $SERVER 2>/dev/null || true; wait $SERVER 2>/dev/null || true' EXIT
PORT=""
for _ in $(seq 1 240); do
  [ -z "$PORT" ] && PORT=$(sed -n 's|.*listening on http://[^ ]*:\([0-9]*\) .*|\1|p' "$WORK/serve.log" | head -1)
  if [ -n "$PORT" ] && curl -sf -m 1 "http://127.0.0.1:$PORT/health" > /dev/null; then break; fi
  sleep 0.25
done
timeout 180 "$BIN" bench serve --port "$PORT" --tokenizer "$WORK/tiny" --num-prompts 8 \
  --random-input-len 32 --random-output-len 16 --ignore-eos --disable-tqdm \
  --percentile-metrics ttft,tpot,itl,e2el --save-result --result-dir "$WORK" \
  --result-filename result.json
/usr/bin/python3 - "$WORK/result.json" <<'PY'
import json, sys
j = json.load(open(sys.argv[1]))
keys = ["date", "backend", "model_id", "tokenizer_id", "num_prompts", "request_rate", "burstiness",
        "max_concurrency", "duration", "completed", "failed", "total_input_tokens",
        "total_output_tokens", "request_throughput", "request_goodput", "output_throughput",
        "total_token_throughput", "input_lens", "output_lens", "ttfts", "itls", "generated_texts",
        "errors"] + [f"{s}_{m}_ms" for m in ["ttft", "tpot", "itl", "e2el"]
                     for s in ["mean", "median", "std", "p99"]]
missing = [k for k in keys if k not in j]
assert not missing, f"missing fields: {missing}"
assert j["completed"] == 8 and j["failed"] == 0, (j["completed"], j["failed"], j["errors"])
assert j["input_lens"] == [32] * 8, j["input_lens"]
assert j["output_lens"] == [16] * 8, j["output_lens"]
# One ITL entry per chunk after the first; a chunk may carry several tokens (held-back UTF-8).
assert all(1 <= len(x) <= 15 for x in j["itls"]), [len(x) for x in j["itls"]]
print("bench serve integration: OK")
PY
