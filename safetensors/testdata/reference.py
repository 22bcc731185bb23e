"""Independent safetensors reference for the Go tests, built from the format
description alone with struct, json and numpy (torch, when importable, gives
bfloat16 rounding).

  reference.py GOFILE SOURCE PYFILE EXPECT

parses GOFILE (written by Go) and checks it against SOURCE, the values Go
started from, then writes PYFILE as Hugging Face lays a file out and EXPECT,
the values numpy/torch decode from it. One process does both so that torch
is imported once.
"""
import json
import struct
import sys

import numpy as np

try:
    import torch
except Exception:  # torch is optional: only bfloat16 needs it
    torch = None

NP = {"F64": np.float64, "F32": np.float32, "F16": np.float16, "I64": np.int64,
      "I32": np.int32, "I16": np.int16, "I8": np.int8, "U8": np.uint8, "BOOL": np.bool_}


def write(path, expect_path):
    rng = np.random.default_rng(0)
    base = rng.standard_normal(12) * 100
    tensors = {}
    for dt in ["F64", "F32", "F16", "I64", "I32", "I16", "I8", "U8", "BOOL"]:
        if dt.startswith("F"):
            a = base.astype(NP[dt])
        elif dt == "BOOL":
            a = base > 0
        else:
            info = np.iinfo(NP[dt])
            a = rng.integers(info.min, info.max, size=12, dtype=NP[dt], endpoint=True)
        tensors["t." + dt.lower()] = (dt, [3, 4], a.tobytes(), a.astype(np.float64).tolist() if dt.startswith("F") else a.astype(np.int64).tolist())
    tensors["scalar"] = ("F32", [], np.float32(2.5).tobytes(), [2.5])
    if torch is not None:
        b = torch.tensor(base).to(torch.bfloat16)
        tensors["t.bf16"] = ("BF16", [2, 6], b.view(torch.int16).numpy().tobytes(), b.to(torch.float64).tolist())
    # Hugging Face's order: larger dtypes first, then by name.
    order = sorted(tensors, key=lambda n: (-np.dtype(NP.get(tensors[n][0], np.float16)).itemsize, n))
    header, off, data = {"__metadata__": {"format": "np"}}, 0, b""
    for n in order:
        dt, shape, raw, _ = tensors[n]
        header[n] = {"dtype": dt, "shape": shape, "data_offsets": [off, off + len(raw)]}
        off += len(raw)
        data += raw
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + data)
    with open(expect_path, "w") as f:
        json.dump({n: {"dtype": t[0], "shape": t[1], "values": t[3]} for n, t in tensors.items()}, f)


def read(path, source_path):
    with open(path, "rb") as f:
        raw = f.read()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + n])
    data = raw[8 + n:]
    source = json.load(open(source_path))
    bad = []
    if n % 8:
        bad.append("header length %d not a multiple of 8" % n)
    meta = header.pop("__metadata__", {})
    if meta != source["metadata"]:
        bad.append("metadata %r, want %r" % (meta, source["metadata"]))
    spans = sorted(tuple(e["data_offsets"]) for e in header.values())
    pos = 0
    for b, e in spans:
        if b != pos:
            bad.append("data_offsets not contiguous at %d" % b)
        pos = e
    if pos != len(data):
        bad.append("tensors cover %d of %d data bytes" % (pos, len(data)))
    if sorted(header) != sorted(source["tensors"]):
        bad.append("names %s, want %s" % (sorted(header), sorted(source["tensors"])))
    for name, want in source["tensors"].items():
        e = header.get(name)
        if e is None:
            continue
        b, end = e["data_offsets"]
        buf = data[b:end]
        if e["dtype"] != want["dtype"] or e["shape"] != want["shape"]:
            bad.append("%s: %s %s, want %s %s" % (name, e["dtype"], e["shape"], want["dtype"], want["shape"]))
            continue
        src = want["values"]
        if e["dtype"] == "BF16":
            got = (np.frombuffer(buf, dtype="<u2").astype(np.uint32) << 16).view(np.float32)
            if torch is not None:
                ref = torch.tensor(src, dtype=torch.float32).to(torch.bfloat16).to(torch.float32).numpy()
            else:
                ref = got if np.allclose(got, np.float32(src), rtol=2 ** -8) else np.float32(src)
        elif e["dtype"] == "F16":
            got = np.frombuffer(buf, dtype="<f2")
            with np.errstate(over="ignore"):  # 65520 and up round to infinity
                ref = np.array(src, dtype=np.float32).astype(np.float16)
        else:
            got = np.frombuffer(buf, dtype=np.dtype(NP[e["dtype"]]).newbyteorder("<"))
            ref = np.array(src).astype(NP[e["dtype"]])
        if got.shape != ref.shape or not np.array_equal(got, ref, equal_nan=True):
            bad.append("%s (%s): got %s, want %s" % (name, e["dtype"], got.tolist(), ref.tolist()))
    if bad:
        print("\n".join(bad))
        sys.exit(1)
    print("ok: %d tensors, bf16 via %s" % (len(header), "torch" if torch is not None else "tolerance"))


if __name__ == "__main__":
    read(sys.argv[1], sys.argv[2])
    write(sys.argv[3], sys.argv[4])
