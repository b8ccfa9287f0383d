#!/usr/bin/python3
"""The install (issue 34): `cmake --install` into a scratch prefix, and the Debian package cpack
makes, unpacked with `dpkg -x` into a scratch root. From each, `moeserve --version` and a tiny
`generate` run, and the docs are there. Every command is bounded by a timeout.
"""
import argparse
import glob
import os
import subprocess
import sys
import tempfile
import unittest

ARGS = None


def run(cmd, timeout=300, **kw):
    return subprocess.run(cmd, capture_output=True, timeout=timeout, **kw)


class Install(unittest.TestCase):
    def check_tree(self, root):
        """The installed binary runs from `root` (bin/, share/doc/moeserve/)."""
        binary = os.path.join(root, "bin", "moeserve")
        self.assertTrue(os.access(binary, os.X_OK), binary)
        out = run([binary, "--version"])
        self.assertEqual(out.returncode, 0, out.stderr)
        self.assertRegex(out.stdout.decode(), r"^moeserve \d+\.\d+\.\d+ \(kernels: \w+\)\n$")
        out = run([binary, "generate", "--model", ARGS.model, "--prompt", "Hello", "--max-tokens", "4",
                   "--threads", "1", "--no-progress"])
        self.assertEqual(out.returncode, 0, out.stderr[-800:])
        self.assertIn("4 tokens generated", out.stderr.decode())
        self.assertTrue(out.stdout.decode().startswith("Hello"))
        docs = os.path.join(root, "share", "doc", "moeserve")
        for name in ("README.md", "docs/serving.md"):
            self.assertTrue(os.path.isfile(os.path.join(docs, name)), name)

    def test_cmake_install_into_a_prefix(self):
        with tempfile.TemporaryDirectory() as prefix:
            out = run(["cmake", "--install", ARGS.build_dir, "--prefix", prefix])
            self.assertEqual(out.returncode, 0, out.stderr)
            self.check_tree(prefix)

    def test_debian_package(self):
        with tempfile.TemporaryDirectory() as tmp:
            out = run(["cpack", "--config", os.path.join(ARGS.build_dir, "CPackConfig.cmake"), "-B", tmp],
                      cwd=ARGS.build_dir)
            self.assertEqual(out.returncode, 0, out.stdout[-800:] + out.stderr[-800:])
            debs = glob.glob(os.path.join(tmp, "moeserve_*_amd64.deb"))
            self.assertEqual(len(debs), 1, os.listdir(tmp))
            info = run(["dpkg-deb", "--field", debs[0], "Package", "Depends"]).stdout.decode()
            self.assertIn("Package: moeserve", info)
            self.assertIn("libzmq5", info)  # found by dpkg-shlibdeps from the binary
            root = os.path.join(tmp, "root")
            out = run(["dpkg", "-x", debs[0], root])
            self.assertEqual(out.returncode, 0, out.stderr)
            self.check_tree(os.path.join(root, "usr"))


if __name__ == "__main__":
    p = argparse.ArgumentParser()
    p.add_argument("--moeserve", required=True)  # the build's binary (integration_test passes it; unused)
    p.add_argument("--model", required=True)
    p.add_argument("--build-dir", required=True)
    ARGS, rest = p.parse_known_args()
    suite = unittest.TestLoader().loadTestsFromTestCase(Install)
    result = unittest.TextTestRunner(verbosity=2).run(suite)
    sys.exit(0 if result.wasSuccessful() else 1)
