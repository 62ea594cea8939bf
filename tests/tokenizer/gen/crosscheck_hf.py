#!/usr/bin/env python3
"""Dev-time cross-check of kiln's tokenizers against the reference libraries on full-size
vocabularies and thousands of seeded random strings (CI runs the committed, smaller fixtures).

For the byte-level GGUF vocabularies (gpt-2, deepseek-llm) it writes the equivalent tokenizer.json
(same vocabulary, merges and pre-tokenizer as the published files) and asks HF `tokenizers` for
the ids; for llama-spm it builds a SentencePiece model proto from the GGUF pieces and scores and
asks `sentencepiece`. The expectations are written as NAME.inp / NAME.out vector files and checked
with `kiln-tokenize --vectors`, loading both the GGUF and (byte-level) the tokenizer.json.

    /root/hfenv/bin/python tests/tokenizer/gen/crosscheck_hf.py build-tok/bin/kiln-tokenize [count]
"""
import json
import os
import subprocess
import sys
import tempfile

import gguf
from tokenizers import Tokenizer

sys.path.insert(0, os.path.dirname(__file__))
import make_fixtures  # noqa: E402  (pipelines and regexes of each family)
import test_strings  # noqa: E402

ROOT = make_fixtures.ROOT
VECTORS = os.path.join(ROOT, "tests", "tokenizer", "vectors")


def gguf_fields(name):
    reader = gguf.GGUFReader(os.path.join(VECTORS, f"ggml-vocab-{name}.gguf"))
    return {key: field.contents() for key, field in reader.fields.items() if key.startswith("tokenizer.")}


def byte_level_json(name, pre_tokenizer):
    fields = gguf_fields(name)
    tokens, types = fields["tokenizer.ggml.tokens"], fields["tokenizer.ggml.token_type"]
    vocab = {t: i for i, t in enumerate(tokens)}
    added = [{"id": i, "content": t, "single_word": False, "lstrip": False, "rstrip": False,
              "normalized": ty != 3, "special": ty == 3} for i, (t, ty) in enumerate(zip(tokens, types)) if ty in (3, 4)]
    return {"version": "1.0", "truncation": None, "padding": None, "added_tokens": added, "normalizer": None,
            "pre_tokenizer": pre_tokenizer, "post_processor": None,
            "decoder": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True},
            "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
                      "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False, "ignore_merges": False,
                      "vocab": vocab, "merges": fields["tokenizer.ggml.merges"]}}


def split_json(regex):
    return {"type": "Split", "pattern": {"Regex": regex}, "behavior": "Isolated", "invert": False}


BYTE_LEVEL_NO_REGEX = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": False}
PIPELINES = {
    "gpt-2": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True},
    "deepseek-llm": {"type": "Sequence", "pretokenizers": [split_json(r) for r in make_fixtures.DEEPSEEK_SPLITS]
                     + [BYTE_LEVEL_NO_REGEX]},
}


def _varint(value):
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        out.append(byte | (0x80 if value else 0))
        if not value:
            return bytes(out)


def _field(number, wire_type, payload):
    key = _varint((number << 3) | wire_type)
    if wire_type == 2:
        return key + _varint(len(payload)) + payload
    return key + payload


def sentencepiece_processor(name):
    """A SentencePiece BPE model with the GGUF's pieces, scores and types. The ModelProto is
    encoded by hand (field numbers from sentencepiece_model.proto) to avoid needing protobuf."""
    import struct

    import sentencepiece as spm
    fields = gguf_fields(name)
    proto = b""
    for text, score, kind in zip(fields["tokenizer.ggml.tokens"], fields["tokenizer.ggml.scores"],
                                 fields["tokenizer.ggml.token_type"]):
        piece = (_field(1, 2, text.encode("utf-8")) + _field(2, 5, struct.pack("<f", score)) +
                 _field(3, 0, _varint(int(kind))))
        proto += _field(1, 2, piece)  # ModelProto.pieces
    trainer = (_field(3, 0, _varint(2)) +      # model_type = BPE
               _field(35, 0, _varint(1)) +     # byte_fallback
               _field(40, 0, _varint(0)) + _field(41, 0, _varint(1)) + _field(42, 0, _varint(2)) +
               _field(43, 0, _varint((1 << 64) - 1)))  # unk 0, bos 1, eos 2, pad -1
    normalizer = (_field(1, 2, b"identity") + _field(3, 0, _varint(1)) +  # add_dummy_prefix
                  _field(4, 0, _varint(0)) + _field(5, 0, _varint(1)))    # no whitespace folding, escape
    proto += _field(2, 2, trainer) + _field(3, 2, normalizer)
    return spm.SentencePieceProcessor(model_proto=proto)


def write_vectors(path, strings, ids):
    with open(path + ".inp", "w", encoding="utf-8", newline="") as f:
        for s in strings:
            f.write(s + "\n__ggml_vocab_test__\n")
    with open(path + ".out", "w", encoding="utf-8", newline="") as f:
        for row in ids:
            f.write("".join(f" {i}" for i in row) + "\n")


def run(binary, *args):
    result = subprocess.run([binary, *args], capture_output=True, text=True)
    print("   ", " ".join(result.stdout.strip().splitlines()[:4]), result.stderr.strip())
    return result.returncode


def main():
    binary = sys.argv[1]
    count = int(sys.argv[2]) if len(sys.argv) > 2 else 3000
    strings = test_strings.EDGE_CASES + test_strings.random_strings(count, seed=424242)
    # The separator line must not occur inside a string.
    strings = [s for s in strings if "__ggml_vocab_test__" not in s]
    failures = 0
    with tempfile.TemporaryDirectory() as tmp:
        for name, pre in PIPELINES.items():
            path = os.path.join(tmp, f"{name}.json")
            with open(path, "w", encoding="utf-8") as f:
                json.dump(byte_level_json(name, pre), f, ensure_ascii=False)
            hf = Tokenizer.from_file(path)
            ids = [hf.encode(s, add_special_tokens=False).ids for s in strings]
            vectors = os.path.join(tmp, f"hf-{name}")
            write_vectors(vectors, strings, ids)
            print(f"{name}: HF tokenizers ids for {len(strings)} strings")
            failures += run(binary, "--gguf", os.path.join(VECTORS, f"ggml-vocab-{name}.gguf"), "--vectors", vectors) != 0
            failures += run(binary, "--tokenizer", path, "--vectors", vectors) != 0
        sp = sentencepiece_processor("llama-spm")
        ids = [sp.encode(s) for s in strings]
        vectors = os.path.join(tmp, "sp-llama-spm")
        write_vectors(vectors, strings, ids)
        print(f"llama-spm: sentencepiece ids for {len(strings)} strings")
        failures += run(binary, "--gguf", os.path.join(VECTORS, "ggml-vocab-llama-spm.gguf"), "--vectors", vectors) != 0
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
