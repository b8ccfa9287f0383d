#!/usr/bin/env bash
# Fails when a C++ file under src/, tests/, benchmarks/ or fuzz/ is not in the tree's clang-format
# style (.clang-format); `make format` fixes it. Run by `make test` so CI refuses unformatted code.
set -euo pipefail
cd "$(dirname "$0")/.."
mapfile -t files < <(find src tests benchmarks fuzz \( -name '*.h' -o -name '*.cpp' \) | sort)
bad=()
for f in "${files[@]}"; do
  clang-format --dry-run -Werror "$f" >/dev/null 2>&1 || bad+=("$f")
done
if [ ${#bad[@]} -gt 0 ]; then
  echo "check_format: ${#bad[@]} file(s) differ from .clang-format's style (run \`make format\`):" >&2
  printf '  %s\n' "${bad[@]}" >&2
  exit 1
fi
