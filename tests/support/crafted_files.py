"""Builders of the binary formats kiln reads, for crafted test inputs (the fuzzers' seed corpora,
tests/fuzz/make_seeds.py, and the crafted-input corpus, tests/hardening/corpus/make_corpus.py).
Standard library only. Every builder takes its parts explicitly, so a test can lie in any of them.
"""
import json
import struct


def safetensors(tensors, metadata=None, header=None, header_len=None):
    """tensors: [(name, dtype, shape, data bytes)]; header / header_len override what is written."""
    entries, blobs, offset = {}, [], 0
    for name, dtype, shape, data in tensors:
        entries[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    if metadata:
        entries["__metadata__"] = metadata
    text = (header if header is not None else json.dumps(entries)).encode()
    return struct.pack("<Q", len(text) if header_len is None else header_len) + text + b"".join(blobs)


GGUF_TYPES = {"u8": 0, "i8": 1, "u16": 2, "i16": 3, "u32": 4, "i32": 5, "f32": 6, "bool": 7, "str": 8, "arr": 9,
              "u64": 10, "i64": 11, "f64": 12}
_FORMATS = {"u8": "B", "i8": "b", "u16": "H", "i16": "h", "u32": "I", "i32": "i", "f32": "f", "bool": "?",
            "u64": "Q", "i64": "q", "f64": "d"}


def gguf_string(s):
    b = s.encode() if isinstance(s, str) else s
    return struct.pack("<Q", len(b)) + b


def gguf_value(kind, v):
    if kind == "str":
        return gguf_string(v)
    if kind == "arr":
        inner, items = v
        return struct.pack("<IQ", GGUF_TYPES[inner], len(items)) + b"".join(gguf_value(inner, x) for x in items)
    return struct.pack("<" + _FORMATS[kind], v)


def gguf(kvs, tensors, version=3, magic=b"GGUF"):
    """kvs: [(key, kind, value)]; tensors: [(name, ggml type id, ne list, data bytes)]."""
    out = magic + struct.pack("<IQQ", version, len(tensors), len(kvs))
    for key, kind, v in kvs:
        out += gguf_string(key) + struct.pack("<I", GGUF_TYPES[kind]) + gguf_value(kind, v)
    data, offsets = b"", []
    for _, _, _, blob in tensors:
        data += b"\0" * (-len(data) % 32)
        offsets.append(len(data))
        data += blob
    for (name, ggml_type, ne, _), offset in zip(tensors, offsets):
        out += gguf_string(name) + struct.pack("<I", len(ne)) + b"".join(struct.pack("<Q", n) for n in ne)
        out += struct.pack("<IQ", ggml_type, offset)
    out += b"\0" * (-len(out) % 32)
    return out + data


def f32_values(n, scale=0.01):
    return struct.pack("<%df" % n, *[scale * ((i % 7) - 3) for i in range(n)])


def q8_0_blocks(n):
    """n values (a multiple of 32) of GGML Q8_0: per block an fp16 scale and 32 int8."""
    return b"".join(struct.pack("<e", 0.01) + bytes(i % 11 for i in range(32)) for _ in range(n // 32))
