#!/usr/bin/python3
"""The official OpenAI Node SDK (npm `openai`, installed by scripts/setup.sh) against the real
`moeserve serve` with the tiny model: chat.completions.parse with a Zod schema returns a parsed
object, greedy and sampled; plain and streamed chat work. Bounded: one server, 60 s per call."""
import argparse
import json
import os
import subprocess
import sys
import unittest

import serve_test
from serve_test import API_KEY, Server

ARGS = None


class OpenAISdk(unittest.TestCase):
    def test_parse_with_zod_schema(self):
        s = Server()
        try:
            env = {**os.environ, "NODE_PATH": ARGS.node_modules}
            out = subprocess.run(["node", os.path.join(os.path.dirname(__file__), "openai_sdk_client.cjs"),
                                  f"http://127.0.0.1:{s.port}/v1", API_KEY, "tiny"],
                                 capture_output=True, timeout=240, env=env)
            self.assertEqual(out.returncode, 0, out.stderr.decode()[-3000:])
            r = json.loads(out.stdout.decode().strip().splitlines()[-1])
            for p in r["parsed"]:
                self.assertEqual(set(p), {"ok", "color"}, p)
                self.assertIsInstance(p["ok"], bool)
                self.assertIn(p["color"], ["red", "green", "blue"])
            self.assertEqual(r["plain_finish"], "length")
        finally:
            self.assertEqual(s.stop(), 0)


if __name__ == "__main__":
    p = argparse.ArgumentParser()
    p.add_argument("--moeserve", required=True)
    p.add_argument("--model", required=True)
    p.add_argument("--node-modules", required=True)
    ARGS, rest = p.parse_known_args()
    serve_test.ARGS = ARGS
    result = unittest.TextTestRunner(verbosity=2).run(unittest.TestLoader().loadTestsFromTestCase(OpenAISdk))
    sys.exit(0 if result.wasSuccessful() else 1)
