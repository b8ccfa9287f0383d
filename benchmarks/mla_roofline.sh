#!/usr/bin/env bash
# The bench-size DeepSeek-V3 (MLA attention) against its own memory roofline (issue #29): llama.cpp
# has no reader for it here, so there is no peer to race. Per round: a STREAM-style read
# (stream_read.c, same thread count), then `moeserve generate` at short context and on prompts of
# about 512 / 4096 / 15800 tokens (the model's window is 16384), then `moeserve serve` driven by
# `moeserve bench serve` at concurrency 8 and 32 (random 128-token prompts, 128 output tokens).
# The roofline of a decoded token is the STREAM median over the bytes it must read: the weights
# the model counts for one token (generate prints them) plus its KV cache at that context; for a
# served batch of C sequences, a step reads the dense weights once, the routed experts that C
# tokens touch (8 of 64 each, chosen at random: 64 (1 - (7/8)^C) per layer expected) and C
# sequences' KV at their mean context (192 tokens). At long contexts and full batches the
# products bind before the bytes do (MLA decode attention is 2 x layers x heads x context x
# (kv_lora_rank + rope + kv_lora_rank) FLOPs a token, printed): the ratio then says how far from
# the bytes' bound it runs, not that bytes are the limit. Prefill is reported as tokens/s and the
# GFLOP/s of its matrix products (2 x the weights' parameters but the lm_head's, per token;
# attention left out). Run from the project root:
#   benchmarks/mla_roofline.sh
# Environment: MOESERVE_BIN (default build/src/moeserve/cli/moeserve), MODEL (default
# /tmp/dsv3-bench-bf16, made by make-model when missing), ROUNDS (default "1 2"), THREADS (2),
# STREAM_BIN (default: stream_read.c compiled into $TMPDIR), SERVE (default 1; 0 skips the server).
set -euo pipefail
MS=${MOESERVE_BIN:-build/src/moeserve/cli/moeserve}
MODEL=${MODEL:-/tmp/dsv3-bench-bf16}
T=${THREADS:-2}
HERE=$(cd "$(dirname "$0")" && pwd)
[ -x "$MS" ] || { echo "no moeserve binary at $MS (set MOESERVE_BIN)" >&2; exit 2; }
[ -f "$MODEL/config.json" ] || "$MS" make-model --arch deepseek_v3 --size bench --seed 1 --out "$MODEL" >/dev/null
STREAM=${STREAM_BIN:-}
if [ -z "$STREAM" ]; then
  STREAM=${TMPDIR:-/tmp}/moeserve_stream_read
  gcc -O3 -mavx2 -fopenmp "$HERE/stream_read.c" -o "$STREAM"
fi
LOGS=$(mktemp -d)
prompt_of() { for _ in $(seq $(($1 / 14))); do printf 'The quick brown fox jumps over the lazy dog near the river bank. '; done; }

# generate: "P X Y R W K": prompt tokens, prefill and decode tok/s, routed expert MB read per
# decoded token, weights MB and KV kB per context token that a decoded token reads
gen() {  # prompt, decode tokens
  "$MS" generate --model "$MODEL" --warmup 1 --prompt "$1" --max-tokens "$2" --ignore-eos --threads "$T" \
    --no-progress --max-model-len 16384 2>&1 | grep -o "generate:.*" |
    sed -E 's/.*prompt ([0-9]+) tokens, prefill ([0-9.]+) tok\/s.*decode ([0-9.]+) tok\/s.*experts read ([0-9.]+) MB.*reads ([0-9.]+) MB of weights \+ ([0-9.]+) kB.*/\1 \2 \3 \4 \5 \6/'
}

free_port() { python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }

serve_at() {  # concurrency, seed: output tok/s
  local port server log
  port=$(free_port)
  log=$LOGS/serve-c$1-seed$2.log
  setsid "$MS" serve --model "$MODEL" --served-model-name m --host 127.0.0.1 --port "$port" --threads "$T" \
    --max-num-seqs "$1" >"$log" 2>&1 &
  server=$!
  for _ in $(seq 240); do
    curl -sf "http://127.0.0.1:$port/health" >/dev/null 2>&1 && break
    sleep 0.5
  done
  "$MS" bench serve --base-url "http://127.0.0.1:$port" --model m --tokenizer "$MODEL" --dataset-name random \
    --random-input-len 128 --random-output-len 128 --num-prompts $((2 * $1)) --max-concurrency "$1" --ignore-eos \
    --seed "$2" --disable-tqdm >"$log.bench" 2>&1 || true
  kill -- -"$server" 2>/dev/null || true
  wait "$server" 2>/dev/null || true
  awk '/^Output token throughput/ { print $NF }' "$log.bench"
}

lscpu | grep -E "Model name|^CPU\(s\)"
"$MS" env 2>/dev/null | grep -iE "^cpu|isa:" || true
echo "threads $T; model $MODEL; moeserve: $MS"
# the lm_head's MB (bf16 [vocab, hidden]): prefill runs it for the last token only
LM_MB=$(python3 -c 'import json, sys; c = json.load(open(sys.argv[1])); print(c["vocab_size"] * c["hidden_size"] * 2 / 1e6)' "$MODEL/config.json")
# MLA decode attention's FLOPs per decoded token and context token (scores over the latent and
# k_pe, then the values over the latent)
ATT_FLOP=$(python3 -c 'import json, sys; c = json.load(open(sys.argv[1])); r = c["kv_lora_rank"]
print(2 * c["num_hidden_layers"] * c["num_attention_heads"] * (2 * r + c["qk_rope_head_dim"]))' "$MODEL/config.json")
for round in ${ROUNDS:-1 2}; do
  echo "== round $round, load $(cut -d' ' -f1-3 /proc/loadavg)"
  read_line=$(OMP_NUM_THREADS=$T OMP_PROC_BIND=spread "$STREAM")
  echo "$read_line"
  stream=$(sed -E 's/.*median ([0-9.]+).*/\1/' <<<"$read_line")
  read -r _ _ short routed w kv < <(gen 'The history of the Roman Empire spans many centuries, and' 64)
  awk -v d="$short" -v s="$stream" -v w="$w" 'BEGIN { c = s * 1000 / w;
    printf "decode, short context: %.1f tok/s, roofline %.1f (%.0f MB a token): %.2f of it\n", d, c, w, d / c }'
  for n in 512 4096 15800; do
    read -r p pre dec _ w kv < <(gen "$(prompt_of "$n")" 32)
    awk -v p="$p" -v pre="$pre" -v d="$dec" -v s="$stream" -v w="$w" -v kv="$kv" -v lm="$LM_MB" -v att="$ATT_FLOP" 'BEGIN {
      bytes = w + p * kv / 1000; c = s * 1000 / bytes;
      printf "prompt %d: prefill %.1f tok/s (%.0f GFLOP/s of products) | decode %.1f tok/s, roofline %.1f (%.0f MB a token; attention %.2f GFLOP a token): %.2f of it\n",
             p, pre, (w - lm) * 1e6 * pre / 1e9, d, c, bytes, att * p / 1e9, d / c }'
  done
  if [ "${SERVE:-1}" = 1 ]; then
    for conc in 8 32; do
      out=$(serve_at "$conc" "$round")
      awk -v o="$out" -v C="$conc" -v s="$stream" -v w="$w" -v kv="$kv" -v routed="$routed" 'BEGIN {
        touched = 64 * (1 - (7 / 8) ^ C); bytes = (w - routed) + routed / 8 * touched + C * 192 * kv / 1000;
        c = C * s * 1000 / bytes;
        printf "server c%d: %s output tok/s, decode-step roofline %.1f (%.0f MB a step of %d): %.2f of it\n",
               C, o, c, bytes, C, o / c }'
    done
  fi
done
echo "logs: $LOGS"
