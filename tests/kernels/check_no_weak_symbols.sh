#!/bin/sh
# Fails if any *avx512* object among the arguments defines a weak (COMDAT) symbol (see
# tests/kernels/CMakeLists.txt). DW.ref.__gxx_personality_v0 is exempt: it is data (a pointer to
# the C++ personality routine that the exception tables use), identical in every object that has
# landing pads, so whichever copy the linker keeps holds no AVX-512 code. Sanitizer builds emit it
# in objects whose release build has no landing pads.
status=0
for o in "$@"; do
    case "$o" in
    *avx512*)
        weak=$(nm -C "$o" | grep -E ' [WVu] ' | grep -v ' DW\.ref\.__gxx_personality_v0$')
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
