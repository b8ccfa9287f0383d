#!/usr/bin/env bash
# After a red ctest run in build folder $1: the lines that say why each failed test failed
# (assertions, sanitizer reports, tracebacks), printed last. A CI record keeps only the end of
# the output, which is otherwise ctest's summary; with this it also names the cause.
set -u
log="$1/Testing/Temporary/LastTest.log"
failed="$1/Testing/Temporary/LastTestsFailed.log"
[ -f "$log" ] && [ -f "$failed" ] || exit 0
echo "=== why each failed test failed (the last matching lines of its output in $log) ==="
while IFS=: read -r _ name; do
    echo "--- $name"
    # The test's section: from its "N/M Testing: name" line to its "Test Passed./Failed." line.
    section=$(awk -v want="$name" '
        /^[0-9]+\/[0-9]+ Testing: / { inside = ($NF == want) }
        inside { print }
        /^Test (Passed|Failed)\./ { inside = 0 }
    ' "$log")
    why=$(grep -E 'Error|error|FAIL|Traceback|AddressSanitizer|LeakSanitizer|ThreadSanitizer|SUMMARY|runtime error|Expected|Which is|Value of|exit status|Timeout|not healthy|assert' <<<"$section" |
        grep -Ev '^Test (Passed|Failed)')
    # Nothing that looks like a reason: the end of its output, or that it had none (it did not run:
    # a fixture it needs failed, or its executable is missing; ctest's own lines above say which).
    [ -n "$why" ] || why=$(sed -n '/^Output:/,/^<end of output>/p' <<<"$section" | grep -Ev '^(-*|Output:|<end of output>)$' | tail -n 3)
    [ -n "$why" ] || why="(no output: it did not run)"
    tail -n 12 <<<"$why" | cut -c1-400
done <"$failed"
