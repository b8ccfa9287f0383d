#!/usr/bin/env python3
"""Writes tests/data/gguf/dequant_*.bin: random GGUF blocks and what llama.cpp's gguf-py
(`gguf.quants.dequantize`, numpy) makes of them, for tests/kernels/gguf_dequant_test.cpp, which
requires moeserve's dequantization to give the same bytes.

Run with gguf-py from the llama.cpp source that the npm package node-llama-cpp ships (see
tools/goldens/README.md, "GGUF dequantization goldens"):

    PYTHONPATH=$LLAMA_CPP/gguf-py /usr/bin/python3 tools/goldens/gguf_quants.py tests/data/gguf

A .bin file is: b"MSGGUFDQ", u32 ggml type, u32 element count, u32 block byte count (all
little-endian), the blocks, then the element count of f32 values gguf-py returned.
`dequant_exhaustive.txt` holds, for F16 and BF16, the FNV-1a 64 hash of the f32 bytes gguf-py
gives for all 65536 bit patterns in order.

It also writes GGUF files with gguf-py's own GGUFWriter, which tests/io/gguf_file_test.cpp reads:
`gguf_py.gguf` (metadata of many types, tensors of several types) and the same content split
two tensors per file, `gguf_py_split-0000i-of-00003.gguf`.
"""
import pathlib
import struct
import sys

import numpy as np
from gguf import GGUFWriter, quants
from gguf.constants import GGML_QUANT_SIZES, GGMLQuantizationType as T

SEED = 27
# f16 scales that exercise the edges: zeros, subnormals, extremes, infinities, NaNs.
EDGE_F16 = [0x0000, 0x8000, 0x0001, 0x8001, 0x03FF, 0x83FF, 0x0400, 0x7BFF, 0xFBFF, 0x3C00, 0xBC00,
            0x7C00, 0xFC00, 0x7E00, 0xFE00, 0x7C01, 0x7DFF]
# Byte offsets of the f16 scale fields (d, and dmin / m where the type has one) in each block.
SCALE_FIELDS = {
    T.Q4_0: [0], T.Q4_1: [0, 2], T.Q5_0: [0], T.Q5_1: [0, 2], T.Q8_0: [0],
    T.Q2_K: [80, 82], T.Q3_K: [108], T.Q4_K: [0, 2], T.Q5_K: [0, 2], T.Q6_K: [208],
}
NUM_BLOCKS = {32: 48, 256: 6}


def blocks_for(qtype, rng):
    block_size, type_size = GGML_QUANT_SIZES[qtype]
    n = NUM_BLOCKS[block_size]
    data = rng.integers(0, 256, size=(n, type_size), dtype=np.uint8)
    fields = SCALE_FIELDS[qtype]
    for b in range(n):
        for k, off in enumerate(fields):
            # Edge scales in turn on each field; every third block keeps a plain random scale.
            if b % 3 == 2:
                h = int(rng.integers(0x0400, 0x5000))  # normal, moderate
                h |= 0x8000 if rng.integers(0, 2) else 0
            else:
                h = EDGE_F16[(b + 5 * k) % len(EDGE_F16)]
            data[b, off:off + 2] = np.frombuffer(struct.pack("<H", h), dtype=np.uint8)
    return data.reshape(-1), n * block_size


def mxfp4_blocks(rng):
    """MXFP4 blocks for the dequantization golden: every e8m0 exponent 0-255 once, in random order,
    then blocks whose 16 bytes hold every nibble in both halves; random bytes otherwise."""
    block_size, type_size = GGML_QUANT_SIZES[T.MXFP4]
    n = 272
    data = rng.integers(0, 256, size=(n, type_size), dtype=np.uint8)
    data[:256, 0] = rng.permutation(256).astype(np.uint8)
    for b in range(256, n):  # byte j: low nibble j, high nibble (j + b) % 16
        data[b, 1:] = np.arange(16, dtype=np.uint8) | (((np.arange(16) + b) % 16).astype(np.uint8) << 4)
    return data.reshape(-1), n * block_size


def mxfp4_quant_inputs(rng):
    """f32 blocks for the MXFP4 quantization golden: random normal blocks over magnitudes 2^-140 to
    2^125; blocks whose largest magnitude is the float just below 2^k (where float32 log2 rounds up
    to k) for every k a float can hold, and 2^k or the float above it for every eighth; ties halfway
    between two levels; zeros and signed zeros."""
    blocks = []
    for k in range(-149, 128):
        p = np.float32(2.0 ** k)
        below = np.nextafter(p, np.float32(0))
        for m in (below, p, np.nextafter(p, np.float32(np.inf))) if k % 8 == 0 else (below,):
            if not np.isfinite(m) or m == 0:
                continue
            x = (rng.standard_normal(32) * float(m) / 4).astype(np.float32)
            x = np.clip(x, -m, m)
            x[rng.integers(0, 32)] = m if rng.integers(0, 2) else -m
            blocks.append(x)
    for _ in range(64):
        blocks.append((rng.standard_normal(32) * 2.0 ** rng.integers(-140, 125)).astype(np.float32))
    for k in (-120, -3, 0, 7, 100):  # max 8 d (d = 2^k): every value halfway between two levels
        d = 2.0 ** k
        halves = np.array([0.5, 1.5, 2.5, 3.5, 5, 7, 10, 14, 0.25, 11, 13, 15.5], dtype=np.float64)
        x = np.concatenate([halves, -halves, [8, -8, 12, -12, 0, -0.0, 6, -6]]) * d
        blocks.append(x.astype(np.float32))
    blocks.append(np.zeros(32, dtype=np.float32))
    blocks.append(np.full(32, -0.0, dtype=np.float32))
    return np.stack(blocks)


def write_quant_bin(path, qtype, x, blocks):
    """b"MSGGUFQT", u32 ggml type, u32 element count, u32 block byte count, the f32 inputs, then
    the blocks gguf-py's quantize made of them."""
    with open(path, "wb") as f:
        f.write(b"MSGGUFQT")
        f.write(struct.pack("<III", int(qtype), x.size, blocks.size))
        f.write(x.astype("<f4").tobytes())
        f.write(blocks.tobytes())


def write_bin(path, qtype, blocks, n, values):
    assert values.dtype == np.float32 and values.size == n
    with open(path, "wb") as f:
        f.write(b"MSGGUFDQ")
        f.write(struct.pack("<III", int(qtype), n, blocks.size))
        f.write(blocks.tobytes())
        f.write(values.astype("<f4").tobytes())


def fnv1a64(data):
    h = 0xCBF29CE484222325
    for byte in data:
        h = ((h ^ byte) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return h


def write_gguf_py_files(out):
    """Small GGUF files written by gguf-py itself (format compatibility of the reader)."""
    for name, split in (("gguf_py.gguf", 0), ("gguf_py_split.gguf", 2)):
        w = GGUFWriter(out / name, "qwen3moe", split_max_tensors=split)
        w.add_block_count(2)
        w.add_context_length(4096)
        w.add_rope_freq_base(1000000.0)
        w.add_bool("test.flag", True)
        w.add_int8("test.i8", -8)
        w.add_uint64("test.u64", 2**40 + 1)
        w.add_float64("test.f64", -0.125)
        w.add_token_list(["<s>", "hello", "\u00e9t\u00e9"])
        w.add_token_types([3, 1, 1])
        w.add_array("test.floats", [0.5, -1.5])
        f32 = np.arange(15, dtype=np.float32).reshape(3, 5) / 4
        w.add_tensor("output_norm.weight", f32)
        w.add_tensor("token_embd.weight", np.linspace(-1, 1, 16, dtype=np.float32).reshape(2, 8).astype(np.float16))
        q = np.linspace(-2, 2, 128, dtype=np.float32).reshape(2, 64)
        w.add_tensor("blk.0.attn_q.weight", quants.quantize(q, T.Q8_0), raw_dtype=T.Q8_0)
        w.add_tensor("blk.0.ffn_up_exps.weight", quants.quantize(q[:, :32].copy(), T.Q4_0), raw_dtype=T.Q4_0)
        w.add_tensor("blk.0.attn_k.weight", quants.quantize(q[:1], T.BF16), raw_dtype=T.BF16)
        w.write_header_to_file()
        w.write_kv_data_to_file()
        w.write_tensors_to_file()
        w.close()


def main():
    out = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else "tests/data/gguf")
    out.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(SEED)
    with np.errstate(all="ignore"):
        for qtype in SCALE_FIELDS:
            blocks, n = blocks_for(qtype, rng)
            values = quants.dequantize(blocks, qtype).reshape(-1)
            write_bin(out / f"dequant_{qtype.name}.bin", qtype, blocks, n, values)
        # MXFP4 has its own generator, so the goldens above keep their bytes.
        mx = np.random.default_rng(SEED + int(T.MXFP4))
        blocks, n = mxfp4_blocks(mx)
        values = quants.dequantize(blocks, T.MXFP4).reshape(-1)
        write_bin(out / "dequant_MXFP4.bin", T.MXFP4, blocks, n, values)
        x = mxfp4_quant_inputs(mx)
        write_quant_bin(out / "quant_MXFP4.bin", T.MXFP4, x, quants.quantize(x, T.MXFP4).reshape(-1))
        # F32 is a view: random bit patterns, NaN payloads and signalling NaNs included.
        f32 = rng.integers(0, 2**32, size=64, dtype=np.uint64).astype(np.uint32)
        f32[:4] = [0x7F800001, 0xFFBFFFFF, 0x00000001, 0x80000000]
        blocks = f32.view(np.uint8)
        write_bin(out / "dequant_F32.bin", T.F32, blocks, 64, quants.dequantize(blocks, T.F32).reshape(-1))
        every = np.arange(65536, dtype=np.uint32).astype("<u2").view(np.uint8)
        lines = []
        for qtype in (T.F16, T.BF16):
            values = quants.dequantize(every, qtype).reshape(-1).astype("<f4")
            lines.append(f"{qtype.name} {fnv1a64(values.tobytes()):016x}\n")
    (out / "dequant_exhaustive.txt").write_text("".join(lines))
    write_gguf_py_files(out)


if __name__ == "__main__":
    main()
