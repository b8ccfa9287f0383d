#!/usr/bin/python3
"""A random-weight Qwen3-MoE for the side-by-side benchmarks, written twice from one set of bytes.

  hf/         config.json, generation_config.json, model.safetensors (bf16, Hugging Face tensor
              names), the Qwen3 tokenizer files copied from --tokenizer-dir, random_weights.json
              (how the weights were drawn): what `moeserve --model` reads.
  model.gguf  (with --gguf) arch qwen3moe, laid out as llama.cpp's own converter lays out a real
              Qwen3-MoE: matrices BF16 with the experts of a layer stacked, norms and router F32.
              Its tensor data is read back from model.safetensors, not drawn again, so the two
              engines multiply the very same numbers; F32 tensors are exact widenings of bf16.

Nothing here comes from moeserve: the safetensors file is written by hand and the GGUF by
llama.cpp's gguf-py (PYTHONPATH=<llama.cpp>/gguf-py), so a bug in moeserve's own readers or
writers cannot make the two files agree by accident.

Values: every matrix ~ N(0, std^2), every RMSNorm weight 1 + N(0, norm_std^2) (norm_std 0: all
ones), rounded to bf16 with ties to even. Each tensor has its own generator seeded from
(--seed, a hash of its name), so a value never depends on the order tensors are written in.

Needs only numpy for the Hugging Face directory.
"""

import argparse
import hashlib
import json
import os
import shutil
import struct
import sys

import numpy as np

VOCAB = 151936  # Qwen3's embedding rows; the tokenizer itself uses ids up to 151668
BOS_ID, EOS_ID = 151643, 151645  # <|endoftext|>, <|im_end|>

# "bench" is the size the docs' side-by-side tables use: ~1.25B parameters, ~0.3B active per
# token, so a decode step reads ~0.6 GB of bf16, far past any L3. "tiny" is for a quick check.
PRESETS = {
    "bench": dict(hidden_size=1024, num_hidden_layers=12, num_attention_heads=16, num_key_value_heads=4,
                  head_dim=64, num_experts=64, num_experts_per_tok=8, moe_intermediate_size=384,
                  intermediate_size=3072),
    "tiny": dict(hidden_size=256, num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=2,
                 head_dim=64, num_experts=8, num_experts_per_tok=2, moe_intermediate_size=128,
                 intermediate_size=512),
}


def hf_config(preset):
    cfg = {
        "architectures": ["Qwen3MoeForCausalLM"],
        "model_type": "qwen3_moe",
        "vocab_size": VOCAB,
        **PRESETS[preset],
        "max_window_layers": PRESETS[preset]["num_hidden_layers"],
        "mlp_only_layers": [],
        "decoder_sparse_step": 1,
        "norm_topk_prob": True,
        "hidden_act": "silu",
        "rms_norm_eps": 1e-6,
        "rope_theta": 1000000.0,
        "rope_scaling": None,
        "max_position_embeddings": 40960,
        "attention_bias": False,
        "attention_dropout": 0.0,
        "use_sliding_window": False,
        "sliding_window": None,
        "tie_word_embeddings": False,
        "initializer_range": 0.02,
        "router_aux_loss_coef": 0.001,
        "output_router_logits": False,
        "use_cache": True,
        "bos_token_id": BOS_ID,
        "eos_token_id": EOS_ID,
        "torch_dtype": "bfloat16",
    }
    return cfg


def hf_tensors(cfg):
    """[(name, shape, is_norm)] in Hugging Face order and (out, in) shapes."""
    h, hd = cfg["hidden_size"], cfg["head_dim"]
    q_out, kv_out = cfg["num_attention_heads"] * hd, cfg["num_key_value_heads"] * hd
    ff = cfg["moe_intermediate_size"]
    out = [("model.embed_tokens.weight", (VOCAB, h), False)]
    for layer in range(cfg["num_hidden_layers"]):
        pre = f"model.layers.{layer}."
        out += [(pre + "input_layernorm.weight", (h,), True),
                (pre + "self_attn.q_proj.weight", (q_out, h), False),
                (pre + "self_attn.k_proj.weight", (kv_out, h), False),
                (pre + "self_attn.v_proj.weight", (kv_out, h), False),
                (pre + "self_attn.o_proj.weight", (h, q_out), False),
                (pre + "self_attn.q_norm.weight", (hd,), True),
                (pre + "self_attn.k_norm.weight", (hd,), True),
                (pre + "post_attention_layernorm.weight", (h,), True),
                (pre + "mlp.gate.weight", (cfg["num_experts"], h), False)]
        for e in range(cfg["num_experts"]):
            ex = f"{pre}mlp.experts.{e}."
            out += [(ex + "gate_proj.weight", (ff, h), False),
                    (ex + "up_proj.weight", (ff, h), False),
                    (ex + "down_proj.weight", (h, ff), False)]
    out += [("model.norm.weight", (h,), True), ("lm_head.weight", (VOCAB, h), False)]
    return out


def to_bf16(x):
    """float32 -> bf16 bit patterns (uint16), round to nearest, ties to even (no NaNs occur here)."""
    bits = x.astype(np.float32, copy=False).view(np.uint32)
    keep_odd = (bits >> 16) & 1
    return ((bits + 0x7FFF + keep_odd) >> 16).astype(np.uint16)


def bf16_to_f32(bits):
    return (bits.astype(np.uint32) << 16).view(np.float32)


def draw(seed, name, shape, is_norm, std, norm_std):
    name_key = int.from_bytes(hashlib.sha256(name.encode()).digest()[:8], "little")
    rng = np.random.default_rng([seed, name_key])
    if is_norm:
        x = np.ones(shape, np.float32)
        if norm_std:
            x += np.float32(norm_std) * rng.standard_normal(shape, np.float32)
    else:
        x = rng.standard_normal(shape, np.float32)
        x *= np.float32(std)
    return to_bf16(x)


def write_safetensors(path, tensors, seed, std, norm_std):
    """One bf16 file: 8-byte header length, JSON header, then the tensors back to back."""
    header, offset = {}, 0
    for name, shape, _ in tensors:
        size = 2 * int(np.prod(shape))
        header[name] = {"dtype": "BF16", "shape": list(shape), "data_offsets": [offset, offset + size]}
        offset += size
    head = json.dumps(header, separators=(",", ":")).encode()
    head += b" " * (-len(head) % 8)  # keep the data 8-byte aligned for readers that map it
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(head)) + head)
        for i, (name, shape, is_norm) in enumerate(tensors):
            draw(seed, name, shape, is_norm, std, norm_std).tofile(f)
            if i % 500 == 0:
                print(f"  {i}/{len(tensors)} tensors", file=sys.stderr)


def map_safetensors(path):
    """{name: uint16 array} as views of the file, nothing read until used."""
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(n))
    data = np.memmap(path, np.uint8, "r", offset=8 + n)
    return {name: data[b:e].view(np.uint16).reshape(info["shape"])
            for name, info in header.items() if name != "__metadata__"
            for b, e in [info["data_offsets"]]}


def gguf_tensors(cfg, st):
    """[(gguf name, array, as_f32)] in llama.cpp's naming; arrays are (lazy) views of st."""
    out = [("token_embd.weight", st["model.embed_tokens.weight"], False)]
    for layer in range(cfg["num_hidden_layers"]):
        hf, g = f"model.layers.{layer}.", f"blk.{layer}."
        out += [(g + "attn_norm.weight", st[hf + "input_layernorm.weight"], True),
                (g + "attn_q.weight", st[hf + "self_attn.q_proj.weight"], False),
                (g + "attn_k.weight", st[hf + "self_attn.k_proj.weight"], False),
                (g + "attn_v.weight", st[hf + "self_attn.v_proj.weight"], False),
                (g + "attn_output.weight", st[hf + "self_attn.o_proj.weight"], False),
                (g + "attn_q_norm.weight", st[hf + "self_attn.q_norm.weight"], True),
                (g + "attn_k_norm.weight", st[hf + "self_attn.k_norm.weight"], True),
                (g + "ffn_norm.weight", st[hf + "post_attention_layernorm.weight"], True),
                # The router stays F32 as llama.cpp's converter keeps it; llama-quantize leaves it so.
                (g + "ffn_gate_inp.weight", st[hf + "mlp.gate.weight"], True)]
        for proj, gname in (("gate_proj", "ffn_gate_exps"), ("up_proj", "ffn_up_exps"), ("down_proj", "ffn_down_exps")):
            # one 3-D tensor per layer and projection: [expert][out][in]
            experts = [st[f"{hf}mlp.experts.{e}.{proj}.weight"] for e in range(cfg["num_experts"])]
            out.append((f"{g}{gname}.weight", experts, False))
    out += [("output_norm.weight", st["model.norm.weight"], True),
            ("output.weight", st["lm_head.weight"], False)]
    return out


def materialize(arr, as_f32):
    a = np.stack(arr) if isinstance(arr, list) else np.asarray(arr)
    return bf16_to_f32(a) if as_f32 else np.ascontiguousarray(a)


def tokenizer_metadata(tok_dir, cfg):
    """What llama.cpp's byte-level BPE loader reads, taken from the Hugging Face tokenizer files."""
    with open(os.path.join(tok_dir, "tokenizer.json"), encoding="utf-8") as f:
        tok = json.load(f)
    with open(os.path.join(tok_dir, "tokenizer_config.json"), encoding="utf-8") as f:
        tcfg = json.load(f)
    import gguf
    TT = gguf.TokenType
    by_id = {i: t for t, i in tok["model"]["vocab"].items()}
    added = {a["id"]: a for a in tok["added_tokens"]}
    by_id.update({i: a["content"] for i, a in added.items()})
    tokens, types = [], []
    for i in range(VOCAB):
        text = by_id.get(i)
        if text is None:  # embedding rows past the tokenizer: placeholders llama.cpp never emits
            tokens.append(f"[PAD{i}]")
            types.append(TT.UNUSED)
            continue
        tokens.append(text)
        if i not in added:
            types.append(TT.NORMAL)
        # llama.cpp's converter also counts <|...|> as control even where Hugging Face says not
        # special (the FIM tokens); doing the same keeps tokenization equal to a converted Qwen3.
        elif added[i]["special"] or (text.startswith("<|") and text.endswith("|>")):
            types.append(TT.CONTROL)
        else:
            types.append(TT.USER_DEFINED)
    merges = [m if isinstance(m, str) else " ".join(m) for m in tok["model"]["merges"]]
    token_id = {t: i for i, t in enumerate(tokens)}
    eos, pad = tcfg.get("eos_token"), tcfg.get("pad_token")
    return dict(tokens=tokens, types=types, merges=merges,
                eos=token_id[eos] if eos else cfg["eos_token_id"],
                pad=token_id[pad] if pad else None,
                # Qwen3's tokenizer has no BOS token; the model config's id fills the slot, as in
                # llama.cpp's converter, and add_bos stays false so nothing is prepended.
                bos=cfg["bos_token_id"], add_bos=bool(tcfg.get("add_bos_token", False)),
                chat_template=tcfg.get("chat_template"))


def write_gguf(hf_dir, path, name):
    import gguf
    with open(os.path.join(hf_dir, "config.json")) as f:
        cfg = json.load(f)
    st = map_safetensors(os.path.join(hf_dir, "model.safetensors"))
    tensors = gguf_tensors(cfg, st)

    w = gguf.GGUFWriter(path, "qwen3moe")
    w.add_type(gguf.GGUFType.MODEL)
    w.add_name(name)
    w.add_file_type(gguf.LlamaFileType.MOSTLY_BF16)
    w.add_quantization_version(gguf.GGML_QUANT_VERSION)
    w.add_block_count(cfg["num_hidden_layers"])
    w.add_context_length(cfg["max_position_embeddings"])
    w.add_embedding_length(cfg["hidden_size"])
    w.add_feed_forward_length(cfg["intermediate_size"])
    w.add_expert_feed_forward_length(cfg["moe_intermediate_size"])
    w.add_expert_count(cfg["num_experts"])
    w.add_expert_used_count(cfg["num_experts_per_tok"])
    w.add_head_count(cfg["num_attention_heads"])
    w.add_head_count_kv(cfg["num_key_value_heads"])
    w.add_key_length(cfg["head_dim"])
    w.add_value_length(cfg["head_dim"])
    w.add_rope_freq_base(cfg["rope_theta"])
    w.add_layer_norm_rms_eps(cfg["rms_norm_eps"])

    tm = tokenizer_metadata(hf_dir, cfg)
    w.add_tokenizer_model("gpt2")  # byte-level BPE
    w.add_tokenizer_pre("qwen2")   # the pre-tokenizer regex Qwen2 and Qwen3 share
    w.add_token_list(tm["tokens"])
    w.add_token_types(tm["types"])
    w.add_token_merges(tm["merges"])
    w.add_bos_token_id(tm["bos"])
    w.add_eos_token_id(tm["eos"])
    if tm["pad"] is not None:
        w.add_pad_token_id(tm["pad"])
    w.add_add_bos_token(tm["add_bos"])
    if tm["chat_template"]:
        w.add_chat_template(tm["chat_template"])

    # Tensor infos first, data after, one tensor in memory at a time (the file is ~2.5 GB).
    for gname, arr, as_f32 in tensors:
        shape = ((len(arr),) + arr[0].shape) if isinstance(arr, list) else arr.shape
        dtype = gguf.GGMLQuantizationType.F32 if as_f32 else gguf.GGMLQuantizationType.BF16
        nbytes = int(np.prod(shape)) * (4 if as_f32 else 2)
        w.add_tensor_info(gname, shape, np.float32 if as_f32 else np.uint16, nbytes, raw_dtype=dtype)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_ti_data_to_file()
    for _, arr, as_f32 in tensors:
        w.write_tensor_data(materialize(arr, as_f32))
    w.close()
    return tensors


def check_gguf(path, tensors):
    """Reads the GGUF back and compares every tensor with the safetensors values it came from."""
    import gguf
    r = gguf.GGUFReader(path)
    got = {t.name: t for t in r.tensors}
    assert len(got) == len(tensors), (len(got), len(tensors))
    for gname, arr, as_f32 in tensors:
        want = materialize(arr, as_f32)
        t = got[gname]
        same_shape = tuple(int(d) for d in reversed(t.shape)) == want.shape  # the reader gives ggml's order
        if not same_shape or not np.array_equal(np.asarray(t.data).view(np.uint8).ravel(),
                                                want.view(np.uint8).ravel()):
            sys.exit(f"{path}: {gname} differs from model.safetensors")
    print(f"  {path}: all {len(tensors)} tensors equal to model.safetensors", file=sys.stderr)


def write_hf_dir(a, cfg, tensors, drawn):
    print(f"{a.preset}: {len(tensors)} tensors, {drawn['parameters'] / 1e9:.3f}B parameters", file=sys.stderr)
    part = a.out + ".partial"  # renamed at the end, so a cut-short run never looks finished
    shutil.rmtree(part, ignore_errors=True)
    os.makedirs(part)
    for fname, obj in (("config.json", cfg),
                       ("generation_config.json", {"bos_token_id": BOS_ID, "eos_token_id": [EOS_ID, BOS_ID],
                                                   "do_sample": False}),
                       ("random_weights.json", drawn)):
        with open(os.path.join(part, fname), "w") as f:
            json.dump(obj, f, indent=1)
            f.write("\n")
    for fname in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copyfile(os.path.join(a.tokenizer_dir, fname), os.path.join(part, fname))
    write_safetensors(os.path.join(part, "model.safetensors"), tensors, a.seed, a.std, a.norm_std)
    os.rename(part, a.out)
    print(f"wrote {a.out}", file=sys.stderr)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--preset", choices=sorted(PRESETS), default="bench")
    ap.add_argument("--out", required=True, help="Hugging Face directory to write (reused if already drawn alike)")
    ap.add_argument("--tokenizer-dir", required=True, help="folder with Qwen3's tokenizer.json, tokenizer_config.json")
    ap.add_argument("--gguf", help="also write this BF16 GGUF from the same bytes (needs gguf-py)")
    ap.add_argument("--seed", type=int, default=20250601)
    ap.add_argument("--std", type=float, default=0.02, help="standard deviation of every matrix")
    ap.add_argument("--norm-std", type=float, default=0.0, help="spread of the RMSNorm weights around 1")
    a = ap.parse_args()

    with open(os.path.join(a.tokenizer_dir, "tokenizer.json"), encoding="utf-8") as f:
        tok = json.load(f)
    top_id = max([*tok["model"]["vocab"].values(), *(t["id"] for t in tok["added_tokens"])])
    if EOS_ID not in {t["id"] for t in tok["added_tokens"]} or top_id >= VOCAB:
        sys.exit(f"{a.tokenizer_dir}/tokenizer.json is not Qwen3's (ids up to {top_id}, no <|im_end|> at {EOS_ID})")

    cfg = hf_config(a.preset)
    tensors = hf_tensors(cfg)
    n_params = sum(int(np.prod(s)) for _, s, _ in tensors)
    drawn = {"preset": a.preset, "seed": a.seed, "std": a.std, "norm_std": a.norm_std, "parameters": n_params,
             "writer": "benchmarks/peer/gen_qwen3moe_random.py"}
    if os.path.exists(a.out):  # a finished directory (see the rename below): only the GGUF is left to do
        with open(os.path.join(a.out, "random_weights.json")) as f:
            if json.load(f) != drawn:
                sys.exit(f"{a.out} holds other weights than these arguments draw; remove it first")
        print(f"{a.out} already drawn with these arguments", file=sys.stderr)
    else:
        write_hf_dir(a, cfg, tensors, drawn)
    if a.gguf:
        tmp = a.gguf + ".partial"
        written = write_gguf(a.out, tmp, f"qwen3moe-random-{a.preset}-seed{a.seed}")
        check_gguf(tmp, written)
        os.rename(tmp, a.gguf)
        print(f"wrote {a.gguf}", file=sys.stderr)


if __name__ == "__main__":
    main()
