#!/usr/bin/python3
"""Independent PyTorch reference and speed anchor for pretrained decoder LMs
in Hugging Face layout: Qwen2ForCausalLM, Qwen3ForCausalLM, LlamaForCausalLM
and MistralForCausalLM.

Written from the Hugging Face modelling equations with plain torch 1.13
(Debian's python3-torch) and no `transformers` or `safetensors` package, so
that troupe's Go loader is checked against an implementation that shares no
code with it. Subcommands:

  logprobs --model-dir D --ids 1,2,3
      Loads config.json and model.safetensors (or the shards named by
      model.safetensors.index.json), widens F32/F16/BF16 weights to float32
      and prints one JSON object {"logprobs": [...]} where logprobs[i] is
      log p(ids[i+1] | ids[0..i]). `troupe lm logprobs` prints the same form.
  make-tiny --arch qwen2|qwen3|llama|mistral --out D [--seed N] [--dtype bf16|f16|f32] [--shards N]
      Writes a tiny random checkpoint: config.json with the keys Hugging
      Face's config classes serialise, and the weights under Hugging Face's
      tensor names (sharded with an index when --shards > 1).
  selftest
      Checks the reference against formulations written independently of it
      (see selftest below); exits non-zero on a mismatch.
  bench-decode --shape qwen2-0.5b --batch 1|8 [--runs N]
  bench-lora --shape qwen2-0.5b [--steps N]
      Speed anchors on random weights, float32, eager, one thread; one JSON
      line per measurement: {"name", "metric", "value", "timed", ...}, the
      name being the Go benchmark's that measures the same work.
  compare --go-test BIN --pkg-dir DIR [--repeat N]
      Alternates the Go benchmarks BenchmarkHFDecode and BenchmarkHFLoRAStep
      (from a `go test -c ./benchmarks` binary, GOMAXPROCS=1) with the same
      work here and prints GO/PT rows for table.py. run.sh runs it as topic
      "hf" (HF=1 or TOPICS=hf); called with run.sh's topic flags and no
      subcommand, hf.py means compare.

Usage: /usr/bin/python3 benchmarks/compare/hf.py SUBCOMMAND ... (for the speed
subcommands on an AVX-512 CPU with OPENBLAS_CORETYPE=SkylakeX; see README.md).
"""
import argparse
import json
import math
import os
import re
import statistics
import struct
import subprocess
import sys
import tempfile
import time

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")

import torch
import torch.nn.functional as F


class HFError(Exception):
    """A problem with a checkpoint or with the command line: reported as one
    line on stderr, without a traceback."""


# ---------------------------------------------------------------------------
# safetensors

ST_DTYPES = {"F32": (torch.float32, 4), "F16": (torch.float16, 2), "BF16": (torch.bfloat16, 2)}
ST_NAMES = {v[0]: k for k, v in ST_DTYPES.items()}


def read_safetensors(path):
    """name -> tensor (in the file's dtype) of one .safetensors file: an
    8-byte little-endian header length, a JSON header mapping names to
    dtype/shape/data_offsets (relative to the end of the header), then the
    raw little-endian data."""
    try:
        with open(path, "rb") as f:
            blob = f.read()
    except OSError as e:
        raise HFError(f"{path}: {e.strerror}") from None
    if len(blob) < 8:
        raise HFError(f"{path}: {len(blob)} bytes, too short for a safetensors header")
    (n,) = struct.unpack("<Q", blob[:8])
    if n > len(blob) - 8:
        raise HFError(f"{path}: header length {n} exceeds the file ({len(blob)} bytes)")
    try:
        header = json.loads(blob[8:8 + n].decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise HFError(f"{path}: bad safetensors header: {e}") from None
    if not isinstance(header, dict):
        raise HFError(f"{path}: safetensors header is not a JSON object")
    data = memoryview(blob)[8 + n:]
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        try:
            dtype, shape, (b, e) = info["dtype"], list(info["shape"]), info["data_offsets"]
        except (TypeError, KeyError, ValueError):
            raise HFError(f"{path}: tensor {name}: malformed header entry {info!r}") from None
        if dtype not in ST_DTYPES:
            raise HFError(f"{path}: tensor {name}: dtype {dtype} not supported (F32, F16, BF16)")
        tdtype, size = ST_DTYPES[dtype]
        count = math.prod(shape)
        if not (isinstance(b, int) and isinstance(e, int) and 0 <= b <= e <= len(data)):
            raise HFError(f"{path}: tensor {name}: data_offsets [{b}, {e}] outside the data ({len(data)} bytes)")
        if e - b != count * size:
            raise HFError(f"{path}: tensor {name}: {e - b} bytes for shape {shape} of {dtype} ({count * size} expected)")
        if count == 0:
            out[name] = torch.zeros(shape, dtype=tdtype)
        else:
            out[name] = torch.frombuffer(bytearray(data[b:e]), dtype=tdtype).reshape(shape)
    return out


def write_safetensors(path, tensors):
    """Writes name -> tensor (F32/F16/BF16) as one .safetensors file, the
    header padded with spaces to a multiple of 8 bytes as the reference
    writer does, so the data is aligned."""
    header, chunks, off = {"__metadata__": {"format": "pt"}}, [], 0
    for name in sorted(tensors):
        t = tensors[name].contiguous()
        if t.dtype not in ST_NAMES:
            raise HFError(f"{name}: cannot write dtype {t.dtype}")
        raw = t.view(torch.int16 if t.element_size() == 2 else torch.int32).numpy().tobytes()
        header[name] = {"dtype": ST_NAMES[t.dtype], "shape": list(t.shape), "data_offsets": [off, off + len(raw)]}
        chunks.append(raw)
        off += len(raw)
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for c in chunks:
            f.write(c)


def load_weights(model_dir):
    """All tensors of a checkpoint directory: model.safetensors, or the
    shards listed in model.safetensors.index.json."""
    index = os.path.join(model_dir, "model.safetensors.index.json")
    single = os.path.join(model_dir, "model.safetensors")
    if os.path.exists(index):
        try:
            with open(index) as f:
                wmap = json.load(f)["weight_map"]
        except (OSError, ValueError, KeyError, TypeError) as e:
            raise HFError(f"{index}: {e}") from None
        out = {}
        for shard in sorted(set(wmap.values())):
            got = read_safetensors(os.path.join(model_dir, shard))
            for name, t in got.items():
                if name in out:
                    raise HFError(f"{shard}: tensor {name} appears in two shards")
                out[name] = t
        missing = [n for n, s in wmap.items() if n not in out]
        if missing:
            raise HFError(f"{index}: tensors listed but absent from their shards: {missing[:5]}")
        return out
    if os.path.exists(single):
        return read_safetensors(single)
    raise HFError(f"{model_dir}: neither model.safetensors nor model.safetensors.index.json")


# ---------------------------------------------------------------------------
# configuration

ARCHS = {
    "Qwen2ForCausalLM": "qwen2",
    "Qwen3ForCausalLM": "qwen3",
    "LlamaForCausalLM": "llama",
    "MistralForCausalLM": "mistral",
}


class Config:
    """The fields of a Hugging Face config.json the forward pass reads, with
    the defaults of the corresponding transformers config class."""

    def __init__(self, d, where="config.json"):
        def need(k):
            if k not in d or d[k] is None:
                raise HFError(f"{where}: missing {k}")
            return d[k]

        archs = d.get("architectures") or []
        kinds = [ARCHS[a] for a in archs if a in ARCHS]
        if kinds:
            self.arch = kinds[0]
        elif d.get("model_type") in ARCHS.values():
            self.arch = d["model_type"]
        else:
            raise HFError(f"{where}: architectures {archs} / model_type {d.get('model_type')!r}: "
                          f"supported are {sorted(ARCHS)}")
        self.hidden = int(need("hidden_size"))
        self.heads = int(need("num_attention_heads"))
        self.kv_heads = int(d.get("num_key_value_heads") or self.heads)
        self.head_dim = int(d.get("head_dim") or self.hidden // self.heads)
        self.inter = int(need("intermediate_size"))
        self.layers = int(need("num_hidden_layers"))
        self.vocab = int(need("vocab_size"))
        self.eps = float(d.get("rms_norm_eps", 1e-6))
        # transformers 5 writes rope_theta and the scaling fields together
        # under rope_parameters; earlier versions rope_theta and rope_scaling.
        rp = d.get("rope_parameters") or {}
        self.theta = float(rp.get("rope_theta", d.get("rope_theta", 10000.0)))
        self.tie = bool(d.get("tie_word_embeddings", False))
        if self.heads % self.kv_heads:
            raise HFError(f"{where}: {self.heads} attention heads not a multiple of {self.kv_heads} KV heads")
        if d.get("hidden_act", "silu") != "silu":
            raise HFError(f"{where}: hidden_act {d['hidden_act']!r} not supported (silu)")
        if float(d.get("partial_rotary_factor", 1.0)) != 1.0:
            raise HFError(f"{where}: partial_rotary_factor {d['partial_rotary_factor']} not supported")
        # Qwen2 has q/k/v biases and none on o; Llama, Mistral and Qwen3
        # share attention_bias between q, k, v and o.
        if self.arch == "qwen2":
            self.qkv_bias, self.o_bias = True, False
        else:
            self.qkv_bias = self.o_bias = bool(d.get("attention_bias", False))
        self.mlp_bias = bool(d.get("mlp_bias", False)) if self.arch == "llama" else False
        self.qk_norm = self.arch == "qwen3"
        # Qwen2/Qwen3 carry a sliding_window that only counts when
        # use_sliding_window is set (and then only above max_window_layers,
        # which no supported checkpoint uses); Mistral's applies when set.
        self.window = None
        if self.arch == "mistral":
            self.window = d.get("sliding_window")
        elif d.get("use_sliding_window"):
            raise HFError(f"{where}: use_sliding_window not supported for {self.arch}")
        rs = d.get("rope_scaling") or rp
        self.rope_type = "default"
        self.rope = {}
        if rs:
            self.rope_type = rs.get("rope_type", rs.get("type", "default"))
            if self.rope_type not in ("default", "linear", "llama3"):
                raise HFError(f"{where}: rope_scaling type {self.rope_type!r} not supported (default, linear, llama3)")
            keys = {"linear": ["factor"],
                    "llama3": ["factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings"]}
            for k in keys.get(self.rope_type, []):
                if k not in rs:
                    raise HFError(f"{where}: rope_scaling {self.rope_type} needs {k}")
                self.rope[k] = float(rs[k])


def inv_freq(cfg, dtype):
    """RoPE inverse frequencies theta^(-2i/head_dim), rescaled as
    rope_scaling says. transformers computes them in float32; so does the
    float32 forward here (dtype float64 for the float64 checks)."""
    d = cfg.head_dim
    f = 1.0 / (cfg.theta ** (torch.arange(0, d, 2, dtype=torch.int64).to(dtype) / d))
    if cfg.rope_type == "linear":
        f = f / cfg.rope["factor"]
    elif cfg.rope_type == "llama3":
        r = cfg.rope
        old = r["original_max_position_embeddings"]
        long_wl = old / r["low_freq_factor"]   # longer wavelengths: divided by factor
        short_wl = old / r["high_freq_factor"]  # shorter: kept
        wl = 2 * math.pi / f
        scaled = torch.where(wl > long_wl, f / r["factor"], f)
        s = (old / wl - r["low_freq_factor"]) / (r["high_freq_factor"] - r["low_freq_factor"])
        mid = (wl >= short_wl) & (wl <= long_wl)
        f = torch.where(mid, (1 - s) * scaled / r["factor"] + s * scaled, scaled)
    return f


# ---------------------------------------------------------------------------
# the model


def rms_norm(x, w, eps):
    # transformers normalises in float32 and multiplies by the weight after
    # casting back; with float32 (or float64) activations that is this.
    return w * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps))


def rotate_half(x):
    h = x.shape[-1] // 2
    return torch.cat([-x[..., h:], x[..., :h]], dim=-1)


def tensor_specs(cfg):
    """name -> shape of every tensor a checkpoint of cfg holds, under Hugging
    Face's names ([out, in] for projection weights)."""
    H, K, D, E, I, V = cfg.heads, cfg.kv_heads, cfg.head_dim, cfg.hidden, cfg.inter, cfg.vocab
    s = {"model.embed_tokens.weight": [V, E]}
    for i in range(cfg.layers):
        p = f"model.layers.{i}."
        s[p + "input_layernorm.weight"] = [E]
        for n, o, inp in (("q", H * D, E), ("k", K * D, E), ("v", K * D, E), ("o", E, H * D)):
            s[p + f"self_attn.{n}_proj.weight"] = [o, inp]
            if (n != "o" and cfg.qkv_bias) or (n == "o" and cfg.o_bias):
                s[p + f"self_attn.{n}_proj.bias"] = [o]
        if cfg.qk_norm:
            s[p + "self_attn.q_norm.weight"] = [D]
            s[p + "self_attn.k_norm.weight"] = [D]
        s[p + "post_attention_layernorm.weight"] = [E]
        for n, o, inp in (("gate", I, E), ("up", I, E), ("down", E, I)):
            s[p + f"mlp.{n}_proj.weight"] = [o, inp]
            if cfg.mlp_bias:
                s[p + f"mlp.{n}_proj.bias"] = [o]
    s["model.norm.weight"] = [E]
    if not cfg.tie:
        s["lm_head.weight"] = [V, E]
    return s


class Model:
    """A decoder-only LM over a dict of Hugging Face tensors. forward takes a
    [B, T] id tensor and optionally a KV cache (a list of [k, v] per layer,
    extended in place) and returns logits. lora maps a projection prefix
    (e.g. model.layers.0.self_attn.q_proj) to (A, B, scale): the projection
    then adds scale * B(A(x))."""

    def __init__(self, cfg, weights, dtype=torch.float32):
        self.cfg, self.dtype = cfg, dtype
        self.w = {}
        for n, want in tensor_specs(cfg).items():
            if n not in weights:
                raise HFError(f"checkpoint lacks tensor {n} ({cfg.arch}, {cfg.layers} layers)")
            if list(weights[n].shape) != want:
                raise HFError(f"tensor {n}: shape {list(weights[n].shape)}, config says {want}")
            self.w[n] = weights[n].to(dtype)
        self.lm_head = self.w["model.embed_tokens.weight"] if cfg.tie else self.w["lm_head.weight"]
        self.inv_freq = inv_freq(cfg, torch.float64 if dtype == torch.float64 else torch.float32)
        self.lora = {}

    def linear(self, x, prefix):
        y = F.linear(x, self.w[prefix + ".weight"], self.w.get(prefix + ".bias"))
        if prefix in self.lora:
            a, b, scale = self.lora[prefix]
            y = y + scale * F.linear(F.linear(x, a), b)
        return y

    def forward(self, ids, cache=None, last_only=False):
        cfg = self.cfg
        B, T = ids.shape
        H, K, D = cfg.heads, cfg.kv_heads, cfg.head_dim
        p0 = 0 if not cache or not cache[0] else cache[0][0].shape[2]
        pos = torch.arange(p0, p0 + T, dtype=self.inv_freq.dtype)
        ang = pos[:, None] * self.inv_freq[None, :]
        ang = torch.cat([ang, ang], dim=-1)
        cos, sin = ang.cos().to(self.dtype), ang.sin().to(self.dtype)
        tk = p0 + T
        qpos = torch.arange(p0, p0 + T)[:, None]
        kpos = torch.arange(tk)[None, :]
        allowed = kpos <= qpos
        if cfg.window:
            allowed &= kpos > qpos - cfg.window
        mask = torch.zeros(T, tk, dtype=self.dtype).masked_fill(~allowed, float("-inf"))
        x = F.embedding(ids, self.w["model.embed_tokens.weight"])
        for i in range(cfg.layers):
            p = f"model.layers.{i}."
            h = rms_norm(x, self.w[p + "input_layernorm.weight"], cfg.eps)
            q = self.linear(h, p + "self_attn.q_proj").view(B, T, H, D)
            k = self.linear(h, p + "self_attn.k_proj").view(B, T, K, D)
            v = self.linear(h, p + "self_attn.v_proj").view(B, T, K, D)
            if cfg.qk_norm:
                q = rms_norm(q, self.w[p + "self_attn.q_norm.weight"], cfg.eps)
                k = rms_norm(k, self.w[p + "self_attn.k_norm.weight"], cfg.eps)
            q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
            q = q * cos + rotate_half(q) * sin
            k = k * cos + rotate_half(k) * sin
            if cache is not None:
                if len(cache) <= i:
                    cache.append([])
                if cache[i]:
                    k = torch.cat([cache[i][0], k], dim=2)
                    v = torch.cat([cache[i][1], v], dim=2)
                cache[i][:] = [k, v]
            if H != K:  # grouped-query attention: head j reads KV head j // (H/K)
                k = k.repeat_interleave(H // K, dim=1)
                v = v.repeat_interleave(H // K, dim=1)
            s = q @ k.transpose(-1, -2) * D ** -0.5 + mask
            a = torch.softmax(s, dim=-1) @ v
            a = a.transpose(1, 2).reshape(B, T, H * D)
            x = x + self.linear(a, p + "self_attn.o_proj")
            h = rms_norm(x, self.w[p + "post_attention_layernorm.weight"], cfg.eps)
            g = F.silu(self.linear(h, p + "mlp.gate_proj")) * self.linear(h, p + "mlp.up_proj")
            x = x + self.linear(g, p + "mlp.down_proj")
        if last_only:
            x = x[:, -1:]
        return F.linear(rms_norm(x, self.w["model.norm.weight"], cfg.eps), self.lm_head)


def load_model(model_dir, dtype=torch.float32):
    path = os.path.join(model_dir, "config.json")
    try:
        with open(path) as f:
            d = json.load(f)
    except (OSError, ValueError) as e:
        raise HFError(f"{path}: {e}") from None
    return Model(Config(d, path), load_weights(model_dir), dtype)


def logprobs(model, ids):
    """log p(ids[i+1] | ids[..i]) for i in 0..len(ids)-2, from one
    full-sequence forward."""
    t = torch.tensor([ids], dtype=torch.int64)
    with torch.no_grad():
        lp = torch.log_softmax(model.forward(t)[0], dim=-1)
    return [float(lp[i, ids[i + 1]]) for i in range(len(ids) - 1)]


def parse_ids(s, vocab):
    try:
        ids = [int(x) for x in s.split(",") if x.strip() != ""]
    except ValueError:
        raise HFError(f"--ids {s!r}: not a comma-separated list of integers") from None
    if not ids:
        raise HFError("--ids: empty")
    bad = [i for i in ids if not 0 <= i < vocab]
    if bad:
        raise HFError(f"--ids: {bad[:5]} outside the vocabulary [0, {vocab})")
    return ids


# ---------------------------------------------------------------------------
# tiny checkpoints

def tiny_config(arch):
    """config.json of a tiny model of arch, with the keys the transformers
    config class writes for the real checkpoints of that family
    (Qwen2.5-0.5B, Qwen3-0.6B, Llama-3.2-1B, Mistral-7B-v0.1), shrunk."""
    common = {"attention_dropout": 0.0, "bos_token_id": 1, "eos_token_id": 2, "hidden_act": "silu",
              "hidden_size": 64, "initializer_range": 0.02, "intermediate_size": 96}
    if arch == "qwen2":
        c = {"architectures": ["Qwen2ForCausalLM"], **common, "max_position_embeddings": 4096,
             "max_window_layers": 2, "model_type": "qwen2", "num_attention_heads": 4,
             "num_hidden_layers": 2, "num_key_value_heads": 2, "rms_norm_eps": 1e-6,
             "rope_scaling": None, "rope_theta": 1000000.0, "sliding_window": 4096,
             "tie_word_embeddings": True, "torch_dtype": "bfloat16", "transformers_version": "4.51.0",
             "use_cache": True, "use_sliding_window": False, "vocab_size": 256}
    elif arch == "qwen3":
        c = {"architectures": ["Qwen3ForCausalLM"], "attention_bias": False, **common, "head_dim": 32,
             "max_position_embeddings": 4096, "max_window_layers": 2, "model_type": "qwen3",
             "num_attention_heads": 4, "num_hidden_layers": 2, "num_key_value_heads": 2,
             "rms_norm_eps": 1e-6, "rope_scaling": None, "rope_theta": 1000000.0, "sliding_window": None,
             "tie_word_embeddings": True, "torch_dtype": "bfloat16", "transformers_version": "4.51.0",
             "use_cache": True, "use_sliding_window": False, "vocab_size": 256}
    elif arch == "llama":
        c = {"architectures": ["LlamaForCausalLM"], "attention_bias": False, **common, "head_dim": 16,
             "max_position_embeddings": 131072, "mlp_bias": False, "model_type": "llama",
             "num_attention_heads": 4, "num_hidden_layers": 2, "num_key_value_heads": 1,
             "pretraining_tp": 1, "rms_norm_eps": 1e-5,
             "rope_scaling": {"factor": 32.0, "high_freq_factor": 4.0, "low_freq_factor": 1.0,
                              "original_max_position_embeddings": 8192, "rope_type": "llama3"},
             "rope_theta": 500000.0, "tie_word_embeddings": False, "torch_dtype": "bfloat16",
             "transformers_version": "4.51.0", "use_cache": True, "vocab_size": 256}
    elif arch == "mistral":
        c = {"architectures": ["MistralForCausalLM"], **common, "head_dim": 16,
             "max_position_embeddings": 32768, "model_type": "mistral", "num_attention_heads": 4,
             "num_hidden_layers": 2, "num_key_value_heads": 2, "rms_norm_eps": 1e-5, "rope_theta": 10000.0,
             "sliding_window": 6, "tie_word_embeddings": False, "torch_dtype": "bfloat16",
             "transformers_version": "4.51.0", "use_cache": True, "vocab_size": 256}
    else:
        raise HFError(f"--arch {arch!r}: one of qwen2, qwen3, llama, mistral")
    return c


DTYPES = {"bf16": (torch.bfloat16, "bfloat16"), "f16": (torch.float16, "float16"), "f32": (torch.float32, "float32")}


def tiny_weights(cfg, seed):
    """Random weights at scales that make every part of the forward pass
    count: unit-variance residual contributions, norm weights and biases
    away from 1 and 0, logits a few nats apart."""
    g = torch.Generator().manual_seed(seed)
    w = {}
    for name, shape in tensor_specs(cfg).items():
        if name.endswith("norm.weight"):
            w[name] = 1 + 0.2 * torch.randn(shape, generator=g)
        elif name.endswith(".bias"):
            w[name] = 0.2 * torch.randn(shape, generator=g)
        elif name in ("model.embed_tokens.weight", "lm_head.weight"):
            w[name] = 0.5 * torch.randn(shape, generator=g)
        else:
            w[name] = torch.randn(shape, generator=g) / math.sqrt(shape[1])
    return w


def make_tiny(arch, out, seed, dtype, shards, overrides=None):
    if dtype not in DTYPES:
        raise HFError(f"--dtype {dtype!r}: one of {sorted(DTYPES)}")
    c = tiny_config(arch)
    c.update(overrides or {})
    c["torch_dtype"] = DTYPES[dtype][1]
    cfg = Config(c)
    w = {n: t.to(DTYPES[dtype][0]) for n, t in tiny_weights(cfg, seed).items()}
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "config.json"), "w") as f:
        # transformers writes config.json with sorted keys and indent 2.
        json.dump(c, f, indent=2, sort_keys=True)
        f.write("\n")
    names = sorted(w)
    if shards <= 1:
        write_safetensors(os.path.join(out, "model.safetensors"), w)
        return
    per = -(-len(names) // shards)
    wmap, total = {}, 0
    for s in range(shards):
        fname = f"model-{s + 1:05d}-of-{shards:05d}.safetensors"
        part = {n: w[n] for n in names[s * per:(s + 1) * per]}
        write_safetensors(os.path.join(out, fname), part)
        for n, t in part.items():
            wmap[n] = fname
            total += t.numel() * t.element_size()
    with open(os.path.join(out, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {"total_size": total}, "weight_map": wmap}, f, indent=2)
        f.write("\n")


# ---------------------------------------------------------------------------
# self-test


def naive_logprobs(cfg, w, ids):
    """A second formulation of the same model, float64, one position and one
    head at a time: RoPE as a rotation of the pairs (x[j], x[j + D/2]) by
    angle pos * freq_j with the frequencies from a scalar loop over the
    rope_scaling cases, GQA by indexing KV head j // (H/K), softmax written
    out, RMSNorm as x / sqrt(mean(x^2) + eps)."""
    W = {n: t.to(torch.float64) for n, t in w.items()}
    H, K, D = cfg.heads, cfg.kv_heads, cfg.head_dim
    freqs = []
    for j in range(D // 2):
        f = cfg.theta ** (-2.0 * j / D)
        if cfg.rope_type == "linear":
            f /= cfg.rope["factor"]
        elif cfg.rope_type == "llama3":
            r = cfg.rope
            wl = 2 * math.pi / f
            lo_wl = r["original_max_position_embeddings"] / r["low_freq_factor"]
            hi_wl = r["original_max_position_embeddings"] / r["high_freq_factor"]
            if wl < hi_wl:
                pass
            elif wl > lo_wl:
                f /= r["factor"]
            else:
                t = (r["original_max_position_embeddings"] / wl - r["low_freq_factor"]) / (
                    r["high_freq_factor"] - r["low_freq_factor"])
                f = (1 - t) * f / r["factor"] + t * f
        freqs.append(f)

    def norm(x, wt):
        return x / math.sqrt(float((x * x).mean()) + cfg.eps) * wt

    def lin(x, p):
        y = W[p + ".weight"].matmul(x)
        return y + W[p + ".bias"] if p + ".bias" in W else y

    def rope(x, pos):
        y = x.clone()
        for j, f in enumerate(freqs):
            c, s = math.cos(pos * f), math.sin(pos * f)
            a, b = float(x[j]), float(x[j + D // 2])
            y[j], y[j + D // 2] = a * c - b * s, a * s + b * c
        return y

    n = len(ids)
    xs = [W["model.embed_tokens.weight"][t].clone() for t in ids]
    for i in range(cfg.layers):
        p = f"model.layers.{i}."
        ks, vs, qs = [], [], []
        for t in range(n):
            h = norm(xs[t], W[p + "input_layernorm.weight"])
            q, k, v = lin(h, p + "self_attn.q_proj"), lin(h, p + "self_attn.k_proj"), lin(h, p + "self_attn.v_proj")
            qh, kh = [q[j * D:(j + 1) * D] for j in range(H)], [k[j * D:(j + 1) * D] for j in range(K)]
            if cfg.qk_norm:
                qh = [norm(x, W[p + "self_attn.q_norm.weight"]) for x in qh]
                kh = [norm(x, W[p + "self_attn.k_norm.weight"]) for x in kh]
            qs.append([rope(x, t) for x in qh])
            ks.append([rope(x, t) for x in kh])
            vs.append([v[j * D:(j + 1) * D] for j in range(K)])
        new = []
        for t in range(n):
            heads = []
            for j in range(H):
                kvh = j // (H // K)
                lo = 0 if not cfg.window else max(0, t - cfg.window + 1)
                sc = [float(qs[t][j].dot(ks[u][kvh])) / math.sqrt(D) for u in range(lo, t + 1)]
                m = max(sc)
                e = [math.exp(s - m) for s in sc]
                z = sum(e)
                o = torch.zeros(D, dtype=torch.float64)
                for u, eu in zip(range(lo, t + 1), e):
                    o += eu / z * vs[u][kvh]
                heads.append(o)
            x = xs[t] + lin(torch.cat(heads), p + "self_attn.o_proj")
            h = norm(x, W[p + "post_attention_layernorm.weight"])
            gt = lin(h, p + "mlp.gate_proj")
            g = gt / (1 + torch.exp(-gt)) * lin(h, p + "mlp.up_proj")
            new.append(x + lin(g, p + "mlp.down_proj"))
        xs = new
    head = W["model.embed_tokens.weight"] if cfg.tie else W["lm_head.weight"]
    out = []
    for t in range(n - 1):
        logits = head.matmul(norm(xs[t], W["model.norm.weight"]))
        m = float(logits.max())
        lse = m + math.log(float(torch.exp(logits - m).sum()))
        out.append(float(logits[ids[t + 1]]) - lse)
    return out


def selftest(_args):
    """For tiny random checkpoints of every architecture, written to disk by
    make-tiny and read back through the safetensors loader:
      1. the writer/reader round trip is bit-exact;
      2. full-sequence float32 log-probs = the step-by-step KV-cache decode's;
      3. batched prefill (two different sequences) = each sequence alone;
      4. float32 = float64 (same code);
      5. float64 = naive_logprobs, written independently (per position and
         head, RoPE as pair rotations, scalar rope_scaling);
      6. the llama3 rope_scaling leaves some frequencies, divides some and
         smooths some (so the check of 5 covers all three cases), and
         changes the output against unscaled RoPE;
      7. LoRA with B = 0 leaves the output unchanged; with B != 0 it changes it.
    """
    torch.manual_seed(0)
    fails = []

    def check(name, ok, detail):
        print(f"{'ok  ' if ok else 'FAIL'} {name}: {detail}")
        if not ok:
            fails.append(name)

    rng = torch.Generator().manual_seed(7)
    with tempfile.TemporaryDirectory() as tmp:
        for arch, shards in (("qwen2", 1), ("qwen3", 2), ("llama", 3), ("mistral", 1)):
            d = os.path.join(tmp, arch)
            make_tiny(arch, d, seed=11, dtype="bf16", shards=shards)
            with open(os.path.join(d, "config.json")) as f:
                cfg = Config(json.load(f))
            w = load_weights(d)
            again = {n: t.to(torch.bfloat16) for n, t in tiny_weights(cfg, 11).items()}
            same = set(w) == set(again) and all(torch.equal(w[n], again[n]) for n in w)
            check(f"{arch} safetensors round trip ({shards} file(s))", same, f"{len(w)} tensors")
            m32 = Model(cfg, w, torch.float32)
            m64 = Model(cfg, w, torch.float64)
            ids = torch.randint(0, cfg.vocab, (12,), generator=rng).tolist()
            ids2 = torch.randint(0, cfg.vocab, (12,), generator=rng).tolist()
            full = torch.tensor(logprobs(m32, ids))
            spread = float(full.max() - full.min())
            check(f"{arch} log-probs not flat", spread > 1.0, f"range {spread:.2f} nats")
            with torch.no_grad():
                cache, steps = [], []
                for t in range(len(ids) - 1):
                    lg = m32.forward(torch.tensor([[ids[t]]]), cache)[0, -1]
                    steps.append(float(torch.log_softmax(lg, -1)[ids[t + 1]]))
                err = float((full - torch.tensor(steps)).abs().max())
                check(f"{arch} full forward = KV-cache steps (f32)", err < 2e-5, f"max |diff| {err:.2e}")
                both = torch.log_softmax(m32.forward(torch.tensor([ids, ids2])), -1)
                one = torch.log_softmax(m32.forward(torch.tensor([ids2])), -1)
                err = float((both[1] - one[0]).abs().max())
                check(f"{arch} batched prefill = alone (f32)", err < 2e-5, f"max |diff| {err:.2e}")
            l64 = torch.tensor(logprobs(m64, ids), dtype=torch.float64)
            err = float((full.double() - l64).abs().max())
            check(f"{arch} float32 = float64", err < 1e-4, f"max |diff| {err:.2e}")
            naive = torch.tensor(naive_logprobs(cfg, w, ids), dtype=torch.float64)
            err = float((l64 - naive).abs().max())
            check(f"{arch} float64 = naive float64", err < 1e-9, f"max |diff| {err:.2e}")
            if cfg.rope_type == "llama3":
                base = 1.0 / (cfg.theta ** (torch.arange(0, cfg.head_dim, 2, dtype=torch.float64) / cfg.head_dim))
                ratio = (inv_freq(cfg, torch.float64) / base).tolist()
                kinds = (sum(abs(r - 1) < 1e-12 for r in ratio), sum(abs(r - 1 / cfg.rope["factor"]) < 1e-12 for r in ratio))
                mixed = kinds[0] > 0 and kinds[1] > 0 and kinds[0] + kinds[1] < len(ratio)
                check(f"{arch} llama3 rope_scaling has kept, divided and smoothed frequencies", mixed,
                      f"kept {kinds[0]}, divided {kinds[1]}, smoothed {len(ratio) - sum(kinds)}")
                plain = Model(cfg, w, torch.float64)
                plain.inv_freq = base
                err = float((torch.tensor(logprobs(plain, ids), dtype=torch.float64) - l64).abs().max())
                check(f"{arch} llama3 scaling changes the output", err > 1e-3, f"max |diff| {err:.2e}")
            p = "model.layers.0.self_attn.q_proj"
            a = torch.randn(4, cfg.hidden, generator=rng, dtype=torch.float64)
            m64.lora = {p: (a, torch.zeros(cfg.heads * cfg.head_dim, 4, dtype=torch.float64), 2.0)}
            err = float((torch.tensor(logprobs(m64, ids), dtype=torch.float64) - l64).abs().max())
            check(f"{arch} LoRA with B = 0 is the identity", err == 0.0, f"max |diff| {err:.2e}")
            m64.lora = {p: (a, torch.randn(cfg.heads * cfg.head_dim, 4, generator=rng, dtype=torch.float64), 2.0)}
            err = float((torch.tensor(logprobs(m64, ids), dtype=torch.float64) - l64).abs().max())
            check(f"{arch} LoRA with B != 0 changes the output", err > 1e-3, f"max |diff| {err:.2e}")
    if fails:
        raise HFError(f"selftest: {len(fails)} check(s) failed: {', '.join(fails)}")
    print("selftest: all checks passed")


# ---------------------------------------------------------------------------
# speed anchors

SHAPES = {
    # Qwen2.5-0.5B: hidden 896, 24 layers, 14 heads of 64, 2 KV heads, MLP
    # 4864, vocab 151936, tied embeddings, q/k/v biases.
    "qwen2-0.5b": {"architectures": ["Qwen2ForCausalLM"], "hidden_size": 896, "intermediate_size": 4864,
                   "num_hidden_layers": 24, "num_attention_heads": 14, "num_key_value_heads": 2,
                   "max_position_embeddings": 32768, "rms_norm_eps": 1e-6, "rope_theta": 1000000.0,
                   "tie_word_embeddings": True, "vocab_size": 151936},
}


def bench_model(shape, seed=0):
    if shape not in SHAPES:
        raise HFError(f"--shape {shape!r}: one of {sorted(SHAPES)}")
    cfg = Config(SHAPES[shape], f"shape {shape}")
    g = torch.Generator().manual_seed(seed)
    w = {}
    for name, shape in tensor_specs(cfg).items():
        if name.endswith("norm.weight"):
            w[name] = torch.ones(shape)
        else:
            w[name] = torch.empty(shape).normal_(0, 0.02, generator=g)
    return Model(cfg, w, torch.float32)


def set_one_thread():
    here = os.path.dirname(os.path.abspath(__file__))
    sys.path.insert(0, here)
    sys.dont_write_bytecode = True  # no __pycache__ in the source tree
    import common  # noqa: E402  (the shared helpers of benchmarks/compare)
    common.set_threads(1)
    desc = common.describe()
    if "not OpenBLAS" in desc:
        print("hf.py: warning: torch is not using OpenBLAS (install libopenblas0-pthread): "
              "these figures are no anchor", file=sys.stderr)
    return desc


PROMPT, NEW = 32, 32
DECODE_TIMED = (f"greedy generation of {NEW} new tokens per sequence: one prefill forward over the "
                f"{PROMPT}-token prompts (logits of the last position only) giving the first new token, then "
                f"{NEW - 1} one-token forwards with a KV cache (torch.cat per step, as transformers' "
                f"DynamicCache); tokens/s = batch*{NEW} / wall time of all of it; median of the runs")


def bench_decode(model, batch, runs, seed=0):
    g = torch.Generator().manual_seed(seed + batch)
    prompts = torch.randint(0, model.cfg.vocab, (batch, PROMPT), generator=g)

    def generate(ids, new):
        cache = []
        tok = model.forward(ids, cache, last_only=True)[:, -1].argmax(-1, keepdim=True)
        for _ in range(new - 1):
            tok = model.forward(tok, cache)[:, -1].argmax(-1, keepdim=True)
        return tok

    with torch.no_grad():
        generate(prompts[:, :4], 2)  # warm-up: allocator, BLAS buffers
        times, cpu = [], []
        for _ in range(runs):
            t0, c0 = time.perf_counter(), time.process_time()
            generate(prompts, NEW)
            times.append(time.perf_counter() - t0)
            cpu.append(time.process_time() - c0)
    return batch * NEW / statistics.median(times), times, cpu


LORA_R, LORA_ALPHA, LORA_B, LORA_T = 16, 32, 2, 64
LORA_TIMED = (f"one training step on {LORA_B} random sequences of {LORA_T + 1} ids: forward over the first "
              f"{LORA_T} ({LORA_B} x {LORA_T} tokens), mean cross-entropy of their {LORA_T} next-token "
              f"predictions each (logits against ids[:, 1:]), backward, AdamW (lr 1e-4, weight decay 0.01) "
              f"over the rank-{LORA_R} LoRA A/B matrices only (alpha {LORA_ALPHA}, dropout 0, "
              f"on q,k,v,o,gate,up,down of every layer; base weights requires_grad=False); median ms over the "
              f"steps after one warm-up step")


def add_lora(model, seed=0):
    g = torch.Generator().manual_seed(seed + 1000)
    params = []
    for i in range(model.cfg.layers):
        for n in ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj",
                  "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj"):
            p = f"model.layers.{i}.{n}"
            out, inp = model.w[p + ".weight"].shape
            # PEFT's initialisation: A uniform in +-1/sqrt(in), B zero.
            a = torch.empty(LORA_R, inp).uniform_(-1 / math.sqrt(inp), 1 / math.sqrt(inp), generator=g)
            b = torch.zeros(out, LORA_R)
            a.requires_grad_(True)
            b.requires_grad_(True)
            model.lora[p] = (a, b, LORA_ALPHA / LORA_R)
            params += [a, b]
    for t in model.w.values():
        t.requires_grad_(False)
    return params


def bench_lora(model, steps, seed=0):
    params = add_lora(model, seed)
    opt = torch.optim.AdamW(params, lr=1e-4, weight_decay=0.01)
    g = torch.Generator().manual_seed(seed + 2)
    ids = torch.randint(0, model.cfg.vocab, (LORA_B, LORA_T + 1), generator=g)
    V = model.cfg.vocab

    def step():
        opt.zero_grad(set_to_none=True)
        logits = model.forward(ids[:, :-1])
        F.cross_entropy(logits.reshape(-1, V), ids[:, 1:].reshape(-1)).backward()
        opt.step()

    step()
    times, cpu = [], []
    for _ in range(steps):
        t0, c0 = time.perf_counter(), time.process_time()
        step()
        times.append(time.perf_counter() - t0)
        cpu.append(time.process_time() - c0)
    model.lora = {}
    return 1e3 * statistics.median(times), times, cpu


def result(name, metric, value, timed, runs, cpu, extra=None):
    """One JSON line: value is the median over runs (wall clock); runs_s and
    cpu_s are each run's wall and process CPU seconds (CPU time tells how
    much a loaded machine stretched the wall clock)."""
    r = {"name": name, "metric": metric, "value": round(value, 4), "impl": "pytorch",
         "torch": torch.__version__, "threads": torch.get_num_threads(), "timed": timed,
         "runs_s": [round(t, 4) for t in runs], "cpu_s": [round(t, 4) for t in cpu],
         "load": os.getloadavg()[0]}
    r.update(extra or {})
    print(json.dumps(r), flush=True)


# ---------------------------------------------------------------------------
# side by side with the Go benchmarks (run.sh)

GO_LINE = re.compile(r"^BenchmarkHF(Decode|LoRAStep)/([\w.-]+?)(?:/batch=(\d+))?(?:-\d+)?\s+(\d+\s+.*)$")


def table_key(kind, shape, batch):
    """The key a row gets in table.py's table (no '/' allowed there)."""
    return f"{shape},b={batch}" if kind == "Decode" else f"{shape},lora"


def compare(args):
    """Go and PyTorch alternately, args.repeat times, as GO/PT rows for
    table.py. The Go benchmark
    names (BenchmarkHFDecode/<shape>/batch=<n>, BenchmarkHFLoRAStep/<shape>)
    are rewritten into table.py's Benchmark<Topic>/troupe/<key>/t<threads>."""
    repeat = args.repeat
    print(set_one_thread(), flush=True)
    print(f"# {DECODE_TIMED}", flush=True)
    print(f"# LoRA: {LORA_TIMED}", flush=True)
    env = {k: v for k, v in os.environ.items() if k != "OPENBLAS_CORETYPE"}
    env["GOMAXPROCS"] = "1"
    model = bench_model("qwen2-0.5b")
    for _ in range(repeat):
        out = subprocess.run([args.go_test, "-test.run", "^$", "-test.bench", "^BenchmarkHF(Decode|LoRAStep)$",
                              "-test.benchtime", "1x"], cwd=args.pkg_dir, env=env, capture_output=True,
                             text=True)
        if out.returncode != 0:
            tail = (out.stdout + out.stderr).strip().splitlines()[-1:]
            print(f"# Go HF benchmarks failed (exit {out.returncode}): {tail}", flush=True)
        elif not any(GO_LINE.match(l.strip()) for l in out.stdout.splitlines()):
            print("# the Go benchmark binary has no BenchmarkHFDecode/BenchmarkHFLoRAStep results", flush=True)
        for line in out.stdout.splitlines():
            m = GO_LINE.match(line.strip())
            if m:
                kind, shape, batch, rest = m.groups()
                print(f"GO\tBenchmarkHF/troupe/{table_key(kind, shape, batch)}/t1 {rest}", flush=True)
        for batch in (1, 8):
            v, _, cpu = bench_decode(model, batch, runs=1)
            key = table_key("Decode", "qwen2-0.5b", batch)
            print(f"PT\t{key}\t1\t{v:.4g}\ttokens/s", flush=True)
            print(f"PT\t{key}\t1\t{batch * NEW / cpu[0]:.4g}\ttokens/cpu-s", flush=True)
        v, _, _ = bench_lora(model, steps=2)
        print(f"PT\t{table_key('LoRAStep', 'qwen2-0.5b', None)}\t1\t{v:.4g}\tms/step", flush=True)


# ---------------------------------------------------------------------------


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("logprobs", help="log p(ids[i+1] | ids[..i]) of a checkpoint, as one JSON object")
    p.add_argument("--model-dir", required=True)
    p.add_argument("--ids", required=True, help="comma-separated token ids")
    p = sub.add_parser("make-tiny", help="write a tiny random checkpoint in Hugging Face layout")
    p.add_argument("--arch", required=True, choices=["qwen2", "qwen3", "llama", "mistral"])
    p.add_argument("--out", required=True)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--dtype", default="bf16", choices=sorted(DTYPES))
    p.add_argument("--shards", type=int, default=1, help="split into this many files with an index")
    sub.add_parser("selftest", help="check the reference against independent formulations")
    p = sub.add_parser("bench-decode", help="greedy decode tokens/s at a real model's shapes")
    p.add_argument("--shape", default="qwen2-0.5b")
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--runs", type=int, default=3)
    p = sub.add_parser("bench-lora", help="LoRA training step ms at a real model's shapes")
    p.add_argument("--shape", default="qwen2-0.5b")
    p.add_argument("--steps", type=int, default=3)
    p = sub.add_parser("compare", help="Go HF benchmarks and these, as rows for table.py")
    p.add_argument("--go-test", required=True)
    p.add_argument("--pkg-dir", required=True)
    p.add_argument("--repeat", type=int, default=1)
    # run.sh's topic arguments; these benchmarks are one thread, Go -benchtime 1x.
    p.add_argument("--threads", nargs="*", help=argparse.SUPPRESS)
    p.add_argument("--benchtime", help=argparse.SUPPRESS)
    topic = argv and argv[0].startswith("--") and argv[0] != "--help"
    if topic:
        argv = ["compare"] + argv  # run as a run.sh topic (TOPICS=hf)
    args = ap.parse_args(argv)
    if topic:
        # One round is minutes: HF_REPEAT (default 1), not run.sh's REPEAT.
        args.repeat = int(os.environ.get("HF_REPEAT", "1"))

    if args.cmd == "logprobs":
        model = load_model(args.model_dir)
        ids = parse_ids(args.ids, model.cfg.vocab)
        lp = logprobs(model, ids)
        bad = [i for i, v in enumerate(lp) if not math.isfinite(v)]
        if bad:  # JSON has no NaN or infinity
            raise HFError(f"{args.model_dir}: log-probs at positions {bad[:5]} are not finite")
        print(json.dumps({"logprobs": lp}))
    elif args.cmd == "make-tiny":
        make_tiny(args.arch, args.out, args.seed, args.dtype, args.shards)
    elif args.cmd == "selftest":
        selftest(args)
    elif args.cmd == "bench-decode":
        desc = set_one_thread()
        if args.batch < 1 or args.runs < 1:
            raise HFError("--batch and --runs must be at least 1")
        model = bench_model(args.shape)
        v, runs, cpu = bench_decode(model, args.batch, args.runs)
        result(f"BenchmarkHFDecode/{args.shape}/batch={args.batch}", "tokens/s", v, DECODE_TIMED, runs, cpu,
               {"blas": desc.lstrip("# ")})
    elif args.cmd == "bench-lora":
        desc = set_one_thread()
        if args.steps < 1:
            raise HFError("--steps must be at least 1")
        model = bench_model(args.shape)
        v, runs, cpu = bench_lora(model, args.steps)
        result(f"BenchmarkHFLoRAStep/{args.shape}", "ms/step", v, LORA_TIMED, runs, cpu, {"blas": desc.lstrip("# ")})
    elif args.cmd == "compare":
        compare(args)


if __name__ == "__main__":
    try:
        main(sys.argv[1:])
    except HFError as e:
        print(f"hf.py: {e}", file=sys.stderr)
        sys.exit(1)
