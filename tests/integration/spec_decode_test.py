#!/usr/bin/python3
"""`moeserve serve --speculative-config` on a real socket (issue 30): n-gram drafting on the trained
Qwen3-MoE KJV model (its text repeats, so drafts get accepted), and deepseek_mtp (the drafts of its
own MTP layer) on the trained DeepSeek-V3 KJV model. Each gives the same greedy texts and the same
seeded samples as a server without it, for prompts alone and at once, also with TP = 2, DP = 2 + EP
(lock-step) and PD hybrid, and counts its drafts in /metrics under vLLM's names (PD
disaggregation: pd_disagg_test.py, suite spec); bad configs fail at startup with one `error:` line
and exit 2. Every wait is bounded.
"""
import argparse
import concurrent.futures
import json
import subprocess
import sys
import unittest

import serve_test
from serve_test import Server

ARGS = None
# "adaptive": false: every decode drafts, so the drafts the tests count are there on any machine.
# The adaptive budget (unit-tested in draft_budget_test) may choose 0 drafts from the step times it
# measures, as it did once for the PD pair on a loaded machine.
NGRAM = ('{"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_max": 3, "prompt_lookup_min": 1, '
         '"adaptive": false}')
MTP = '{"method": "deepseek_mtp", "num_speculative_tokens": 1, "adaptive": false}'
PROMPTS = [
    "And God said, Let there be light: and there was light. And God saw the light",
    "In the beginning God created the heaven and the earth. In the beginning",
    "The LORD is my shepherd; I shall not want.",
    "And the LORD spake unto Moses, saying, Speak unto the children of Israel",
]


def completion(server, body):
    status, payload = server.request("POST", "/v1/completions", body)
    assert status == 200, (status, payload)
    return json.loads(payload)["choices"][0]


class SpecDecodeServe(unittest.TestCase):
    SPEC, K = NGRAM, 4

    def model(self):
        return ARGS.trained_model

    def texts(self, server):
        greedy = [completion(server, {"model": "tiny", "prompt": p, "max_tokens": 32, "temperature": 0,
                                      "ignore_eos": True, "logprobs": 1})
                  for p in PROMPTS]
        with concurrent.futures.ThreadPoolExecutor(len(PROMPTS)) as pool:  # batched together
            together = list(pool.map(lambda p: completion(server, {"model": "tiny", "prompt": p, "max_tokens": 32,
                                                                   "temperature": 0, "ignore_eos": True})["text"],
                                     PROMPTS))
        sampled = completion(server, {"model": "tiny", "prompt": PROMPTS[1], "max_tokens": 24, "temperature": 0.8,
                                      "seed": 7, "ignore_eos": True})["text"]
        stopped = completion(server, {"model": "tiny", "prompt": PROMPTS[0], "max_tokens": 5, "temperature": 0,
                                      "ignore_eos": True})
        return greedy, together, sampled, stopped

    def test_same_outputs_and_metrics(self):
        plain = Server(model=self.model())
        try:
            expected = self.texts(plain)
        finally:
            self.assertEqual(plain.stop(), 0)
        spec = Server("--speculative-config", self.SPEC, model=self.model())
        try:
            greedy, together, sampled, stopped = self.texts(spec)
            metrics = spec.metrics()
        finally:
            self.assertEqual(spec.stop(), 0)
        for got, want in zip(greedy, expected[0]):
            self.assertEqual(got["text"], want["text"])
            self.assertEqual(got["logprobs"]["tokens"], want["logprobs"]["tokens"])
            for a, b in zip(got["logprobs"]["token_logprobs"], want["logprobs"]["token_logprobs"]):
                self.assertAlmostEqual(a, b, delta=1e-3)
        self.assertEqual(together, expected[1])
        self.assertEqual(sampled, expected[2])
        self.assertEqual(stopped["text"], expected[3]["text"])
        self.assertEqual(stopped["finish_reason"], "length")

        def total(name):
            return sum(v for k, v in metrics.items() if k.startswith(name + "{"))
        drafts = total("vllm:spec_decode_num_drafts_total")
        draft_tokens = total("vllm:spec_decode_num_draft_tokens_total")
        accepted = total("vllm:spec_decode_num_accepted_tokens_total")
        self.assertGreater(drafts, 0)
        self.assertGreater(accepted, 0)
        self.assertLessEqual(accepted, draft_tokens)
        self.assertLessEqual(draft_tokens, self.K * drafts)
        self.assertEqual(total("vllm:spec_decode_num_accepted_tokens_per_pos_total"), accepted)

    def test_parallel_layouts(self):
        # TP broadcasts the verify batch; DP + EP lock-step and PD hybrid take it as a decode step.
        plain = Server(model=self.model())
        try:
            expected = [completion(plain, {"model": "tiny", "prompt": p, "max_tokens": 32, "temperature": 0,
                                           "ignore_eos": True})["text"] for p in PROMPTS]
        finally:
            self.assertEqual(plain.stop(), 0)
        for layout in (["-tp", "2"], ["-dp", "2", "--enable-expert-parallel"],
                       ["-dp", "2", "--enable-expert-parallel", "--pd-hybrid"]):
            with self.subTest(layout=layout):
                s = Server("--speculative-config", self.SPEC, *layout, model=self.model())
                try:
                    with concurrent.futures.ThreadPoolExecutor(len(PROMPTS)) as pool:
                        got = list(pool.map(lambda p: completion(s, {"model": "tiny", "prompt": p, "max_tokens": 32,
                                                                     "temperature": 0, "ignore_eos": True})["text"],
                                            PROMPTS))
                    metrics = s.metrics()
                finally:
                    self.assertEqual(s.stop(), 0)
                self.assertEqual(got, expected)
                accepted = sum(v for k, v in metrics.items()
                               if k.startswith("vllm:spec_decode_num_accepted_tokens_total{"))
                self.assertGreater(accepted, 0)

    def test_refusals(self):
        refused = [
            (['--speculative-config', '{"method": "eagle", "num_speculative_tokens": 2}'],
             "--speculative-config: method 'eagle' is not supported"),
            (['--speculative-config', '{"method": "ngram", "num_speculative_tokens": 0}'],
             "'num_speculative_tokens' must be an integer in [1, 16]; got 0"),
            (['--speculative-config', '{"method": "ngram", "num_speculative_tokens": 17}'],
             "'num_speculative_tokens' must be an integer in [1, 16]; got 17"),
            (['--speculative-config', '{"method": "ngram", "num_speculative_tokens": 2, "prompt_lookup_min": 4, '
              '"prompt_lookup_max": 2}'], "'prompt_lookup_min' (4) must not exceed 'prompt_lookup_max' (2)"),
            (['--speculative-config', '{"method": "ngram"'], "--speculative-config: not valid JSON"),
            (['--speculative-config', '{"method": "deepseek_mtp", "num_speculative_tokens": 1}'],
             "method deepseek_mtp needs a checkpoint with an MTP layer"),
        ]
        for extra, message in refused:
            with self.subTest(extra=extra):
                out = subprocess.run([ARGS.moeserve, "serve", ARGS.model, "--port", "0", "--max-model-len", "512",
                                      *extra], capture_output=True, timeout=60)
                self.assertEqual(out.returncode, 2, out.stderr[-500:])
                err = out.stderr.decode()
                self.assertIn(message, err)
                self.assertEqual(len([l for l in err.splitlines() if l.startswith("error:")]), 1, err)


class MtpServe(SpecDecodeServe):
    """The same checks with the DeepSeek model's MTP layer as the draft head."""
    SPEC, K = MTP, 1

    def model(self):
        return ARGS.mtp_model

    def test_refusals(self):
        pass  # the base class's, for the flag's parse


if __name__ == "__main__":
    p = argparse.ArgumentParser()
    p.add_argument("--moeserve", required=True)
    p.add_argument("--model", required=True)
    p.add_argument("--trained-model", required=True)
    p.add_argument("--mtp-model", required=True)
    ARGS, rest = p.parse_known_args()
    serve_test.ARGS = ARGS
    loader = unittest.TestLoader()
    suite = unittest.TestSuite([loader.loadTestsFromTestCase(SpecDecodeServe), loader.loadTestsFromTestCase(MtpServe)])
    result = unittest.TextTestRunner(verbosity=2).run(suite)
    sys.exit(0 if result.wasSuccessful() else 1)
