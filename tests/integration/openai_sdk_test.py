#!/usr/bin/python3
"""The official OpenAI Node SDK (npm `openai`, installed by scripts/setup.sh) against the real
`moeserve serve` with the tiny model: chat.completions.parse with a Zod schema returns a parsed
object, greedy and sampled; plain and streamed chat work; a tool conversation (required, auto,
named, runTools) with the hermes parser; responses.create, streamed and not, with a tool round trip
over previous_response_id, text.format and an evicted id. Bounded: one server per test, 60 s per call."""
import argparse
import json
import os
import subprocess
import sys
import unittest

import serve_test
from serve_test import API_KEY, Server

ARGS = None


def run_client(port, script):
    env = {**os.environ, "NODE_PATH": ARGS.node_modules}
    out = subprocess.run(["node", os.path.join(os.path.dirname(__file__), script), f"http://127.0.0.1:{port}/v1", API_KEY, "tiny"],
                         capture_output=True, timeout=240, env=env)
    return out.returncode, out.stderr.decode()[-3000:], out.stdout.decode()


class OpenAISdk(unittest.TestCase):
    def test_parse_with_zod_schema(self):
        s = Server()
        try:
            code, err, out = run_client(s.port, "openai_sdk_client.cjs")
            self.assertEqual(code, 0, err)
            r = json.loads(out.strip().splitlines()[-1])
            for p in r["parsed"]:
                self.assertEqual(set(p), {"ok", "color"}, p)
                self.assertIsInstance(p["ok"], bool)
                self.assertIn(p["color"], ["red", "green", "blue"])
            self.assertEqual(r["plain_finish"], "length")
        finally:
            self.assertEqual(s.stop(), 0)

    def test_tool_conversation(self):
        s = Server("--enable-auto-tool-choice", "--tool-call-parser", "hermes")
        try:
            code, err, out = run_client(s.port, "openai_sdk_tools_client.cjs")
            self.assertEqual(code, 0, err + "\n" + s.log_text()[-2000:])
            r = json.loads(out.strip().splitlines()[-1])
            for name in ("required", "required_stream"):
                got = r[name]
                self.assertEqual(got["finish"], "tool_calls", got)
                self.assertEqual(len(got["calls"]), 1, got)  # parallel_tool_calls false
                self.assertEqual(got["calls"][0]["name"], "get_weather")
                self.assertIn(json.loads(got["calls"][0]["arguments"])["city"], ["Paris", "Oslo"])
                self.assertTrue(got["calls"][0]["id"].startswith("call_"), got)
            self.assertIsNone(r["required"]["content"])
            self.assertEqual(r["required"]["calls"][0]["type"], "function")
            # Turn two was accepted; the random model writes text, no call.
            for name in ("auto", "auto_stream"):
                self.assertEqual(r[name]["finish"], "length", r[name])
                self.assertEqual(r[name]["calls"], [], r[name])
                self.assertTrue(r[name]["content"], r[name])
            self.assertEqual(r["named"]["finish"], "stop")
            self.assertEqual(r["named"]["calls"][0]["name"], "get_weather")
            self.assertIn(json.loads(r["named"]["calls"][0]["arguments"])["city"], ["Paris", "Oslo"])
            self.assertEqual(len(r["run_tools"]["called"]), 1, r["run_tools"])
            self.assertIn(r["run_tools"]["called"][0]["city"], ["Paris", "Oslo"])
            self.assertEqual(r["run_tools"]["roles"][-2:], ["assistant", "tool"], r["run_tools"])
        finally:
            self.assertEqual(s.stop(), 0)

    def test_responses_api(self):
        # Store size 3: by the last call the first response is gone (a 404, not a silent new conversation).
        s = Server("--enable-auto-tool-choice", "--tool-call-parser", "hermes", "--responses-store-size", "3")
        try:
            code, err, out = run_client(s.port, "openai_sdk_responses_client.cjs")
            self.assertEqual(code, 0, err + "\n" + s.log_text()[-2000:])
            r = json.loads(out.strip().splitlines()[-1])
            self.assertEqual(r["plain"]["object"], "response")
            self.assertTrue(r["plain"]["id"].startswith("resp_"))
            self.assertEqual(r["plain"]["status"], "incomplete")  # max_output_tokens reached
            self.assertTrue(r["plain"]["text"])
            self.assertEqual(r["plain"]["usage"]["output_tokens"], 6)
            st = r["stream"]
            self.assertEqual(st["types"][:4], ["response.created", "response.in_progress", "response.output_item.added",
                                               "response.content_part.added"])
            self.assertEqual(st["types"][-1], "response.incomplete")
            self.assertEqual(st["sequence"], list(range(len(st["sequence"]))))
            self.assertEqual(st["deltas"], st["text"])
            self.assertEqual(st["text"], r["plain"]["text"])  # greedy: the same answer streamed or not
            self.assertEqual(r["call"]["name"], "get_weather")
            self.assertIn(json.loads(r["call"]["arguments"])["city"], ["Paris", "Oslo"])
            self.assertTrue(r["call"]["call_id"].startswith("call_"))
            # The second turn ran over the stored first one: its prompt holds the first turn's.
            self.assertEqual(r["second"]["previous"], r["call"]["id"])
            self.assertGreater(r["second"]["input_tokens"], r["second"]["call_input_tokens"])
            self.assertTrue(r["second"]["text"])
            self.assertIn(json.loads(r["schema"]["text"])["color"], ("red", "green"))
            self.assertEqual(r["evicted"]["status"], 404, r["evicted"])
            self.assertEqual(r["evicted"]["code"], "response_not_found")
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
