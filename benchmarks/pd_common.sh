# Sourced by the PD benchmarks (pd_abc.sh, pd_stream_ab.sh): processes started in the background
# and stopped on exit, their ports and health, the STREAM-read binary, the rank-plane key. Needs B
# (the moeserve binary).
export MOESERVE_RANK_PLANE_KEY=${MOESERVE_RANK_PLANE_KEY:-$(head -c 32 /dev/urandom | xxd -p -c 64)}
LOGS=$(mktemp -d)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; }
trap cleanup EXIT
STREAM="$LOGS/stream_read"
gcc -O3 -mavx2 -fopenmp "$(dirname "$0")/stream_read.c" -o "$STREAM"

port_of() {  # log file -> the port it reports listening on (waits up to 120 s)
  for _ in $(seq 1200); do
    p=$(grep -o 'listening on http://[0-9.]*:[0-9]*' "$1" 2>/dev/null | grep -o '[0-9]*$' || true)
    [ -n "$p" ] && { echo "$p"; return; }
    sleep 0.1
  done
  echo "no port in $1" >&2; exit 1
}
healthy() { for _ in $(seq 1200); do curl -sf "http://127.0.0.1:$1/health" >/dev/null && return; sleep 0.1; done; exit 1; }
start() {  # name, args... -> sets PORT
  "$B" "$@" >"$LOGS/$name.log" 2>&1 & pids+=($!)
  PORT=$(port_of "$LOGS/$name.log")
}
kv() { echo "{\"kv_connector\":\"MoeserveConnector\",\"kv_role\":\"$1\"}"; }
stream_read() { OMP_NUM_THREADS=2 OMP_PROC_BIND=spread "$STREAM" | tail -1; }
