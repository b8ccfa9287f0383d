#!/usr/bin/env bash
# The peer engine for the side-by-side runs: llama.cpp at the tag node-llama-cpp@3.22.1 pins (v0.5.0),
# from the git bundle that npm package ships, so the source is fixed by a registry version rather than a
# moving branch. Built with GGML_NATIVE=ON: a user picking llama.cpp over moeserve would build it for their
# own CPU, so it gets every extension this CPU has. Also builds the repository's STREAM read probe, so
# each round of ab.sh can say what bandwidth the machine had at that moment.
# Everything lands under $PEER_DIR (default ~/.cache/moeserve-peer), never in the project tree. Running it
# again skips what is already there; only ninja's own incremental check runs. About 15-25 min on 2 cores.
#   benchmarks/peer/build_llamacpp.sh            (from anywhere; nice -n 19 on a shared machine)
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
PEER_DIR=${PEER_DIR:-$HOME/.cache/moeserve-peer}
NPM_PKG=node-llama-cpp@3.22.1
JOBS=${JOBS:-$(nproc)}

mkdir -p "$PEER_DIR"
PEER_DIR=$(cd "$PEER_DIR" && pwd)
case "$PEER_DIR/" in
  "$REPO"/*) echo "PEER_DIR=$PEER_DIR is inside the repository; pick a folder outside it" >&2; exit 1 ;;
esac

# 1. The source: only the bundle is taken from the package tarball.
dl="$PEER_DIR/download"
mkdir -p "$dl"
if [ ! -f "$dl/gitRelease.bundle" ]; then
  tgz=$(cd "$dl" && npm pack --silent "$NPM_PKG" | tail -n 1)
  tar -xzf "$dl/$tgz" -C "$dl" package/llama/gitRelease.bundle package/llama/llama.cpp.info.json
  mv "$dl/package/llama/gitRelease.bundle" "$dl/package/llama/llama.cpp.info.json" "$dl/"
  rm -rf "$dl/package" "$dl/${tgz:?}"
fi
src="$PEER_DIR/llama.cpp"
if [ ! -d "$src/.git" ]; then
  rm -rf "$src.partial"
  git -c advice.detachedHead=false clone --quiet "$dl/gitRelease.bundle" "$src.partial"
  mv "$src.partial" "$src"  # a clone cut short never looks finished
fi
tag=$(sed -n 's/.*"tag": *"\([^"]*\)".*/\1/p' "$dl/llama.cpp.info.json")
echo "llama.cpp $tag at $(git -C "$src" rev-parse --short=12 HEAD)"

# 2. The build. The server's web UI is neither built nor fetched (no network needed, not measured);
#    static libraries so the binaries run from anywhere without LD_LIBRARY_PATH.
#    LLAMA_ISA=avx2 builds a second copy in build-avx2 for AVX2 + FMA + F16C only (no AVX-512): the
#    peer for moeserve's forced `MOESERVE_ISA=avx2` level on an AVX-512 machine, the same ISA on both
#    sides.
case "${LLAMA_ISA:-native}" in
  native) bdir="$src/build"; log="$PEER_DIR/cmake"; isa_flags=(-DGGML_NATIVE=ON) ;;
  avx2) bdir="$src/build-avx2"; log="$PEER_DIR/cmake-avx2"
    isa_flags=(-DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_BMI2=ON
      -DGGML_AVX512=OFF -DGGML_AVX512_VBMI=OFF -DGGML_AVX512_VNNI=OFF -DGGML_AVX512_BF16=OFF -DGGML_AVX_VNNI=OFF) ;;
  *) echo "LLAMA_ISA must be native or avx2" >&2; exit 2 ;;
esac
if [ ! -f "$bdir/build.ninja" ]; then
  cmake -S "$src" -B "$bdir" -G Ninja -DCMAKE_BUILD_TYPE=Release \
    "${isa_flags[@]}" -DGGML_OPENMP=ON -DBUILD_SHARED_LIBS=OFF \
    -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF \
    -DLLAMA_BUILD_UI=OFF -DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_OPENSSL=OFF >"$log-configure.log" 2>&1 ||
    { tail -n 30 "$log-configure.log" >&2; exit 1; }
fi
cmake --build "$bdir" -j "$JOBS" --target llama-bench llama-server llama-quantize >"$log-build.log" 2>&1 ||
  { tail -n 30 "$log-build.log" >&2; exit 1; }

# 3. The STREAM probe, rebuilt only when the repository's source is newer.
if [ ! -x "$PEER_DIR/stream_read" ] || [ "$REPO/benchmarks/stream_read.c" -nt "$PEER_DIR/stream_read" ]; then
  gcc -O3 -mavx2 -fopenmp "$REPO/benchmarks/stream_read.c" -o "$PEER_DIR/stream_read"
fi

echo "binaries: $bdir/bin/{llama-bench,llama-server,llama-quantize}; gguf-py: $src/gguf-py"
echo "STREAM probe: $PEER_DIR/stream_read (run with OMP_NUM_THREADS=N)"
