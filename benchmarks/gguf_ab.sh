#!/usr/bin/env bash
# moeserve against llama.cpp on the same GGUF files, alternating within each round so that the noise
# of a shared machine hits both alike (issue #27): per round a STREAM-style read (stream_read.c, same
# thread count), then for each file llama-bench (pp512, tg64) and `moeserve generate` on that file
# (a 64-token decode, a 518-token prefill). Run from the project root:
#   benchmarks/gguf_ab.sh LLAMA_BIN_DIR FILE.gguf [FILE.gguf ...]
# LLAMA_BIN_DIR holds llama-bench (any llama.cpp build). Environment: MOESERVE_BIN (default
# build/src/moeserve/cli/moeserve), ROUNDS (default "1 2 3"), THREADS (default 2), STREAM_BIN (default:
# stream_read.c compiled into $TMPDIR), WARMUP (default 1: `generate --warmup`, untimed runs of each
# prompt first, as llama-bench warms up with one; 0 times the cold first forward). Prints the CPU, the ISA moeserve picked and the load with the
# figures; a round whose STREAM read dips far below the others had a noisy neighbour.
set -euo pipefail
if [ $# -lt 2 ]; then
  sed -n '2,10p' "$0" >&2
  exit 2
fi
LLAMA_BIN_DIR=$1
shift
LB=$LLAMA_BIN_DIR/llama-bench
MS=${MOESERVE_BIN:-build/src/moeserve/cli/moeserve}
T=${THREADS:-2}
HERE=$(cd "$(dirname "$0")" && pwd)
[ -x "$LB" ] || { echo "no llama-bench in $LLAMA_BIN_DIR" >&2; exit 2; }
[ -x "$MS" ] || { echo "no moeserve binary at $MS (set MOESERVE_BIN)" >&2; exit 2; }
STREAM=${STREAM_BIN:-}
if [ -z "$STREAM" ]; then
  STREAM=${TMPDIR:-/tmp}/moeserve_stream_read
  gcc -O3 -mavx2 -fopenmp "$HERE/stream_read.c" -o "$STREAM"
fi

DEC='The history of the Roman Empire spans many centuries, and'
P518=$(for _ in $(seq 37); do printf 'The quick brown fox jumps over the lazy dog near the river bank. '; done)

# moeserve generate on FILE: "prefill X tok/s, decode Y tok/s"
ms() {
  "$MS" generate --model "$1" --warmup "${WARMUP:-1}" --prompt "$2" --max-tokens "$3" --ignore-eos --threads "$T" --no-progress 2>&1 |
    grep -o "generate:.*" | sed -E 's/.*prefill ([0-9.]+) tok\/s.*decode ([0-9.]+) tok\/s.*/prefill \1 tok\/s, decode \2 tok\/s/'
}
# llama-bench on FILE: "pp512 X t/s, tg64 Y t/s" (mean of 2 repetitions each)
lb() {
  "$LB" -m "$1" -t "$T" -p 512 -n 64 -r 2 -o csv 2>/dev/null | tr -d '"' |
    awk -F',' 'NR == 1 { for (i = 1; i <= NF; i++) col[$i] = i; next }
               { p = $col["n_prompt"]; g = $col["n_gen"];
                 printf "%s %.2f t/s  ", (p > 0 ? "pp" p : "tg" g), $col["avg_ts"] } END { print "" }'
}

lscpu | grep -E "Model name|^CPU\(s\)"
"$MS" env 2>/dev/null | grep -iE "^cpu|isa:" || true
echo "threads $T; llama.cpp: $LB; moeserve: $MS"
for round in ${ROUNDS:-1 2 3}; do
  echo "== round $round, load $(cut -d' ' -f1-3 /proc/loadavg)"
  OMP_NUM_THREADS=$T OMP_PROC_BIND=spread "$STREAM"
  for f in "$@"; do
    name=$(basename "$f" .gguf)
    echo "llama.cpp $name: $(lb "$f")"
    echo "moeserve  $name decode 64: $(ms "$f" "$DEC" 64)"
    echo "moeserve  $name prefill 518: $(ms "$f" "$P518" 1)"
  done
done
echo "== end, load $(cut -d' ' -f1-3 /proc/loadavg); $(uptime)"
