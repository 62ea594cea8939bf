#!/usr/bin/env python3
"""Writes the crafted-input corpus (tests/hardening/corpus/<loader>/) and its MANIFEST.

Each case is a file one loader must refuse: the test (test_corpus.cpp) runs the loader on it and
expects exit code 1, no signal, no hang, and one line naming the file and the fragment of what was
expected that the MANIFEST gives. Loaders, and how the test feeds them:
  safetensors  DIR/model.safetensors of a model directory (valid config.json), tiny-llama --model
  index        DIR/model.safetensors.index.json (shard s1.safetensors valid), tiny-llama --model
  config       DIR/config.json, tiny-llama --model
  gguf         tiny-llama --gguf FILE
  tokenizer    tiny-llama --random-weights 1 --tokenizer FILE --prompt hi
  kilnc        kilnc FILE --print-name (YAML or HF JSON by extension)
  requests     tiny-llama --random-weights 1 --prompts-file FILE (one bad line each)
Deterministic; standard library only.
"""
import json
import os
import shutil
import struct
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(HERE)))
sys.path.insert(0, os.path.join(ROOT, "tests", "support"))
from crafted_files import f32_values, gguf, gguf_string, safetensors  # noqa: E402

cases = []  # (loader, file name, expected fragment)


def case(loader, name, data, expect):
    directory = os.path.join(HERE, loader)
    os.makedirs(directory, exist_ok=True)
    with open(os.path.join(directory, name), "wb") as f:
        f.write(data if isinstance(data, bytes) else data.encode())
    cases.append((loader, name, expect))


for loader in ["safetensors", "index", "config", "gguf", "tokenizer", "kilnc", "requests"]:
    shutil.rmtree(os.path.join(HERE, loader), ignore_errors=True)

deep_json = "[" * 30000 + "]" * 30000  # far past the limit of 64; deep enough to overflow a recursive reader
one = struct.pack("<f", 1.0)

# ---- safetensors (as a model directory's model.safetensors) ----
case("safetensors", "empty.safetensors", b"", "shorter than the 8-byte safetensors header length")
case("safetensors", "header_past_end.safetensors", struct.pack("<Q", 1000) + b"{}", "runs past the end of the file")
case("safetensors", "header_2pow63.safetensors", struct.pack("<Q", 1 << 63) + b"{}", "over the format's limit")
case("safetensors", "header_not_json.safetensors", safetensors([], header="{oops"), "not valid JSON")
case("safetensors", "header_array.safetensors", safetensors([], header="[]"), "must be a JSON object")
case("safetensors", "duplicate_tensor.safetensors",
     safetensors([], header='{"w": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}, '
                            '"w": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}}') + one,
     'duplicate JSON key "w"')
case("safetensors", "deep_header.safetensors", safetensors([], header='{"__metadata__": ' + deep_json + "}"),
     "nested deeper than 64")
case("safetensors", "bad_dtype.safetensors", safetensors([("w", "Q4", [1], one)]), 'unsupported dtype "Q4"')
case("safetensors", "shape_overflow.safetensors",
     safetensors([], header='{"w": {"dtype": "F32", "shape": [4294967296, 4294967296], "data_offsets": [0, 4]}}') + one,
     "overflows int64")
case("safetensors", "negative_dim.safetensors",
     safetensors([], header='{"w": {"dtype": "F32", "shape": [-1], "data_offsets": [0, 4]}}') + one,
     "is not a non-negative integer")
case("safetensors", "offsets_vs_shape.safetensors",
     safetensors([], header='{"w": {"dtype": "F32", "shape": [2], "data_offsets": [0, 4]}}') + one, "needs 8")
case("safetensors", "data_truncated.safetensors",
     safetensors([], header='{"w": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]}}') + one,
     "run past the end of the data buffer")
case("safetensors", "gap.safetensors",
     safetensors([], header='{"w": {"dtype": "F32", "shape": [1], "data_offsets": [4, 8]}}') + one + one,
     "gap in the data buffer")
case("safetensors", "offsets_not_integers.safetensors",
     safetensors([], header='{"w": {"dtype": "F32", "shape": [1], "data_offsets": [0.0, 4]}}') + one,
     "must be non-negative integers")
case("safetensors", "wrong_model.safetensors", safetensors([("some.other.weight", "F32", [1], one)]),
     "missing tensor(s)")

# ---- index (model.safetensors.index.json beside a valid shard s1.safetensors holding "x") ----
case("index", "not_json.json", "{", "not valid JSON")
case("index", "no_weight_map.json", '{"metadata": {}}', 'with a "weight_map" object')
case("index", "escapes_dir.json", '{"weight_map": {"x": "../s1.safetensors"}}', "not a plain file name")
case("index", "missing_shard.json", '{"weight_map": {"x": "s9.safetensors"}}', "does not exist")
case("index", "tensor_not_in_shard.json", '{"weight_map": {"y": "s1.safetensors"}}', "has no such tensor")
case("index", "duplicate_key.json", '{"weight_map": {"x": "s1.safetensors", "x": "s1.safetensors"}}',
     'duplicate JSON key "x"')
case("index", "shard_not_string.json", '{"weight_map": {"x": 1}}', "must be a shard file name")

# ---- safetensors: an FP8 matrix in a directory whose config.json names no quantization ----
case("safetensors", "fp8_no_quantization_config.safetensors",
     safetensors([("model.embed_tokens.weight", "F8_E4M3", [512, 64], bytes(512 * 64))]),
     "is F8_E4M3 but config.json has no quantization_config")

# ---- config.json of a model directory (the binary: tiny-llama) ----
good_config = json.load(open(os.path.join(ROOT, "tests", "golden", "tiny-llama", "config.json")))


def config_with(**changes):
    c = json.loads(json.dumps(good_config))
    for key, value in changes.items():
        if key == "rope_theta":
            c["rope_parameters"]["rope_theta"] = value
        elif value is None:
            del c[key]
        else:
            c[key] = value
    return json.dumps(c, indent=1)


case("config", "not_json.json", '{"model_type": "llama",', "not valid JSON")
case("config", "empty.json", "", "not valid JSON")
case("config", "duplicate_key.json", config_with()[:-1] + ', "hidden_size": 64}', 'duplicate JSON key "hidden_size"')
case("config", "deep.json", config_with()[:-1] + ', "x": ' + deep_json + "}", "nested deeper than 64")
case("config", "other_model_type.json", config_with(model_type="qwen3"), "model_type is qwen3")
case("config", "unknown_model_type.json", config_with(model_type="gpt2"), "model_type")
case("config", "other_rope_theta.json", config_with(rope_theta=500000.0), "rope_theta is 500000")
case("config", "other_eps.json", config_with(rms_norm_eps=1e-6), "rms_norm_eps is 1e-06")
case("config", "hidden_size_string.json", config_with(hidden_size="64"), "expected a positive integer")
case("config", "hidden_size_huge.json", config_with()[:-1].replace('"hidden_size": 64', '"hidden_size": 18446744073709551616') + "}",
     "expected a positive integer")
case("config", "number_overflow.json", config_with()[:-1].replace('"rms_norm_eps": 1e-05', '"rms_norm_eps": 1e400') + "}",
     "not valid JSON")
case("config", "gelu.json", config_with(hidden_act="gelu"), "supported: silu")
case("config", "no_vocab_size.json", config_with(vocab_size=None), "missing field 'vocab_size'")
case("config", "gptq.json", config_with(quantization_config={"quant_method": "gptq", "bits": 4}),
     "is not one kiln reads (quant_method \"fp8\"")
case("config", "fp8_bad_block.json", config_with(quantization_config={"quant_method": "fp8", "weight_block_size": [128]}),
     "quantization_config.weight_block_size [128], expected [rows, columns]")

# ---- GGUF (tiny-llama --gguf) ----
vocab = ["<unk>", "<s>", "</s>", "a", "b", "ab"]
tok = [("tokenizer.ggml.model", "str", "gpt2"), ("tokenizer.ggml.pre", "str", "gpt-2"),
       ("tokenizer.ggml.tokens", "arr", ("str", vocab)), ("tokenizer.ggml.merges", "arr", ("str", ["a b"]))]
llama = [("general.architecture", "str", "llama"), ("llama.block_count", "u32", 2),
         ("llama.context_length", "u32", 2048), ("llama.embedding_length", "u32", 64),
         ("llama.feed_forward_length", "u32", 160), ("llama.attention.head_count", "u32", 4),
         ("llama.attention.head_count_kv", "u32", 2), ("llama.rope.freq_base", "f32", 10000.0),
         ("llama.attention.layer_norm_rms_epsilon", "f32", 1e-5)]
case("gguf", "empty.gguf", b"", "needs 4 bytes")
case("gguf", "bad_magic.gguf", b"GGML" + b"\0" * 60, "not a GGUF file")
case("gguf", "version_99.gguf", gguf([], [], version=99), "unsupported GGUF version 99")
case("gguf", "kv_count_huge.gguf", b"GGUF" + struct.pack("<IQQ", 3, 0, 1 << 60), "cannot fit in the")
case("gguf", "tensor_count_huge.gguf", b"GGUF" + struct.pack("<IQQ", 3, 1 << 60, 0), "cannot fit in the")
case("gguf", "string_length_huge.gguf", b"GGUF" + struct.pack("<IQQ", 3, 0, 1) + struct.pack("<Q", 1 << 62) + b"key" * 8,
     "remain")
case("gguf", "array_count_huge.gguf",
     b"GGUF" + struct.pack("<IQQ", 3, 0, 1) + gguf_string("k") + struct.pack("<IIQ", 9, 4, 1 << 61), "array of")
case("gguf", "unknown_value_type.gguf", b"GGUF" + struct.pack("<IQQ", 3, 0, 1) + gguf_string("k") + struct.pack("<I", 77),
     "unknown value type 77")
case("gguf", "duplicate_key.gguf", gguf([("k", "u32", 1), ("k", "u32", 2)], []), 'duplicate key "k"')
case("gguf", "five_dims.gguf", gguf([], [("t", 0, [1, 1, 1, 1, 1], one)]), "n_dims is 5")
case("gguf", "unknown_ggml_type.gguf", gguf([], [("t", 99, [1], one)]), "unknown ggml type id 99")
case("gguf", "data_past_end.gguf", gguf([], [("t", 0, [64], one)]), "past the end")
case("gguf", "not_llama.gguf", gguf([("general.architecture", "str", "bert")] + tok, []),
     'general.architecture is "bert"; kiln reads GGUF files of the architectures')
case("gguf", "qwen3_for_llama.gguf",
     gguf([(k.replace("llama.", "qwen3."), kind, v) for k, kind, v in llama if k != "general.architecture"]
          + [("general.architecture", "str", "qwen3")] + tok, [("token_embd.weight", 0, [64, 6], f32_values(384))]),
     "model type is qwen3 in the GGUF file but llama in tiny-llama")
case("gguf", "block_count_huge.gguf",
     gguf([kv for kv in llama if kv[0] != "llama.block_count"] + [("llama.block_count", "u64", 1 << 40)] + tok, []),
     '"llama.block_count" = 1099511627776, expected a positive integer up to 67108864')
deepseek2 = [(k.replace("llama.", "deepseek2."), kind, v) for k, kind, v in llama if k != "general.architecture"]
case("gguf", "deepseek2_experts.gguf",
     gguf([("general.architecture", "str", "deepseek2")] + deepseek2 + tok
          + [("deepseek2.attention.kv_lora_rank", "u32", 32), ("deepseek2.rope.dimension_count", "u32", 8),
             ("deepseek2.attention.key_length", "u32", 24), ("deepseek2.attention.value_length", "u32", 12),
             ("deepseek2.expert_count", "u32", 4), ("deepseek2.expert_used_count", "u32", 6),
             ("deepseek2.expert_feed_forward_length", "u32", 24)],
          [("token_embd.weight", 0, [64, 6], f32_values(384))]),
     "inconsistent expert metadata (4 experts, 6 used")
case("gguf", "wrong_shapes.gguf",
     gguf(llama + [("llama.vocab_size", "u32", 6)] + tok, [("token_embd.weight", 0, [64, 6], f32_values(384))]),
     "vocabulary size is 6 in the GGUF file but 512")

# ---- tokenizer.json (tiny-llama --tokenizer) ----
byte_level = {"type": "ByteLevel", "add_prefix_space": False, "use_regex": True}


def tokenizer(**parts):
    t = {"added_tokens": [], "normalizer": None, "pre_tokenizer": byte_level, "decoder": {"type": "ByteLevel"},
         "model": {"type": "BPE", "vocab": {"a": 0, "b": 1, "ab": 2}, "merges": ["a b"]}}
    for key, value in parts.items():
        if key in ("vocab", "merges"):
            t["model"][key] = value
        else:
            t[key] = value
    return json.dumps(t)


nested = byte_level
for _ in range(2000):
    nested = {"type": "Sequence", "pretokenizers": [nested]}
case("tokenizer", "empty.json", "", "not valid JSON")
case("tokenizer", "not_json.json", tokenizer()[:-2], "not valid JSON")
case("tokenizer", "deep_sequence.json", json.dumps(json.loads(tokenizer()) | {"pre_tokenizer": None})[:-1]
     .replace('"pre_tokenizer": null', '"pre_tokenizer": ' + '{"type": "Sequence", "pretokenizers": [' * 2000
              + json.dumps(byte_level) + "]}" * 2000) + "}", "nested deeper than 64")
case("tokenizer", "added_id_huge.json",
     tokenizer(added_tokens=[{"id": 16777215, "content": "<x>", "special": True}]), "expected 0..3")
case("tokenizer", "vocab_id_string.json", tokenizer(vocab={"a": 0, "b": "1", "ab": 2}), "must be an integer id")
case("tokenizer", "vocab_id_negative.json", tokenizer(vocab={"a": 0, "b": -1, "ab": 2}), "expected 0..2")
case("tokenizer", "unigram.json", tokenizer().replace('"type": "BPE"', '"type": "Unigram"'), "only BPE")
case("tokenizer", "bad_regex.json", tokenizer(pre_tokenizer={"type": "Split", "pattern": {"Regex": "(a"},
                                                             "behavior": "Isolated", "invert": False}),
     "regex does not compile")
case("tokenizer", "merge_unknown.json", tokenizer(merges=["a zz"]), "which is not in the vocabulary")
case("tokenizer", "duplicate_key.json", tokenizer()[:-1] + ', "decoder": null}', 'duplicate JSON key "decoder"')
case("tokenizer", "decoder_null.json", tokenizer(decoder=None), "decoder is null")
case("tokenizer", "same_id_twice.json", tokenizer(vocab={"a": 0, "b": 0, "ab": 2}), "is used by both")
case("tokenizer", "strip_start_huge.json", tokenizer(decoder={"type": "Strip", "content": " ", "start": 4294967297, "stop": 0}),
     "only Strip")

# ---- kilnc configs ----
yaml = open(os.path.join(ROOT, "configs", "tiny-llama.yaml")).read()
case("kilnc", "duplicate_key.yaml", yaml.replace("  hidden_size: 64\n", "  hidden_size: 64\n  hidden_size: 128\n"),
     "repeated key 'model.hidden_size'")
case("kilnc", "alias.yaml", yaml.replace("name: tiny-llama", "name: &n tiny-llama\nalias: *n"), "aliases")
case("kilnc", "deep.yaml", yaml.replace("name: tiny-llama", "name: " + "[" * 5000 + "]" * 5000), "nested deeper than 64")
case("kilnc", "two_documents.yaml", yaml + "---\n" + yaml, "more than one YAML document")
case("kilnc", "not_yaml.yaml", "name: [unclosed\n", "not valid YAML")
case("kilnc", "empty.yaml", "", "the file is empty")
case("kilnc", "unknown_field.yaml", yaml.replace("  hidden_size: 64\n", "  hidden_size: 64\n  hiden_size: 64\n"),
     "unknown field 'model.hiden_size'")
case("kilnc", "huge_integer.yaml", yaml.replace("vocab_size: 512", "vocab_size: 99999999999999999999999"),
     "expected a positive integer")
case("kilnc", "float_size.yaml", yaml.replace("hidden_size: 64", "hidden_size: 64.5"), "expected a positive integer")
case("kilnc", "key_is_list.yaml", yaml.replace("name: tiny-llama", "[a, b]: 1\nname: tiny-llama"), "plain name")
hf = open(os.path.join(ROOT, "tests", "golden", "tiny-llama", "config.json")).read()
case("kilnc", "duplicate_key.json", hf.replace('"hidden_size": 64,', '"hidden_size": 64, "hidden_size": 65,'),
     'duplicate JSON key "hidden_size"')
case("kilnc", "deep.json", hf.replace('"use_cache": true', '"use_cache": ' + deep_json), "nested deeper than 64")
case("kilnc", "not_json.json", hf[:-3], "not valid JSON")
case("kilnc", "wrapped_integer.json", hf.replace('"hidden_size": 64', '"hidden_size": 9223372036854775808'),
     "expected a positive integer")
case("kilnc", "mistral.json", hf.replace('"model_type": "llama"', '"model_type": "mistral"'),
     "one of llama, qwen3, deepseek_v2")

# ---- requests (one bad line per file) ----
case("requests", "not_json.jsonl", "this is not json\n", "not valid JSON")
case("requests", "unknown_field.jsonl", '{"prompt_ids": [1], "colour": 1}\n', "unknown field 'colour'")
case("requests", "token_id_wraps.jsonl", '{"prompt_ids": [4294967297]}\n', "field 'prompt_ids'")
case("requests", "token_outside_vocab.jsonl", '{"prompt_ids": [512]}\n', "outside the vocabulary")
case("requests", "top_k_huge.jsonl", '{"prompt_ids": [1], "top_k": 4294967296}\n', "field 'top_k'")
case("requests", "max_tokens_huge.jsonl", '{"prompt_ids": [1], "max_tokens": 4294967298}\n', "field 'max_tokens'")
case("requests", "duplicate_key.jsonl", '{"prompt_ids": [1], "max_tokens": 2, "max_tokens": 3}\n',
     'duplicate JSON key "max_tokens"')
case("requests", "number_overflow.jsonl", '{"prompt_ids": [1], "temperature": 1e400}\n', "not valid JSON")
case("requests", "deep.jsonl", '{"prompt_ids": [1], "id": ' + deep_json + "}\n", "nested deeper than 64")
case("requests", "two_sources.jsonl", '{"prompt_ids": [1], "prompt": "x"}\n', 'give exactly one of')
case("requests", "not_object.jsonl", "[1, 2]\n", "expected a JSON object")
case("requests", "text_without_tokenizer.jsonl", '{"prompt": "hi"}\n', "needs a tokenizer")
case("requests", "seed_negative.jsonl", '{"prompt_ids": [1], "seed": -3}\n', "field 'seed'")
case("requests", "top_p_out_of_range.jsonl", '{"prompt_ids": [1], "top_p": 2}\n', "top_p")

with open(os.path.join(HERE, "MANIFEST"), "w") as f:
    f.write("# Written by make_corpus.py: loader, file (in <loader>/), fragment the one error line must hold.\n")
    for loader, name, expect in cases:
        f.write("%s\t%s\t%s\n" % (loader, name, expect))
print("%d cases" % len(cases))
