# Self-tests of the numpy reference models: safetensors io, invariants (causality, expert
# permutation, GQA = repeated MHA), loop-by-loop re-derivations of one layer, YaRN constants, and
# optional torch cross-checks. Run: /usr/bin/python3 -m unittest discover -s tests/reference
import cmath
import json
import math
import os
import shutil
import struct
import subprocess
import sys
import tempfile
import unittest

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import deepseek_v3_ref as dsr  # noqa: E402
import golden_stick_np as gs  # noqa: E402
import qwen3_moe_ref as qwr  # noqa: E402
import ref_common as rc  # noqa: E402
import safetensors_np as st  # noqa: E402
import tiny_models as tm  # noqa: E402

# scripts/setup.sh installs Debian's python3-torch and CTest sets MOESERVE_REQUIRE_TORCH=1, so in
# `make test` a missing torch fails here instead of skipping the cross-checks; run by hand without
# torch, they skip.
try:
    import torch
except ImportError:
    if os.environ.get("MOESERVE_REQUIRE_TORCH") == "1":
        raise
    torch = None

PROMPT = [3, 17, 42, 5, 88, 1, 60, 23]


def read_json(path):
    with open(path) as f:
        return json.load(f)


def assert_close(test, a, b, tol=1e-10):
    a, b = np.asarray(a), np.asarray(b)
    test.assertEqual(a.shape, b.shape)
    err = np.max(np.abs(a - b) / (1.0 + np.abs(b))) if a.size else 0.0
    test.assertLess(err, tol, f"max relative error {err}")


class TempDirTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="moeserve_ref_")

    def tearDown(self):
        shutil.rmtree(self.tmp, ignore_errors=True)


# ------------------------------------------------------------------------------------------------
class SafetensorsTest(TempDirTest):
    def test_round_trip_every_dtype(self):
        tensors = {
            "f32": ("F32", np.array([[1.5, -2.25e-3], [3.0e7, 0.0]])),
            "f16": ("F16", np.array([0.5, -65504.0, 2.0 ** -24])),
            "bf16": ("BF16", np.array([[1.0, -0.375, 2.0 ** 127]])),
            "f8": ("F8_E4M3", np.array([448.0, -0.015625, 2.0 ** -9, 0.0])),
            "i8": ("I8", np.array([-128, 0, 127], dtype=np.int8)),
            "i32": ("I32", np.array([-(2 ** 31), 7], dtype=np.int32)),
            "i64": ("I64", np.array([2 ** 40, -3], dtype=np.int64)),
        }
        path = os.path.join(self.tmp, "x.safetensors")
        st.write_safetensors(path, tensors, {"format": "pt"})
        got, dtypes = st.read_safetensors(path, with_dtypes=True)
        self.assertEqual(set(got), set(tensors))
        for name, (dtype, a) in tensors.items():
            self.assertEqual(dtypes[name], dtype)
            self.assertEqual(got[name].shape, a.shape)
            np.testing.assert_array_equal(got[name], a.astype(got[name].dtype))
        self.assertEqual(got["bf16"].dtype, np.float32)
        self.assertEqual(got["i64"].dtype, np.int64)
        # layout: 8-byte LE length, JSON, data; offsets contiguous in name order
        raw = open(path, "rb").read()
        (n,) = struct.unpack("<Q", raw[:8])
        header = json.loads(raw[8:8 + n])
        self.assertEqual(header["__metadata__"], {"format": "pt"})
        self.assertEqual(header["bf16"]["data_offsets"], [0, 6])
        self.assertEqual(len(raw), 8 + n + max(v["data_offsets"][1]
                                               for k, v in header.items() if k != "__metadata__"))

    def test_bf16_rounds_to_nearest_even(self):
        one_ulp = 2.0 ** -7
        x = np.array([1.0 + one_ulp / 2, 1.0 + 3 * one_ulp / 2, 1.0 + one_ulp / 2 + 2 ** -20,
                      -1.0 - one_ulp / 2, np.inf, np.nan], dtype=np.float32)
        bits = st.f32_to_bf16_bits(x)
        self.assertEqual([int(b) for b in bits[:5]], [0x3F80, 0x3F82, 0x3F81, 0xBF80, 0x7F80])
        self.assertTrue(np.isnan(st.bf16_bits_to_f32(bits[5:])).all())

    def test_f8_e4m3_table_and_encoder(self):
        t = st.F8E4M3_TABLE
        self.assertEqual(t[0x38], 1.0)
        self.assertEqual(t[0x7E], 448.0)
        self.assertEqual(t[0x01], 2.0 ** -9)
        self.assertEqual(t[0x08], 2.0 ** -6)
        self.assertEqual(t[0xB8], -1.0)
        self.assertTrue(np.isnan(t[0x7F]) and np.isnan(t[0xFF]))
        finite = np.array([c for c in range(256) if c not in (0x7F, 0xFF, 0x80)], dtype=np.uint8)
        np.testing.assert_array_equal(st.f32_to_f8e4m3_bytes(t[finite]), finite)
        enc = st.f32_to_f8e4m3_bytes(np.array([1000.0, -1000.0, 1.0625, 1.1875, 0.0]))
        # 1.0625 is halfway between 1.0 (0x38) and 1.125 (0x39): even code wins
        self.assertEqual([int(e) for e in enc], [0x7E, 0xFE, 0x38, 0x3A, 0x00])

    def test_sharded_directory_and_fp8_block_dequant(self):
        rng = np.random.default_rng(1)
        tensors = {f"t{i}": ("BF16", rng.standard_normal((3, 4))) for i in range(5)}
        w8 = np.array([[1.0, 2.0, -0.5], [448.0, 0.25, 3.0], [1.5, 1.0, 1.0]])
        tensors["q.weight"] = ("F8_E4M3", w8)
        tensors["q.weight_scale_inv"] = ("F32", np.array([[2.0, 0.5], [4.0, 1.0]]))
        st.write_sharded(self.tmp, tensors, 3)
        with open(os.path.join(self.tmp, "config.json"), "w") as f:
            json.dump({"quantization_config": {"weight_block_size": [2, 2]}}, f)
        got = st.load_model_dir(self.tmp)
        self.assertNotIn("q.weight_scale_inv", got)
        scale = np.array([[2, 2, .5], [2, 2, .5], [4, 4, 1]])
        np.testing.assert_array_equal(got["q.weight"], w8 * scale)
        for i in range(5):
            bf = st.bf16_bits_to_f32(st.f32_to_bf16_bits(tensors[f"t{i}"][1]))
            np.testing.assert_array_equal(got[f"t{i}"], bf)

    def test_truncated_file_is_an_error(self):
        path = os.path.join(self.tmp, "bad.safetensors")
        with open(path, "wb") as f:
            f.write(struct.pack("<Q", 1000) + b"{}")
        with self.assertRaises(ValueError):
            st.read_safetensors(path)


# ------------------------------------------------------------------------------------------------
class RopeAndRoutingTest(unittest.TestCase):
    def test_yarn_constants_for_deepseek_v3(self):
        # DeepSeek-V3: rope dim 64, base 10000, factor 40, original 4096, beta 32 / 1.
        # corr_dim(32) = 64 ln(4096 / 64 pi) / (2 ln 10000) = 10.47 -> floor 10;
        # corr_dim(1) = 64 ln(4096 / 2 pi) / (2 ln 10000) = 22.51 -> ceil 23.
        self.assertEqual(rc.yarn_correction_range(32, 1, 64, 10000.0, 4096), (10, 23))
        scaling = {"factor": 40, "original_max_position_embeddings": 4096, "beta_fast": 32,
                   "beta_slow": 1}
        inv = rc.yarn_inv_freq(64, 10000.0, scaling, 163840)
        base = 10000.0 ** (-np.arange(0, 64, 2) / 64)
        np.testing.assert_allclose(inv[:11], base[:11], rtol=1e-15)  # pure extrapolation
        np.testing.assert_allclose(inv[23:], base[23:] / 40, rtol=1e-15)  # pure interpolation
        r = (16 - 10) / 13
        self.assertAlmostEqual(inv[16], base[16] / 40 * r + base[16] * (1 - r), places=15)
        self.assertAlmostEqual(rc.yarn_get_mscale(40, 1.0), 1.3688879454113936, places=14)
        cfg = dict(tm.DEEPSEEK_V3_TINY, qk_nope_head_dim=128, qk_rope_head_dim=64,
                   rope_scaling={"type": "yarn", "factor": 40, "mscale": 1.0,
                                 "mscale_all_dim": 1.0, "original_max_position_embeddings": 4096})
        self.assertAlmostEqual(dsr.softmax_scale(cfg), 192 ** -0.5 * 1.3688879454113936 ** 2,
                               places=14)
        self.assertEqual(dsr.yarn_factors(cfg)[1], 1.0)

    def test_rope_depends_on_relative_position_only(self):
        rng = np.random.default_rng(2)
        q, k = rng.standard_normal((2, 16))
        inv = 1.0 / 10000.0 ** (np.arange(0, 16, 2) / 16)
        for apply in (rc.apply_rope_neox, rc.apply_rope_interleave):
            def dot(pq, pk):
                cq, sq = rc.rope_tables(inv, [pq], 1.0)
                ck, sk = rc.rope_tables(inv, [pk], 1.0)
                return float(apply(q[None], cq, sq)[0] @ apply(k[None], ck, sk)[0])
            self.assertAlmostEqual(dot(7, 3), dot(107, 103), places=10)
            self.assertAlmostEqual(dot(0, 0), float(q @ k), places=12)

    def test_interleaved_rope_equals_complex_pairs(self):
        # DeepSeek's inference code rotates complex numbers (x[2i] + i x[2i+1]) by p * f_i.
        rng = np.random.default_rng(3)
        q, k = rng.standard_normal((2, 8))
        inv = np.array([1.0, 0.3, 0.05, 0.001])
        cq, sq = rc.rope_tables(inv, [5], 1.0)
        ck, sk = rc.rope_tables(inv, [2], 1.0)
        got = rc.apply_rope_interleave(q[None], cq, sq)[0] @ rc.apply_rope_interleave(
            k[None], ck, sk)[0]
        want = 0.0
        for i in range(4):
            a = complex(q[2 * i], q[2 * i + 1]) * cmath.exp(1j * 5 * inv[i])
            b = complex(k[2 * i], k[2 * i + 1]) * cmath.exp(1j * 2 * inv[i])
            want += a.real * b.real + a.imag * b.imag
        self.assertAlmostEqual(float(got), want, places=12)

    def test_qwen_routing(self):
        cfg = {"num_experts_per_tok": 2, "norm_topk_prob": False}
        logits = np.array([[0.0, 2.0, 1.0, 2.0]])
        idx, w = qwr.route(cfg, logits)
        self.assertEqual(idx.tolist(), [[1, 3]])  # tie 1 vs 3: lower id first
        p = np.exp(logits[0]) / np.exp(logits[0]).sum()
        np.testing.assert_allclose(w[0], [p[1], p[3]], rtol=1e-15)
        idx, w = qwr.route(dict(cfg, norm_topk_prob=True), logits)
        np.testing.assert_allclose(w[0], [0.5, 0.5], rtol=1e-15)

    def test_deepseek_v3_group_limited_routing(self):
        cfg = dict(tm.DEEPSEEK_V3_TINY, n_routed_experts=8, n_group=4, topk_group=2,
                   num_experts_per_tok=2, routed_scaling_factor=2.0, norm_topk_prob=True)
        s = np.array([0.95, 0.05, 0.7, 0.6, 0.5, 0.55, 0.1, 0.2])  # groups {0,1}{2,3}{4,5}{6,7}
        logits = np.log(s / (1 - s))[None]
        bias = np.zeros(8)
        # group scores (top-2 sums): 1.0, 1.3, 1.05, 0.3 -> keep groups 1 and 2; expert 0
        # (best single score) is dropped with its group.
        idx, w = dsr.route(cfg, logits, bias)
        self.assertEqual(idx.tolist(), [[2, 3]])
        np.testing.assert_allclose(w[0], np.array([0.7, 0.6]) / (1.3 + 1e-20) * 2.0, rtol=1e-14)
        # the bias steers selection only: weights stay the unbiased sigmoid scores
        bias = np.array([0, 0, 0, 0, 0.3, 0, 0, 0.0])
        idx, w = dsr.route(cfg, logits, bias)
        self.assertEqual(idx.tolist(), [[4, 2]])
        np.testing.assert_allclose(w[0], np.array([0.5, 0.7]) / 1.2 * 2.0, rtol=1e-14)
        # HF masks dropped experts with 0.0, not -inf: a negative kept score loses to them
        bias = np.array([0, 0, -1, -1, -1, -1, 0, 0.0])
        idx, _ = dsr.route(dict(cfg, topk_group=1), logits, bias)
        self.assertEqual(idx.tolist(), [[0, 1]])  # group 0 wins (1.0); fine either way
        idx, _ = dsr.route(dict(cfg, n_group=1, topk_group=1), logits, bias)
        self.assertEqual(idx.tolist(), [[0, 7]])

    def test_deepseek_v2_routing(self):
        cfg = dict(tm.DEEPSEEK_V3_TINY, model_type="deepseek_v2", n_routed_experts=4, n_group=2,
                   topk_group=1, num_experts_per_tok=2, routed_scaling_factor=3.0,
                   norm_topk_prob=False, scoring_func="softmax")
        logits = np.array([[3.0, -5.0, 2.0, 2.5]])
        p = np.exp(logits[0]) / np.exp(logits[0]).sum()
        idx, w = dsr.route(dict(cfg, topk_method="greedy"), logits, np.zeros(4))
        self.assertEqual(idx.tolist(), [[0, 3]])
        np.testing.assert_allclose(w[0], p[[0, 3]] * 3.0, rtol=1e-14)
        idx, w = dsr.route(dict(cfg, topk_method="group_limited_greedy"), logits, np.zeros(4))
        self.assertEqual(idx.tolist(), [[0, 1]])  # group max: 3.0 vs 2.5 -> group 0 only
        idx, w = dsr.route(dict(cfg, topk_method="greedy", norm_topk_prob=True), logits,
                           np.zeros(4))
        np.testing.assert_allclose(w[0], p[[0, 3]] / p[[0, 3]].sum(), rtol=1e-14)


# ------------------------------------------------------------------------------------------------
def qwen_loop_forward(t, cfg, ids):
    """Straight-line re-derivation of Qwen3-MoE with explicit loops over tokens, heads, pairs."""
    H, KV, d = cfg["num_attention_heads"], cfg["num_key_value_heads"], cfg["head_dim"]
    eps, base = cfg["rms_norm_eps"], cfg["rope_theta"]

    def norm(v, w):
        return v / math.sqrt(sum(float(a) * a for a in v) / len(v) + eps) * w

    def rot(v, pos):
        out = v.copy()
        for i in range(d // 2):
            ang = pos * base ** (-2.0 * i / d)
            a, b = v[i], v[i + d // 2]
            out[i] = a * math.cos(ang) - b * math.sin(ang)
            out[i + d // 2] = b * math.cos(ang) + a * math.sin(ang)
        return out

    def mlp(pre, v):
        g, u = t[pre + ".gate_proj.weight"] @ v, t[pre + ".up_proj.weight"] @ v
        return t[pre + ".down_proj.weight"] @ np.array(
            [gi / (1 + math.exp(-gi)) * ui for gi, ui in zip(g, u)])

    xs = [t["model.embed_tokens.weight"][i].copy() for i in ids]
    for layer in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{layer}"
        hs = [norm(x, t[p + ".input_layernorm.weight"]) for x in xs]
        qs, ks, vs = [], [], []
        for pos, h in enumerate(hs):
            q = t[p + ".self_attn.q_proj.weight"] @ h
            k = t[p + ".self_attn.k_proj.weight"] @ h
            qs.append([rot(norm(q[j * d:(j + 1) * d], t[p + ".self_attn.q_norm.weight"]), pos)
                       for j in range(H)])
            ks.append([rot(norm(k[j * d:(j + 1) * d], t[p + ".self_attn.k_norm.weight"]), pos)
                       for j in range(KV)])
            v = t[p + ".self_attn.v_proj.weight"] @ h
            vs.append([v[j * d:(j + 1) * d] for j in range(KV)])
        for pos in range(len(xs)):
            heads_out = []
            for j in range(H):
                g = j // (H // KV)
                sc = [float(qs[pos][j] @ ks[s][g]) / math.sqrt(d) for s in range(pos + 1)]
                m = max(sc)
                e = [math.exp(c - m) for c in sc]
                heads_out.append(sum(e[s] / sum(e) * vs[s][g] for s in range(pos + 1)))
            xs[pos] = xs[pos] + t[p + ".self_attn.o_proj.weight"] @ np.concatenate(heads_out)
        for pos in range(len(xs)):
            h = norm(xs[pos], t[p + ".post_attention_layernorm.weight"])
            if p + ".mlp.gate.weight" in t:
                lg = t[p + ".mlp.gate.weight"] @ h
                ex = [math.exp(c - max(lg)) for c in lg]
                prob = [c / sum(ex) for c in ex]
                chosen = sorted(range(len(prob)), key=lambda e: (-prob[e], e))
                chosen = chosen[:cfg["num_experts_per_tok"]]
                tot = sum(prob[e] for e in chosen) if cfg["norm_topk_prob"] else 1.0
                xs[pos] = xs[pos] + sum(prob[e] / tot * mlp(f"{p}.mlp.experts.{e}", h)
                                        for e in chosen)
            else:
                xs[pos] = xs[pos] + mlp(p + ".mlp", h)
    head = t.get("lm_head.weight", t["model.embed_tokens.weight"])
    return np.array([head @ norm(x, t["model.norm.weight"]) for x in xs])


class Qwen3MoeTest(TempDirTest):
    def test_files_load_exactly_and_cli_matches_forward(self):
        tensors, cfg = tm.make_qwen3_moe(self.tmp)
        weights, cfg2 = rc.load_model(self.tmp)
        self.assertEqual(cfg, cfg2)
        for k in tensors:
            np.testing.assert_array_equal(weights[k], tensors[k])
        logits = qwr.forward(weights, cfg, PROMPT)
        out, gjson = os.path.join(self.tmp, "l.f32"), os.path.join(self.tmp, "g.json")
        subprocess.run([sys.executable, os.path.join(HERE, "qwen3_moe_ref.py"), "--model",
                        self.tmp, "--tokens", ",".join(map(str, PROMPT)), "--out", out,
                        "--greedy", "4", "--greedy-out", gjson,
                        "--trace-dir", os.path.join(self.tmp, "trace")], check=True)
        got = np.fromfile(out, dtype="<f4").reshape(len(PROMPT), cfg["vocab_size"])
        np.testing.assert_array_equal(got, logits.astype(np.float32))
        g = read_json(gjson)
        seq = list(PROMPT)
        for _ in range(4):
            seq.append(int(np.argmax(qwr.forward(weights, cfg, seq)[-1])))
        self.assertEqual(g["tokens"], seq[len(PROMPT):])
        self.assertEqual(g["sequence"], seq)
        self.assertTrue(all(m >= 0 for m in g["margins"]))
        layer2 = np.fromfile(os.path.join(self.tmp, "trace", "layer_2.f32"), dtype="<f4")
        self.assertEqual(layer2.size, len(PROMPT) * cfg["hidden_size"])

    def test_sharded_checkpoint_gives_same_logits(self):
        tensors, cfg = tm.make_qwen3_moe(self.tmp)
        sharded = os.path.join(self.tmp, "sharded")
        tm.write_model(sharded, cfg, tensors, num_shards=3)
        weights, _ = rc.load_model(sharded)
        np.testing.assert_array_equal(qwr.forward(weights, cfg, PROMPT),
                                      qwr.forward(tensors, cfg, PROMPT))

    def test_prefix_logits_equal_full_sequence_logits(self):
        tensors, cfg = tm.make_qwen3_moe(self.tmp)
        full = qwr.forward(tensors, cfg, PROMPT)
        for n in (1, 3, 7):
            assert_close(self, qwr.forward(tensors, cfg, PROMPT[:n]), full[:n], 1e-12)

    def test_expert_permutation_leaves_logits_unchanged(self):
        tensors, cfg = tm.make_qwen3_moe(self.tmp)
        want = qwr.forward(tensors, cfg, PROMPT)
        perm = np.random.default_rng(5).permutation(cfg["num_experts"])
        moved = dict(tensors)
        for layer in (0, 2):
            p = f"model.layers.{layer}.mlp"
            moved[p + ".gate.weight"] = tensors[p + ".gate.weight"][perm]
            for new, old in enumerate(perm):
                for proj in ("gate", "up", "down"):
                    moved[f"{p}.experts.{new}.{proj}_proj.weight"] = tensors[
                        f"{p}.experts.{old}.{proj}_proj.weight"]
        assert_close(self, qwr.forward(moved, cfg, PROMPT), want, 1e-12)

    def test_gqa_equals_mha_with_repeated_kv_heads(self):
        tensors, cfg = tm.make_qwen3_moe(self.tmp)
        want = qwr.forward(tensors, cfg, PROMPT)
        d, heads, kv = cfg["head_dim"], cfg["num_attention_heads"], cfg["num_key_value_heads"]
        mha = dict(tensors)
        for layer in range(cfg["num_hidden_layers"]):
            for proj in ("k", "v"):
                name = f"model.layers.{layer}.self_attn.{proj}_proj.weight"
                blocks = tensors[name].reshape(kv, d, -1)
                mha[name] = np.repeat(blocks, heads // kv, axis=0).reshape(heads * d, -1)
        got = qwr.forward(mha, dict(cfg, num_key_value_heads=heads), PROMPT)
        assert_close(self, got, want, 1e-12)

    def test_matches_loop_derivation(self):
        # one MoE layer, and a dense + MoE pair with biases-free attention and tied embeddings
        for over in ({"num_hidden_layers": 1, "mlp_only_layers": []},
                     {"num_hidden_layers": 2, "tie_word_embeddings": True,
                      "norm_topk_prob": False}):
            tensors, cfg = tm.make_qwen3_moe(self.tmp, seed=7, **over)
            assert_close(self, qwr.forward(tensors, cfg, PROMPT[:5]),
                         qwen_loop_forward(tensors, cfg, PROMPT[:5]), 1e-10)

    def test_layer_kinds_and_options(self):
        cfg = dict(tm.QWEN3_TINY, num_hidden_layers=6, decoder_sparse_step=2, mlp_only_layers=[3])
        self.assertEqual([qwr.is_moe_layer(cfg, i) for i in range(6)],
                         [False, True, False, False, False, True])
        tensors, cfg = tm.make_qwen3_moe(self.tmp, attention_bias=True, decoder_sparse_step=2)
        full = qwr.forward(tensors, cfg, PROMPT)
        assert_close(self, qwr.forward(tensors, cfg, PROMPT[:4]), full[:4], 1e-12)
        with self.assertRaises(KeyError):
            qwr.forward({k: v for k, v in tensors.items() if not k.endswith(".bias")}, cfg,
                        PROMPT)

    def test_yarn_rope_scaling(self):
        scaling = {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 4}
        tensors, cfg = tm.make_qwen3_moe(self.tmp, rope_scaling=scaling)
        cos, sin = qwr.rope_for(cfg, np.arange(3))
        m = 0.1 * math.log(4.0) + 1.0  # HF default attention factor
        inv = rc.yarn_inv_freq(16, 10000.0, scaling, 256)
        np.testing.assert_allclose(cos[2, :8], np.cos(2 * inv) * m, rtol=1e-14)
        np.testing.assert_allclose(sin[2, 8:], np.sin(2 * inv) * m, rtol=1e-14)
        plain = qwr.forward(tensors, dict(cfg, rope_scaling=None), PROMPT)
        scaled = qwr.forward(tensors, cfg, PROMPT)
        self.assertGreater(np.abs(plain - scaled).max(), 1e-3)
        # rope_parameters (newer transformers layout) means the same thing
        newer = dict(cfg, rope_scaling=None, rope_parameters=dict(scaling, rope_theta=10000.0))
        assert_close(self, qwr.forward(tensors, newer, PROMPT), scaled, 1e-14)


# ------------------------------------------------------------------------------------------------
def deepseek_loop_forward(t, cfg, ids):
    """Loop re-derivation of DeepSeek-V3 in the *absorbed* MLA form (scores against the latent
    vector), with complex-number RoPE on interleaved pairs and hand-written YaRN."""
    H, dn, dr, dv = (cfg["num_attention_heads"], cfg["qk_nope_head_dim"],
                     cfg["qk_rope_head_dim"], cfg["v_head_dim"])
    rank, eps = cfg["kv_lora_rank"], cfg["rms_norm_eps"]
    rs = cfg["rope_scaling"]
    f, base = rs["factor"], cfg["rope_theta"]

    def msc(m):
        return 0.1 * m * math.log(f) + 1.0 if m else 1.0

    def corr(rot):
        return dr * math.log(rs["original_max_position_embeddings"] / (rot * 2 * math.pi)) / (
            2 * math.log(base))
    lo, hi = max(math.floor(corr(rs["beta_fast"])), 0), min(math.ceil(corr(rs["beta_slow"])),
                                                            dr - 1)
    inv = []
    for i in range(dr // 2):
        ramp = min(max((i - lo) / (hi - lo), 0.0), 1.0)
        inv.append(base ** (-2 * i / dr) * ((1 - ramp) + ramp / f))
    cmul = msc(rs["mscale"]) / msc(rs["mscale_all_dim"])
    scale = (dn + dr) ** -0.5 * msc(rs["mscale_all_dim"]) ** 2

    def norm(v, w, e=eps):
        return v / math.sqrt(float(v @ v) / len(v) + e) * w

    def rope(v, pos):
        return [complex(v[2 * i], v[2 * i + 1]) * cmath.exp(1j * pos * inv[i]) * cmul
                for i in range(dr // 2)]

    def mlp(pre, v):
        g, u = t[pre + ".gate_proj.weight"] @ v, t[pre + ".up_proj.weight"] @ v
        return t[pre + ".down_proj.weight"] @ (g / (1 + np.exp(-g)) * u)

    xs = [t["model.embed_tokens.weight"][i].copy() for i in ids]
    for layer in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{layer}"
        a = p + ".self_attn"
        wkv = t[a + ".kv_b_proj.weight"].reshape(H, dn + dv, rank)
        w_uk, w_uv = wkv[:, :dn], wkv[:, dn:]
        hs = [norm(x, t[p + ".input_layernorm.weight"]) for x in xs]
        lat, kpe, qn, qpe = [], [], [], []
        for pos, h in enumerate(hs):
            if cfg.get("q_lora_rank") is None:
                q = t[a + ".q_proj.weight"] @ h
            else:
                q = t[a + ".q_b_proj.weight"] @ norm(t[a + ".q_a_proj.weight"] @ h,
                                                     t[a + ".q_a_layernorm.weight"], 1e-6)
            q = q.reshape(H, dn + dr)
            qn.append([w_uk[j].T @ q[j, :dn] for j in range(H)])  # absorbed into latent space
            qpe.append([rope(q[j, dn:], pos) for j in range(H)])
            kv = t[a + ".kv_a_proj_with_mqa.weight"] @ h
            lat.append(norm(kv[:rank], t[a + ".kv_a_layernorm.weight"], 1e-6))
            kpe.append(rope(kv[rank:], pos))
        for pos in range(len(xs)):
            outs = []
            for j in range(H):
                sc = [(float(qn[pos][j] @ lat[s]) + sum(
                    (qa * kb.conjugate()).real for qa, kb in zip(qpe[pos][j], kpe[s]))) * scale
                    for s in range(pos + 1)]
                e = [math.exp(c - max(sc)) for c in sc]
                ctx = sum(e[s] / sum(e) * lat[s] for s in range(pos + 1))
                outs.append(w_uv[j] @ ctx)
            xs[pos] = xs[pos] + t[a + ".o_proj.weight"] @ np.concatenate(outs)
        for pos in range(len(xs)):
            h = norm(xs[pos], t[p + ".post_attention_layernorm.weight"])
            if p + ".mlp.gate.weight" not in t:
                xs[pos] = xs[pos] + mlp(p + ".mlp", h)
                continue
            s = [1 / (1 + math.exp(-c)) for c in t[p + ".mlp.gate.weight"] @ h]
            b = t[p + ".mlp.gate.e_score_correction_bias"]
            c = [s[e] + b[e] for e in range(len(s))]
            per = len(s) // cfg["n_group"]
            gsc = [sum(sorted(c[g * per:(g + 1) * per])[-2:]) for g in range(cfg["n_group"])]
            keep = sorted(range(len(gsc)), key=lambda g: (-gsc[g], g))[:cfg["topk_group"]]
            cm = [c[e] if e // per in keep else 0.0 for e in range(len(s))]
            chosen = sorted(range(len(s)), key=lambda e: (-cm[e], e))[:cfg["num_experts_per_tok"]]
            tot = sum(s[e] for e in chosen) + 1e-20 if cfg["norm_topk_prob"] else 1.0
            y = sum(s[e] / tot * cfg["routed_scaling_factor"] * mlp(f"{p}.mlp.experts.{e}", h)
                    for e in chosen)
            xs[pos] = xs[pos] + y + mlp(p + ".mlp.shared_experts", h)
    return np.array([t["lm_head.weight"] @ norm(x, t["model.norm.weight"]) for x in xs])


class DeepseekTest(TempDirTest):
    def test_cli_matches_forward(self):
        _, cfg = tm.make_deepseek(self.tmp)
        weights, _ = rc.load_model(self.tmp)
        out, gjson = os.path.join(self.tmp, "l.f32"), os.path.join(self.tmp, "g.json")
        subprocess.run([sys.executable, os.path.join(HERE, "deepseek_v3_ref.py"), "--model",
                        self.tmp, "--tokens", ",".join(map(str, PROMPT)), "--out", out,
                        "--greedy", "3", "--greedy-out", gjson], check=True)
        got = np.fromfile(out, dtype="<f4").reshape(len(PROMPT), cfg["vocab_size"])
        np.testing.assert_array_equal(got, dsr.forward(weights, cfg, PROMPT).astype(np.float32))
        self.assertEqual(len(read_json(gjson)["tokens"]), 3)

    def test_prefix_logits_equal_full_sequence_logits(self):
        for over in ({}, {"q_lora_rank": None}, {"model_type": "deepseek_v2",
                                                 "scoring_func": "softmax",
                                                 "topk_method": "group_limited_greedy"}):
            tensors, cfg = tm.make_deepseek(self.tmp, **over)
            full = dsr.forward(tensors, cfg, PROMPT)
            for n in (1, 4):
                assert_close(self, dsr.forward(tensors, cfg, PROMPT[:n]), full[:n], 1e-12)

    def test_expert_permutation_within_and_across_groups(self):
        tensors, cfg = tm.make_deepseek(self.tmp)
        want = dsr.forward(tensors, cfg, PROMPT)
        per = cfg["n_routed_experts"] // cfg["n_group"]
        # swap groups 0 and 2, and reverse the experts inside every group
        group_perm = [2, 1, 0, 3]
        perm = [group_perm[e // per] * per + (per - 1 - e % per)
                for e in range(cfg["n_routed_experts"])]
        moved = dict(tensors)
        for layer in (1, 2):
            p = f"model.layers.{layer}.mlp"
            moved[p + ".gate.weight"] = tensors[p + ".gate.weight"][perm]
            moved[p + ".gate.e_score_correction_bias"] = tensors[
                p + ".gate.e_score_correction_bias"][perm]
            for new, old in enumerate(perm):
                for proj in ("gate", "up", "down"):
                    moved[f"{p}.experts.{new}.{proj}_proj.weight"] = tensors[
                        f"{p}.experts.{old}.{proj}_proj.weight"]
        assert_close(self, dsr.forward(moved, cfg, PROMPT), want, 1e-12)

    def test_matches_absorbed_loop_derivation(self):
        for over in ({"num_hidden_layers": 1, "first_k_dense_replace": 0},
                     {"num_hidden_layers": 2, "q_lora_rank": None, "norm_topk_prob": False}):
            tensors, cfg = tm.make_deepseek(self.tmp, seed=11, **over)
            assert_close(self, dsr.forward(tensors, cfg, PROMPT[:5]),
                         deepseek_loop_forward(tensors, cfg, PROMPT[:5]), 1e-10)

    def test_rope_layout_option_and_layer_kinds(self):
        tensors, cfg = tm.make_deepseek(self.tmp)
        a = dsr.forward(tensors, cfg, PROMPT)
        b = dsr.forward(tensors, dict(cfg, rope_interleave=False), PROMPT)
        self.assertGreater(np.abs(a - b).max(), 1e-4)  # the layout is observable
        cfg = dict(cfg, num_hidden_layers=6, first_k_dense_replace=1, moe_layer_freq=2)
        self.assertEqual([dsr.is_moe_layer(cfg, i) for i in range(6)],
                         [False, False, True, False, True, False])


# ------------------------------------------------------------------------------------------------
class GoldenStickTest(unittest.TestCase):
    def test_rope_rows_come_back_in_hf_order(self):
        # MindFormers keeps a block's even rows, then its odd rows (docs/quantization.md, the spec)
        r, hf = 8, np.arange(20).reshape(20, 1)
        mf = hf.copy()
        for b in (4, 12):
            mf[b:b + r] = np.concatenate([hf[b:b + r:2], hf[b + 1:b + r:2]])
        np.testing.assert_array_equal(gs._unpermute_rope(mf, [4, 12], r), hf)

    def test_static_a8w8_divides_per_channel(self):
        w = {"p.input_scale": np.array([0.5, 0.25]), "p.input_zp": np.array([3.0, 3.0]),
             "p.weight": np.array([[1, -2]], np.int8), "p.quant_bias": np.array([-3], np.int32),
             "p.deq_scale": np.array([0.1])}
        x = np.array([[1.0, -1.0]])  # q = [rint(2 + 3), rint(-4 + 3)] = [5, -1]
        np.testing.assert_allclose(gs.static_a8w8(w, "p", x), [[(5 * 1 + -1 * -2 - 3) * 0.1]])
        x = np.array([[1000.0, -1000.0]])  # saturates at 127 / -128
        np.testing.assert_allclose(gs.static_a8w8(w, "p", x), [[(127 + 256 - 3) * 0.1]])

    def test_int64_dequant_scale_holds_f32_bits(self):
        bits = np.array([0.375], np.float32).view(np.uint32).astype(np.int64)
        np.testing.assert_array_equal(gs._deq_scale(bits), [0.375])


@unittest.skipIf(torch is None, "torch is not installed")
class TorchCrossCheckTest(unittest.TestCase):
    def test_bf16_and_f16_encoders_match_torch(self):
        rng = np.random.default_rng(9)
        x = np.concatenate([rng.standard_normal(4000) * 10.0 ** rng.integers(-8, 8, 4000),
                            [0.0, -0.0, 3.4e38, -3.4e38, 1e-40, 1.00390625, 1.01171875]])
        x = x.astype(np.float32)
        want = torch.from_numpy(x).to(torch.bfloat16).view(torch.int16).numpy().view(np.uint16)
        np.testing.assert_array_equal(st.f32_to_bf16_bits(x), want)
        back = torch.from_numpy(want.view(np.int16)).view(torch.bfloat16).float().numpy()
        np.testing.assert_array_equal(st.bf16_bits_to_f32(want), back)
        path = os.path.join(tempfile.mkdtemp(prefix="moeserve_ref_"), "h.safetensors")
        st.write_safetensors(path, {"h": ("F16", x)})
        got = st.read_safetensors(path)["h"]
        shutil.rmtree(os.path.dirname(path))
        np.testing.assert_array_equal(got, torch.from_numpy(x).half().float().numpy())

    def test_rope_and_attention_match_torch(self):
        rng = np.random.default_rng(10)
        H, n, d = 3, 6, 8
        q, k, v = (rng.standard_normal((H, n, d)) for _ in range(3))
        inv = rc.yarn_inv_freq(d, 10000.0, {"factor": 4.0, "original_max_position_embeddings": 2},
                               64)
        cos, sin = rc.rope_tables(inv, np.arange(n), 1.1)

        def t_rot_half(x):
            return torch.cat((-x[..., d // 2:], x[..., : d // 2]), dim=-1)
        tq, tk, tv = (torch.from_numpy(a) for a in (q, k, v))
        tc, ts = torch.from_numpy(cos), torch.from_numpy(sin)
        tq_r = tq * tc + t_rot_half(tq) * ts
        np.testing.assert_allclose(rc.apply_rope_neox(q, cos, sin), tq_r.numpy(), rtol=1e-13)
        # HF apply_rotary_pos_emb_interleave: view(d/2, 2).transpose(-1, -2).reshape(d)
        ti = tq.view(H, n, d // 2, 2).transpose(3, 2).reshape(H, n, d)
        np.testing.assert_allclose(rc.apply_rope_interleave(q, cos, sin),
                                   (ti * tc + t_rot_half(ti) * ts).numpy(), rtol=1e-13)
        mask = torch.triu(torch.full((n, n), float("-inf"), dtype=torch.float64), diagonal=1)
        w = torch.softmax(tq @ tk.transpose(1, 2) * 0.3 + mask, dim=-1)
        want = (w @ tv).transpose(0, 1).reshape(n, H * d).numpy()
        np.testing.assert_allclose(rc.causal_attention(q, k, v, 0.3), want, rtol=1e-12)

    def test_topk_matches_torch_on_distinct_values(self):
        x = np.random.default_rng(11).standard_normal((20, 16))
        vals, idx = torch.topk(torch.from_numpy(x), 5, dim=-1)
        for row, want in zip(x, idx.numpy()):
            self.assertEqual(list(rc.topk_stable(row, 5)), list(want))


if __name__ == "__main__":
    unittest.main()
