#!/bin/sh
# Fails if any *avx512* object among the arguments defines a weak (COMDAT) symbol (see
# tests/kernels/CMakeLists.txt).
status=0
for o in "$@"; do
    case "$o" in
    *avx512*)
        weak=$(nm -C "$o" | grep -E ' [WVu] ')
        if [ -n "$weak" ]; then
            echo "weak symbols in $o:"
            echo "$weak"
            status=1
        else
            echo "ok: $o"
        fi
        ;;
    esac
done
exit $status
