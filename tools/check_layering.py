#!/usr/bin/env python3
"""Fails when a module includes a module it must not, or intrinsics outside kernels/
(docs/architecture.md "Layering"). testing/ (the model generator, the test references) sits
beside the runtime: it may include the runtime modules it builds on, no runtime module may
include it (none lists it), and only cli/ and the tests use it. model/ reaches the kernels only
through the backend seam (kernels/ops.h and the kernels/*_types.h descriptors), never a backend's
folder."""
import pathlib
import re
import sys

ALLOWED = {
    "core": set(),
    "io": {"core", "kernels"},
    "tokenizer": {"core"},
    "kernels": {"core"},
    "parallel": {"core"},
    "ipc": {"core"},
    "structured": {"core"},
    "model": {"core", "io", "kernels", "parallel"},
    "engine": {"core", "model", "parallel", "ipc", "io", "kernels", "structured"},
    "serve": {"core", "tokenizer", "ipc", "structured"},
    "bench": {"core", "serve", "tokenizer"},
    "testing": {"core", "io", "parallel", "model"},  # fixtures only: runtime -> testing is forbidden
    "cli": None,  # may include everything
}

# Folders a module must not include even though it may include their module: the backends.
FORBIDDEN_FOLDERS = {
    "model": ("kernels/cpu/", "kernels/reference/"),
}

INCLUDE = re.compile(r'#include\s+"moeserve/([a-z_]+)/')
INCLUDED_PATH = re.compile(r'#include\s+"moeserve/([a-z_/]+)')
# x86 intrinsics (immintrin.h, x86intrin.h, ...) belong to the kernels: the backend seam.
INTRINSICS = re.compile(r'#include\s+<[a-z0-9]*intrin\.h>')


def main() -> int:
    root = pathlib.Path(__file__).resolve().parent.parent / "src" / "moeserve"
    bad = []
    for path in sorted(root.rglob("*")):
        if path.suffix not in (".h", ".cpp"):
            continue
        mod = path.relative_to(root).parts[0]
        allowed = ALLOWED.get(mod)  # None: may include every module
        for lineno, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            m = INCLUDE.match(line.strip())
            if m and allowed is not None and m.group(1) != mod and m.group(1) not in allowed:
                why = " (testing is for the tests and make-model only)" if m.group(1) == "testing" else ""
                bad.append(f"{path.relative_to(root.parent.parent)}:{lineno}: {mod} must not include {m.group(1)}{why}")
            path_match = INCLUDED_PATH.match(line.strip())
            for folder in FORBIDDEN_FOLDERS.get(mod, ()):
                if path_match and path_match.group(1).startswith(folder):
                    bad.append(f"{path.relative_to(root.parent.parent)}:{lineno}: {mod} must not include {folder} "
                               "(the ops facade, kernels/ops.h, is the backend seam)")
            if mod != "kernels" and INTRINSICS.match(line.strip()):
                bad.append(f"{path.relative_to(root.parent.parent)}:{lineno}: intrinsics only in kernels/")
    for b in bad:
        print(b, file=sys.stderr)
    if bad:
        print(f"layering: {len(bad)} forbidden include(s) (upward, runtime -> testing, or past the backend seam); "
              "see docs/architecture.md, 'Layering'", file=sys.stderr)
        return 1
    print("layering: ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
