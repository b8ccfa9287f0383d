#!/usr/bin/env python3
"""clang-tidy over src/ (`make tidy`), re-checking only the translation units whose inputs changed.

A unit's result is keyed by everything that can change what clang-tidy says about it: the
clang-tidy version, .clang-tidy, the extra arguments, the unit's compile command (flags and
defines; the clone's own folder is taken out, so another clone of the same tree shares the
results), and the content of the source and of every header it includes, system headers too, as
ninja recorded them in the last build (`ninja -t deps`). A unit whose key has a recorded clean
run is skipped; every other unit is checked, and only a clean run is recorded. So an edit to a
file re-checks the units that include it, a change of .clang-tidy, of clang-tidy or of the
compile flags re-checks the whole tree, and a finding can never be hidden by the cache: a
failing unit is never recorded. The cache is a folder of empty files named by key
($MOESERVE_CACHE_DIR/tidy, shared by every clone on the machine).

A fresh clone on a fresh machine has no cache folder, so the clean keys also travel with the
tree: --record FILE reads FILE's keys as clean runs too, and after a run with no finding writes
the keys of every unit of the tree into it (make tidy: .ci/tidy-clean.txt, committed with the
change). CI then checks only the units whose inputs changed since the commit that recorded it.
The same rules hold: a key names every input, so a changed header, flag or clang-tidy re-checks
what it touches (another Debian point release of a system header re-checks the whole tree).

Usage: tidy_cached.py BUILD_DIR CACHE_DIR [-j N] [--extra-arg ARG ...] [--record FILE]
Needs a finished build in BUILD_DIR (the dependency lists come from it).
"""
import argparse
import concurrent.futures
import hashlib
import json
import os
import shlex
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def file_digest(path, memo):
    if path not in memo:
        h = hashlib.sha256()
        try:
            with open(path, "rb") as f:
                h.update(f.read())
        except OSError:
            h.update(b"<missing>")
        memo[path] = h.hexdigest()
    return memo[path]


def ninja_deps(build_dir):
    """object path (relative to build_dir) -> the absolute paths of its inputs."""
    out = subprocess.run(["ninja", "-C", build_dir, "-t", "deps"], check=True, capture_output=True, text=True).stdout
    deps, current = {}, None
    for line in out.splitlines():
        if not line.strip():
            current = None
        elif not line.startswith(" "):
            current = line.split(":", 1)[0]
            deps[current] = []
        elif current is not None:
            deps[current].append(os.path.normpath(os.path.join(build_dir, line.strip())))
    return deps


def relocatable(text, build_dir):
    """The text with this clone's folders replaced by placeholders (longest first)."""
    return text.replace(os.path.abspath(build_dir), "<build>").replace(ROOT, "<src>")


def unit_key(entry, inputs, common, build_dir, memo):
    h = hashlib.sha256(common)
    h.update(relocatable(entry["command"], build_dir).encode())
    # In the order of the relocated names: sorted by the real ones, the clone's folder would decide
    # where the tree's files fall among the system headers, and each folder would get its own keys.
    paths = {relocatable(p, build_dir): p for p in set(inputs) | {os.path.abspath(entry["file"])}}
    for name in sorted(paths):
        h.update(name.encode() + b"\0" + file_digest(paths[name], memo).encode() + b"\0")
    return h.hexdigest()


def object_of(entry):
    args = shlex.split(entry["command"])
    return args[args.index("-o") + 1]


def main():
    p = argparse.ArgumentParser()
    p.add_argument("build_dir")
    p.add_argument("cache_dir")
    p.add_argument("-j", type=int, default=os.cpu_count() or 1)
    p.add_argument("--extra-arg", action="append", default=[])
    p.add_argument("--record", help="a file of clean keys that travels with the tree (read, then rewritten)")
    a = p.parse_args()
    recorded = set()
    if a.record and os.path.exists(a.record):
        with open(a.record) as f:
            recorded = {line.strip() for line in f if line.strip() and not line.startswith("#")}
    build_dir = os.path.abspath(a.build_dir)
    with open(os.path.join(build_dir, "compile_commands.json")) as f:
        units = [e for e in json.load(f) if os.path.abspath(e["file"]).startswith(os.path.join(ROOT, "src/moeserve/"))]
    deps = ninja_deps(build_dir)
    version = subprocess.run(["clang-tidy", "--version"], check=True, capture_output=True, text=True).stdout
    with open(os.path.join(ROOT, ".clang-tidy"), "rb") as f:
        common = version.encode() + f.read() + json.dumps(a.extra_arg).encode()
    os.makedirs(a.cache_dir, exist_ok=True)
    memo, todo, keys = {}, [], []
    for e in units:
        obj = object_of(e)
        if obj not in deps:  # not built yet: no dependency list, so always checked
            todo.append((e, None))
            continue
        key = unit_key(e, deps[obj], common, build_dir, memo)
        keys.append(key)
        if key not in recorded and not os.path.exists(os.path.join(a.cache_dir, key)):
            todo.append((e, key))
    print(f"tidy: {len(units) - len(todo)} of {len(units)} units unchanged since a clean run, checking {len(todo)}",
          flush=True)

    def check(item):
        e, key = item
        cmd = ["clang-tidy", "-quiet", "-p", build_dir, *[f"-extra-arg={x}" for x in a.extra_arg], e["file"]]
        r = subprocess.run(cmd, capture_output=True, text=True)
        if r.returncode == 0 and key is not None:
            open(os.path.join(a.cache_dir, key), "w").close()
        return e["file"], r

    failed = 0
    with concurrent.futures.ThreadPoolExecutor(max(1, a.j)) as pool:
        for path, r in pool.map(check, todo):
            if r.returncode != 0:
                failed += 1
                print(f"tidy: {os.path.relpath(path, ROOT)}:\n{r.stdout}{r.stderr}", flush=True)
    print(f"tidy: {len(todo) - failed} clean, {failed} with findings")
    if a.record and not failed and all(key is not None for _, key in todo):
        with open(a.record, "w") as f:
            f.write("# clang-tidy keys of the units of this tree that were clean (tools/tidy_cached.py)\n")
            f.writelines(k + "\n" for k in sorted(set(keys)))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
