# Plain-numpy safetensors reader/writer for the reference models (no torch, no safetensors pkg).
# Reads one file or a sharded model directory (model.safetensors.index.json); converts BF16,
# F16 and F8_E4M3 to exact float32; writes files with round-to-nearest-even encoders.
"""Read and write Hugging Face safetensors files with numpy only.

File layout: 8-byte little-endian header length N, N bytes of JSON
{name: {"dtype", "shape", "data_offsets": [begin, end]}, "__metadata__": {...}},
then the data section; offsets are relative to the start of the data section.
"""

import json
import mmap
import os
import struct

import numpy as np

# dtype string -> (bytes per element, numpy dtype of the stored bits)
_STORAGE = {
    "F64": (8, np.dtype("<f8")),
    "F32": (4, np.dtype("<f4")),
    "F16": (2, np.dtype("<f2")),
    "BF16": (2, np.dtype("<u2")),
    "F8_E4M3": (1, np.dtype("u1")),
    "I8": (1, np.dtype("i1")),
    "U8": (1, np.dtype("u1")),
    "I16": (2, np.dtype("<i2")),
    "I32": (4, np.dtype("<i4")),
    "I64": (8, np.dtype("<i8")),
    "BOOL": (1, np.dtype("u1")),
}


def _f8e4m3_table():
    """float32[256]: the value of every OCP E4M3 ("fn") byte; 0x7f and 0xff are NaN."""
    table = np.zeros(256, dtype=np.float64)
    for v in range(256):
        sign = -1.0 if v & 0x80 else 1.0
        exp = (v >> 3) & 0xF
        man = v & 0x7
        if exp == 0xF and man == 0x7:
            table[v] = np.nan
        elif exp == 0:
            table[v] = sign * (man / 8.0) * 2.0 ** -6
        else:
            table[v] = sign * (1.0 + man / 8.0) * 2.0 ** (exp - 7)
    return table.astype(np.float32)


F8E4M3_TABLE = _f8e4m3_table()


def bf16_bits_to_f32(bits):
    """uint16 array of bf16 bit patterns -> float32 (exact)."""
    return (np.asarray(bits, dtype=np.uint32) << 16).view(np.float32)


def f32_to_bf16_bits(x):
    """float array -> uint16 bf16 bits, round to nearest, ties to even; NaN stays quiet NaN."""
    u = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)
    rounded = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16) & 0xFFFF
    nan = (u & 0x7FFFFFFF) > 0x7F800000
    rounded = np.where(nan, ((u >> 16) | 0x40) & 0xFFFF, rounded)
    return rounded.astype(np.uint16)


def f8e4m3_bytes_to_f32(raw):
    return F8E4M3_TABLE[np.asarray(raw, dtype=np.uint8)]


def f32_to_f8e4m3_bytes(x):
    """float array -> E4M3 bytes: round to nearest even, saturate to +-448, NaN -> 0x7f."""
    x = np.asarray(x, dtype=np.float64)
    positive = F8E4M3_TABLE[:0x7F].astype(np.float64)  # codes 0..126, increasing
    mag = np.minimum(np.abs(x), 448.0)
    hi = np.clip(np.searchsorted(positive, mag, side="left"), 0, 126)
    lo = np.clip(hi - 1, 0, 126)
    d_hi = positive[hi] - mag
    d_lo = mag - positive[lo]
    pick_lo = (d_lo < d_hi) | ((d_lo == d_hi) & (lo % 2 == 0))
    code = np.where(pick_lo, lo, hi).astype(np.uint8)
    code = np.where(np.signbit(x), code | 0x80, code).astype(np.uint8)
    return np.where(np.isnan(x), np.uint8(0x7F), code).astype(np.uint8)


def read_header(path):
    """(header dict without __metadata__, metadata dict, byte offset of the data section)."""
    with open(path, "rb") as f:
        raw_len = f.read(8)
        if len(raw_len) != 8:
            raise ValueError(f"{path}: file is shorter than the 8-byte header length")
        (n,) = struct.unpack("<Q", raw_len)
        size = os.fstat(f.fileno()).st_size
        if n > size - 8:
            raise ValueError(f"{path}: header length {n} exceeds file size {size}")
        header = json.loads(f.read(n).decode("utf-8"))
    metadata = header.pop("__metadata__", {}) or {}
    return header, metadata, 8 + n


def _decode(name, info, buf, data_start, path):
    dtype = info["dtype"]
    if dtype not in _STORAGE:
        raise ValueError(f"{path}: tensor {name} has unsupported dtype {dtype}")
    elem, storage = _STORAGE[dtype]
    shape = tuple(int(d) for d in info["shape"])
    begin, end = (int(o) for o in info["data_offsets"])
    count = int(np.prod(shape, dtype=np.int64)) if shape else 1
    if end - begin != count * elem:
        raise ValueError(
            f"{path}: tensor {name} spans {end - begin} bytes, expected {count * elem} "
            f"for {dtype}{list(shape)}")
    raw = np.frombuffer(buf, dtype=storage, count=count, offset=data_start + begin).reshape(shape)
    if dtype == "BF16":
        return bf16_bits_to_f32(raw)
    if dtype == "F16":
        return raw.astype(np.float32)
    if dtype == "F8_E4M3":
        return f8e4m3_bytes_to_f32(raw)
    if dtype == "BOOL":
        return raw.astype(bool)
    return np.array(raw)  # copy: detach from the mapping


def read_safetensors(path, names=None, with_dtypes=False):
    """Tensors of one file as numpy arrays: float dtypes -> float32 (exact), ints unchanged.

    names: optional iterable restricting what is decoded. With with_dtypes, returns
    (tensors, {name: stored dtype string}).
    """
    header, _, data_start = read_header(path)
    wanted = header.keys() if names is None else [n for n in names if n in header]
    out, dtypes = {}, {}
    with open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        if size == data_start:
            buf = b""
        else:
            buf = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        for name in wanted:
            out[name] = _decode(name, header[name], buf, data_start, path)
            dtypes[name] = header[name]["dtype"]
    return (out, dtypes) if with_dtypes else out


def _dequantize(tensors, dtypes, block_size):
    """Applies checkpoint scales in place: FP8 block scales (weight_scale_inv) and int8
    per-channel scales (compressed-tensors weight_scale), as exact float64 products.
    Scale tensors are removed. Activation quantization (W8A8) is not modelled."""
    for name in list(tensors):
        if not name.endswith(".weight"):
            continue
        w = tensors[name]
        if dtypes.get(name) == "F8_E4M3" and name + "_scale_inv" in tensors:
            s = np.asarray(tensors.pop(name + "_scale_inv"), dtype=np.float64)
            br, bc = block_size
            full = np.repeat(np.repeat(s, br, axis=0), bc, axis=1)[: w.shape[0], : w.shape[1]]
            tensors[name] = w.astype(np.float64) * full  # exact product
        elif dtypes.get(name) == "I8" and name + "_scale" in tensors:
            s = np.asarray(tensors.pop(name + "_scale"), dtype=np.float64).reshape(-1, 1)
            tensors[name] = w.astype(np.float64) * s  # exact product


_AWQ_NIBBLE = [0, 4, 1, 5, 2, 6, 3, 7]  # AutoAWQ: output column c of a word sits in nibble _AWQ_NIBBLE[c]


def _nibbles(words):
    """int32 [..., n] -> uint [..., 8 n]: element 8 i + k is bits 4k..4k+3 of word i."""
    u = np.asarray(words).astype(np.int64) & 0xFFFFFFFF
    shifts = np.arange(8, dtype=np.int64) * 4
    return ((u[..., None] >> shifts) & 0xF).reshape(*u.shape[:-1], -1)


def _dequantize_int4(tensors, q):
    """Replaces the int4 tensors of compressed-tensors pack-quantized, AutoAWQ (gemm) and GPTQ
    checkpoints by PREFIX.weight in float64, per each format's own definition (independent of
    moeserve's loader): compressed-tensors w = (q - zero_point) * scale with q and zero_point
    signed (stored + 8), the group of input column p being weight_g_idx[p] (actorder "group"); AWQ w = (q - z) * s; GPTQ w = (q - (z + 1)) * s (checkpoint_format gptq,
    z alone for gptq_v2), the group of input column p being g_idx[p]."""
    method = q.get("quant_method")
    if method == "compressed-tensors" and q.get("format") == "pack-quantized":
        wq = next(iter(q["config_groups"].values()))["weights"]
        for name in [n for n in tensors if n.endswith(".weight_packed")]:
            prefix = name[: -len(".weight_packed")]
            rows, cols = (int(v) for v in np.asarray(tensors.pop(prefix + ".weight_shape")).reshape(-1))
            qv = _nibbles(tensors.pop(name))[:, :cols].astype(np.float64) - 8.0
            s = np.asarray(tensors.pop(prefix + ".weight_scale"), dtype=np.float64)
            gs = wq["group_size"] if wq["strategy"] == "group" else cols
            if wq.get("symmetric", True):
                zp = np.zeros_like(s)
            else:
                zp = _nibbles(np.asarray(tensors.pop(prefix + ".weight_zero_point")).T).T[:rows].astype(np.float64) - 8.0
            # the group of input column p: weight_g_idx[p] (actorder "group"), else p // group_size
            g_idx = tensors.pop(prefix + ".weight_g_idx", None)
            g_idx = np.arange(cols) // gs if g_idx is None else np.asarray(g_idx).astype(np.int64)
            tensors[prefix + ".weight"] = (qv - zp[:, g_idx]) * s[:, g_idx]
    elif method in ("awq", "gptq"):
        gs = q.get("group_size", 128)
        plus_one = method == "gptq" and q.get("checkpoint_format", "gptq") == "gptq"
        for name in [n for n in tensors if n.endswith(".qweight")]:
            prefix = name[: -len(".qweight")]
            s = np.asarray(tensors.pop(prefix + ".scales"), dtype=np.float64)  # [groups, out]
            out = s.shape[1]
            z = _nibbles(tensors.pop(prefix + ".qzeros")).astype(np.float64)  # [groups, out] (raw order)
            if method == "awq":
                qv = _nibbles(tensors.pop(name)).astype(np.float64)  # [in, out] (raw order)
                order = (np.arange(out) // 8) * 8 + np.array(_AWQ_NIBBLE)[np.arange(out) % 8]
                qv, z = qv[:, order], z[:, order]
            else:
                qv = _nibbles(np.asarray(tensors.pop(name)).T).T.astype(np.float64)  # [in, out]
                z = z + (1.0 if plus_one else 0.0)
            cols = qv.shape[0]
            g_idx = tensors.pop(prefix + ".g_idx", None)
            g_idx = np.arange(cols) // (gs if gs > 0 else cols) if g_idx is None else np.asarray(g_idx).astype(np.int64)
            tensors[prefix + ".weight"] = ((qv - z[g_idx]) * s[g_idx]).T


def _signed_nibbles(b):
    """int8 bytes -> (low, high) signed 4-bit values (two's complement), as int64."""
    u = np.asarray(b).astype(np.int64) & 0xFF
    lo, hi = u & 0xF, u >> 4
    return np.where(lo >= 8, lo - 16, lo), np.where(hi >= 8, hi - 16, hi)


def _dequantize_modelslim_w4a8(tensors, desc):
    """Replaces the W4A8_DYNAMIC weights of a ModelSlim checkpoint (desc: its
    quant_model_description.json) by PREFIX.weight in float64, by msModelSlim's definition as
    vllm-ascend reads it: I8 .weight either [rows / 2, cols] with row 2i in the low nibble and
    2i + 1 in the high one (signed), or [rows, cols] one value per byte; w = q * weight_scale
    [rows, 1] * weight_scale_second [rows, cols / G] (per group of G columns, when present). The
    offsets must be zeros (symmetric); scale_bias is the NPU kernel's, not part of the weight."""
    for name in [n for n, t in desc.items() if t == "W4A8_DYNAMIC" and n.endswith(".weight")]:
        prefix = name[: -len(".weight")]
        s = np.asarray(tensors.pop(prefix + ".weight_scale"), dtype=np.float64).reshape(-1, 1)
        rows = s.shape[0]
        w = np.asarray(tensors[name])
        if w.shape[0] * 2 == rows:
            lo, hi = _signed_nibbles(w)
            q = np.empty((rows, w.shape[1]), dtype=np.float64)
            q[0::2], q[1::2] = lo, hi
        else:
            q = w.astype(np.float64)
        for off in (".weight_offset", ".weight_offset_second"):
            o = tensors.pop(prefix + off, None)
            assert o is None or not np.any(np.asarray(o)), prefix + off + " must be zeros"
        second = tensors.pop(prefix + ".weight_scale_second", None)
        if second is not None:
            second = np.asarray(second, dtype=np.float64)
            s = s * np.repeat(second, q.shape[1] // second.shape[1], axis=1)
        tensors.pop(prefix + ".scale_bias", None)
        tensors[name] = q * s


def load_model_dir(model_dir, dequantize=True):
    """All tensors of a HF model directory: model.safetensors, or the shards named by
    model.safetensors.index.json. Returns {name: ndarray}."""
    index_path = os.path.join(model_dir, "model.safetensors.index.json")
    single = os.path.join(model_dir, "model.safetensors")
    names = sorted(os.listdir(model_dir))
    others = [n for n in names if n.endswith(".safetensors.index.json")]
    loose = [n for n in names if n.endswith(".safetensors")]
    if not os.path.exists(index_path) and not os.path.exists(single):
        # other savers' names (ModelSlim quant_model_weights*, OmniInfer quant_model_weight_*)
        if len(others) == 1:
            index_path = os.path.join(model_dir, others[0])
        elif len(loose) == 1:
            single = os.path.join(model_dir, loose[0])
    tensors, dtypes = {}, {}
    if os.path.exists(index_path):
        with open(index_path) as f:
            weight_map = json.load(f)["weight_map"]
        by_file = {}
        for name, fname in weight_map.items():
            by_file.setdefault(fname, []).append(name)
        for fname, names in sorted(by_file.items()):
            part, part_dtypes = read_safetensors(os.path.join(model_dir, fname), names, True)
            missing = set(names) - set(part)
            if missing:
                raise ValueError(f"{fname}: index names {sorted(missing)[:3]} absent from shard")
            tensors.update(part)
            dtypes.update(part_dtypes)
    elif os.path.exists(single):
        tensors, dtypes = read_safetensors(single, with_dtypes=True)
    else:
        raise FileNotFoundError(f"{model_dir}: no model.safetensors or index.json")
    if dequantize:
        block = [128, 128]
        cfg_path = os.path.join(model_dir, "config.json")
        q = {}
        if os.path.exists(cfg_path):
            with open(cfg_path) as f:
                q = json.load(f).get("quantization_config") or {}
            block = q.get("weight_block_size") or block
        desc_path = os.path.join(model_dir, "quant_model_description.json")
        if os.path.exists(desc_path):
            with open(desc_path) as f:
                _dequantize_modelslim_w4a8(tensors, json.load(f))
        _dequantize(tensors, dtypes, block)
        _dequantize_int4(tensors, q)
    return tensors


def _encode(dtype, array):
    a = np.asarray(array)
    if dtype == "BF16":
        return f32_to_bf16_bits(a).astype("<u2").tobytes()
    if dtype == "F8_E4M3":
        return f32_to_f8e4m3_bytes(a).tobytes()
    if dtype == "BOOL":
        return a.astype(np.uint8).tobytes()
    if dtype not in _STORAGE:
        raise ValueError(f"cannot write dtype {dtype}")
    return np.ascontiguousarray(a, dtype=_STORAGE[dtype][1]).tobytes()


def write_safetensors(path, tensors, metadata=None):
    """tensors: {name: (dtype string, ndarray)}. Floats are rounded to the dtype (RNE).
    Tensors are laid out in sorted-name order, header padded with spaces to 8 bytes."""
    header = {}
    blobs = []
    offset = 0
    for name in sorted(tensors):
        dtype, array = tensors[name]
        blob = _encode(dtype, array)
        header[name] = {"dtype": dtype, "shape": list(np.shape(array)),
                        "data_offsets": [offset, offset + len(blob)]}
        blobs.append(blob)
        offset += len(blob)
    if metadata:
        header["__metadata__"] = {str(k): str(v) for k, v in metadata.items()}
    text = json.dumps(header, separators=(",", ":")).encode("utf-8")
    text += b" " * ((8 - len(text) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for blob in blobs:
            f.write(blob)


def write_sharded(model_dir, tensors, num_shards):
    """Writes tensors over num_shards files model-0000i-of-0000n.safetensors plus the index."""
    names = sorted(tensors)
    weight_map = {}
    for s in range(num_shards):
        fname = f"model-{s + 1:05d}-of-{num_shards:05d}.safetensors"
        part = {n: tensors[n] for n in names[s::num_shards]}
        write_safetensors(os.path.join(model_dir, fname), part, {"format": "pt"})
        weight_map.update({n: fname for n in part})
    with open(os.path.join(model_dir, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {}, "weight_map": weight_map}, f, indent=1)
