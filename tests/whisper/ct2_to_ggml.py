#!/usr/bin/env python3
"""Converts a Whisper model in CTranslate2 format to whisper.cpp's ggml format, offline.

    ct2_to_ggml.py MODEL_DIR ASSETS_DIR OUT.bin|- [--q8_0 OUT-q8_0.bin]

MODEL_DIR holds CTranslate2's `model.bin` (and `config.json`); ASSETS_DIR is the `whisper/assets`
folder of OpenAI's `openai-whisper` package (`mel_filters.npz`, `gpt2.tiktoken`,
`multilingual.tiktoken`). Needs numpy only.

The formats, as documented by their projects:

- CTranslate2 `model.bin` (binary version 6): u32 version, a string (u16 length with the NUL,
  bytes, NUL) naming the spec, u32 revision, u32 variable count, then per variable its name,
  u8 rank, u32 dims, u8 dtype, u32 byte count and the bytes; then u32 alias count and
  (alias, target) name pairs. Whisper's spec names the layers `encoder/layer_N/…` and
  `decoder/layer_N/…`; self-attention's `linear_0` is the fused query|key|value projection
  (Whisper's key has no bias: its third is zero), the decoder's cross-attention `linear_0` is the
  query and `linear_1` the fused key|value.
- whisper.cpp's ggml file: i32 magic `ggml`, eleven i32 hyper-parameters (vocabulary, audio
  context, audio width, heads, layers, text context, text width, heads, layers, mel bins, file
  type), the mel filter bank (i32 rows, i32 columns, f32 values), the byte-level vocabulary
  (i32 count, then i32 length + bytes per token, in rank order), then the tensors under OpenAI's
  names: i32 rank, i32 name length, i32 type, the dims innermost first, the name, the data.
  1-D tensors, the conv biases (as [n, 1]) and the position embeddings are f32; the rest f16,
  or `q8_0` (blocks of 32: an f16 scale and 32 int8) for the 2-D weights of a quantised file,
  whose file type is `7 + 2 * 1000` (ggml's quantisation version 2).
"""

import argparse
import base64
import os
import struct
import sys

import numpy as np

GGML_MAGIC = 0x67676D6C
F32, F16, Q8_0 = 0, 1, 8
FTYPE_F16, FTYPE_Q8_0 = 1, 7
QNT_VERSION_FACTOR, QNT_VERSION = 1000, 2
CT2_DTYPES = {0: np.float32, 1: np.int8, 2: np.int16, 3: np.int32, 4: np.float16}


def read_ct2(path):
    """The variables of a CTranslate2 model.bin, by name (aliases resolved)."""
    with open(path, "rb") as f:
        data = f.read()
    pos = 0

    def take(fmt):
        nonlocal pos
        vals = struct.unpack_from("<" + fmt, data, pos)
        pos += struct.calcsize("<" + fmt)
        return vals

    def string():
        nonlocal pos
        (n,) = take("H")
        s = data[pos : pos + n - 1].decode("utf-8")
        pos += n
        return s

    (version,) = take("I")
    if version < 5:
        sys.exit(f"unsupported CTranslate2 binary version {version}")
    spec = string()
    if spec != "WhisperSpec":
        sys.exit(f"not a Whisper model: {spec}")
    take("I")  # revision
    (count,) = take("I")
    out = {}
    for _ in range(count):
        name = string()
        (rank,) = take("B")
        shape = take("I" * rank) if rank else ()
        (dtype,) = take("B")
        (nbytes,) = take("I")
        if dtype not in CT2_DTYPES:
            sys.exit(f"{name}: unsupported dtype {dtype}")
        arr = np.frombuffer(data, CT2_DTYPES[dtype], nbytes // np.dtype(CT2_DTYPES[dtype]).itemsize, pos)
        out[name] = arr.reshape(shape)
        pos += nbytes
    (aliases,) = take("I")
    for _ in range(aliases):
        alias, target = string(), string()
        out[alias] = out[target]
    return out


def split_qkv(prefix, w, b):
    """A fused query|key|value projection as three (the key has no bias)."""
    q, k, v = np.split(w, 3)
    qb, _kb, vb = np.split(b, 3)
    return {
        f"{prefix}.query.weight": q,
        f"{prefix}.query.bias": qb,
        f"{prefix}.key.weight": k,
        f"{prefix}.value.weight": v,
        f"{prefix}.value.bias": vb,
    }


def linear(dst, src, v):
    return {f"{dst}.weight": v[f"{src}/weight"], f"{dst}.bias": v[f"{src}/bias"]}


def norm(dst, src, v):
    return {f"{dst}.weight": v[f"{src}/gamma"], f"{dst}.bias": v[f"{src}/beta"]}


def layers(v, side):
    n = 0
    while f"{side}/layer_{n}/ffn/linear_0/weight" in v:
        n += 1
    return n


def openai_tensors(v):
    """OpenAI's Whisper tensors, in its order, from the CTranslate2 variables."""
    t = {
        "encoder.positional_embedding": v["encoder/position_encodings/encodings"],
        "encoder.conv1.weight": v["encoder/conv1/weight"],
        "encoder.conv1.bias": v["encoder/conv1/bias"],
        "encoder.conv2.weight": v["encoder/conv2/weight"],
        "encoder.conv2.bias": v["encoder/conv2/bias"],
    }
    for i in range(layers(v, "encoder")):
        s, d = f"encoder/layer_{i}", f"encoder.blocks.{i}"
        t.update(split_qkv(f"{d}.attn", v[f"{s}/self_attention/linear_0/weight"], v[f"{s}/self_attention/linear_0/bias"]))
        t.update(linear(f"{d}.attn.out", f"{s}/self_attention/linear_1", v))
        t.update(norm(f"{d}.attn_ln", f"{s}/self_attention/layer_norm", v))
        t.update(linear(f"{d}.mlp.0", f"{s}/ffn/linear_0", v))
        t.update(linear(f"{d}.mlp.2", f"{s}/ffn/linear_1", v))
        t.update(norm(f"{d}.mlp_ln", f"{s}/ffn/layer_norm", v))
    t.update(norm("encoder.ln_post", "encoder/layer_norm", v))
    t["decoder.positional_embedding"] = v["decoder/position_encodings/encodings"]
    t["decoder.token_embedding.weight"] = v["decoder/embeddings/weight"]
    for i in range(layers(v, "decoder")):
        s, d = f"decoder/layer_{i}", f"decoder.blocks.{i}"
        t.update(split_qkv(f"{d}.attn", v[f"{s}/self_attention/linear_0/weight"], v[f"{s}/self_attention/linear_0/bias"]))
        t.update(linear(f"{d}.attn.out", f"{s}/self_attention/linear_1", v))
        t.update(norm(f"{d}.attn_ln", f"{s}/self_attention/layer_norm", v))
        t.update(linear(f"{d}.cross_attn.query", f"{s}/attention/linear_0", v))
        k, vv = np.split(v[f"{s}/attention/linear_1/weight"], 2)
        _kb, vb = np.split(v[f"{s}/attention/linear_1/bias"], 2)
        t[f"{d}.cross_attn.key.weight"] = k
        t[f"{d}.cross_attn.value.weight"] = vv
        t[f"{d}.cross_attn.value.bias"] = vb
        t.update(linear(f"{d}.cross_attn.out", f"{s}/attention/linear_2", v))
        t.update(norm(f"{d}.cross_attn_ln", f"{s}/attention/layer_norm", v))
        t.update(linear(f"{d}.mlp.0", f"{s}/ffn/linear_0", v))
        t.update(linear(f"{d}.mlp.2", f"{s}/ffn/linear_1", v))
        t.update(norm(f"{d}.mlp_ln", f"{s}/ffn/layer_norm", v))
    t.update(norm("decoder.ln", "decoder/layer_norm", v))
    return t


F32_NAMES = {
    "encoder.conv1.bias",
    "encoder.conv2.bias",
    "encoder.positional_embedding",
    "decoder.positional_embedding",
}


def q8_0(a):
    """ggml's q8_0 blocks of a 2-D array (rows of a multiple of 32)."""
    rows, cols = a.shape
    blocks = a.astype(np.float32).reshape(rows, cols // 32, 32)
    amax = np.abs(blocks).max(axis=2, keepdims=True)
    d = amax / 127.0
    inv = np.divide(1.0, d, out=np.zeros_like(d), where=d != 0)
    qs = np.rint(blocks * inv).astype(np.int8)
    out = np.empty((rows, cols // 32), dtype=[("d", "<f2"), ("qs", "i1", (32,))])
    out["d"] = d[..., 0].astype(np.float16)
    out["qs"] = qs
    return out.tobytes()


def write_ggml(path, v, tensors, assets, quantise):
    conv1 = v["encoder/conv1/weight"]
    n_mels = conv1.shape[1]
    n_vocab = v["decoder/embeddings/weight"].shape[0]
    hparams = [
        n_vocab,
        v["encoder/position_encodings/encodings"].shape[0],
        conv1.shape[0],
        int(v["encoder/num_heads"]),
        layers(v, "encoder"),
        v["decoder/position_encodings/encodings"].shape[0],
        v["decoder/embeddings/weight"].shape[1],
        int(v["decoder/num_heads"]),
        layers(v, "decoder"),
        n_mels,
        FTYPE_Q8_0 + QNT_VERSION * QNT_VERSION_FACTOR if quantise else FTYPE_F16,
    ]
    filters = np.load(os.path.join(assets, "mel_filters.npz"))[f"mel_{n_mels}"].astype(np.float32)
    multilingual = n_vocab >= 51865
    vocab_file = os.path.join(assets, "multilingual.tiktoken" if multilingual else "gpt2.tiktoken")
    with open(vocab_file, "rb") as f:
        ranked = sorted(
            ((int(rank), base64.b64decode(tok)) for tok, rank in (line.split() for line in f if line.strip())),
        )
    tmp = path + ".part"
    with open(tmp, "wb") as out:
        out.write(struct.pack("<i", GGML_MAGIC))
        out.write(struct.pack("<11i", *hparams))
        out.write(struct.pack("<2i", *filters.shape))
        out.write(filters.tobytes())
        out.write(struct.pack("<i", len(ranked)))
        for _, tok in ranked:
            out.write(struct.pack("<i", len(tok)))
            out.write(tok)
        for name, a in tensors.items():
            a = np.asarray(a)
            if name in ("encoder.conv1.bias", "encoder.conv2.bias"):
                a = a.reshape(a.shape[0], 1)
            if a.ndim < 2 or name in F32_NAMES:
                kind, body = F32, a.astype(np.float32).tobytes()
            elif quantise and a.ndim == 2 and a.shape[1] % 32 == 0:
                kind, body = Q8_0, q8_0(a)
            else:
                kind, body = F16, a.astype(np.float16).tobytes()
            raw = name.encode("utf-8")
            out.write(struct.pack("<3i", a.ndim, len(raw), kind))
            out.write(struct.pack(f"<{a.ndim}i", *reversed(a.shape)))
            out.write(raw)
            out.write(body)
    os.replace(tmp, path)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("model_dir")
    p.add_argument("assets_dir")
    p.add_argument("out", help="the f16 file to write (`-`: none)")
    p.add_argument("--q8_0", metavar="OUT", help="also write a q8_0-quantised file")
    a = p.parse_args()
    v = read_ct2(os.path.join(a.model_dir, "model.bin"))
    tensors = openai_tensors(v)
    if a.out != "-":
        write_ggml(a.out, v, tensors, a.assets_dir, quantise=False)
    if a.q8_0:
        write_ggml(a.q8_0, v, tensors, a.assets_dir, quantise=True)


if __name__ == "__main__":
    main()
