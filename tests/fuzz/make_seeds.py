#!/usr/bin/env python3
"""Writes the fuzzers' seed corpora (corpus/<harness>/) and dictionaries (<harness>.dict).

Seeds are small valid inputs of each format, so the fuzzers start from the structures the loaders
accept and mutate from there. Run from anywhere; it rewrites the files in place (deterministic).
Needs nothing beyond the Python standard library.
"""
import json
import os
import shutil
import struct
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "tests", "support"))
from crafted_files import f32_values, gguf, q8_0_blocks, safetensors  # noqa: E402


def corpus(name):
    path = os.path.join(HERE, "corpus", name)
    shutil.rmtree(path, ignore_errors=True)
    os.makedirs(path)
    return path


def write(directory, name, data):
    with open(os.path.join(directory, name), "wb") as f:
        f.write(data if isinstance(data, bytes) else data.encode())


# ---- safetensors ----
d = corpus("fuzz_safetensors")
write(d, "f32.safetensors", safetensors([("w", "F32", [2, 2], struct.pack("<4f", 1, -2, 3.5, 0))]))
write(d, "mixed.safetensors", safetensors([("a", "BF16", [3], b"\x80\x3f\x00\x40\xc0\x7f"), ("b", "F16", [1, 2], b"\x00\x3c\x00\xc0"),
                                           ("c", "I64", [1], struct.pack("<q", 7))], {"format": "pt"}))
write(d, "empty.safetensors", safetensors([]))


# ---- GGUF ----
tokens = ["<unk>", "<s>", "</s>", "a", "b", "ab", "\u0120", "\u0120a"]
vocab_kvs = [("tokenizer.ggml.model", "str", "gpt2"), ("tokenizer.ggml.pre", "str", "gpt-2"),
             ("tokenizer.ggml.tokens", "arr", ("str", tokens)),
             ("tokenizer.ggml.token_type", "arr", ("i32", [2, 3, 3, 1, 1, 1, 1, 1])),
             ("tokenizer.ggml.merges", "arr", ("str", ["a b", "\u0120 a"])),
             ("tokenizer.ggml.bos_token_id", "u32", 1), ("tokenizer.ggml.eos_token_id", "u32", 2)]
hidden, vocab = 8, len(tokens)
llama_kvs = [("general.architecture", "str", "llama"), ("llama.block_count", "u32", 1),
             ("llama.context_length", "u32", 64), ("llama.embedding_length", "u32", hidden),
             ("llama.feed_forward_length", "u32", 16), ("llama.attention.head_count", "u32", 2),
             ("llama.attention.head_count_kv", "u32", 1), ("llama.rope.freq_base", "f32", 10000.0),
             ("llama.attention.layer_norm_rms_epsilon", "f32", 1e-5), ("llama.vocab_size", "u32", vocab)]


layer = [("blk.0.attn_norm.weight", 0, [hidden], f32_values(hidden, 1)),
         ("blk.0.attn_q.weight", 0, [hidden, hidden], f32_values(64)),
         ("blk.0.attn_k.weight", 0, [hidden, 4], f32_values(32)),
         ("blk.0.attn_v.weight", 0, [hidden, 4], f32_values(32)),
         ("blk.0.attn_output.weight", 0, [hidden, hidden], f32_values(64)),
         ("blk.0.ffn_norm.weight", 0, [hidden], f32_values(hidden, 1)),
         ("blk.0.ffn_gate.weight", 0, [hidden, 16], f32_values(128)),
         ("blk.0.ffn_up.weight", 0, [hidden, 16], f32_values(128)),
         ("blk.0.ffn_down.weight", 0, [16, hidden], f32_values(128))]
d = corpus("fuzz_gguf")
write(d, "vocab.gguf", gguf(vocab_kvs, []))
write(d, "llama.gguf", gguf(llama_kvs + vocab_kvs, [("token_embd.weight", 0, [hidden, vocab], f32_values(hidden * vocab)),
                                                    ("output_norm.weight", 0, [hidden], f32_values(hidden, 1))] + layer))
write(d, "q8_0.gguf", gguf([("general.architecture", "str", "llama")], [("t", 8, [64], q8_0_blocks(64))]))


def block_bytes(type_id, size, scale_at):
    """One block of a quantized type: patterned bytes with f16 0.01 at each offset of scale_at."""
    b = bytearray((i * 37 + type_id) % 256 for i in range(size))
    for at in scale_at:
        b[at:at + 2] = struct.pack("<e", 0.01)
    return bytes(b)


# One block of every quantized type kiln dequantizes (the harness dequantizes tensors of any name):
# Q4_0, Q4_1, Q5_0, Q5_1, Q8_0 (32 elements), Q2_K, Q3_K, Q4_K, Q5_K, Q6_K (256).
blocks = [(2, 32, 18, [0]), (3, 32, 20, [0, 2]), (6, 32, 22, [0]), (7, 32, 24, [0, 2]), (8, 32, 34, [0]),
          (10, 256, 84, [80, 82]), (11, 256, 110, [108]), (12, 256, 144, [0, 2]), (13, 256, 176, [0, 2]),
          (14, 256, 210, [208])]
write(d, "quants.gguf", gguf([("general.architecture", "str", "llama")],
                             [(f"t{t}", t, [n], block_bytes(t, size, at)) for t, n, size, at in blocks]))

# Qwen3: qwen3.* keys and per-head q/k norms (head_dim 4 over 2 heads, 1 KV head).
qwen3_kvs = [(k.replace("llama.", "qwen3."), kind, v) for k, kind, v in llama_kvs if k != "general.architecture"]
write(d, "qwen3.gguf", gguf([("general.architecture", "str", "qwen3")] + qwen3_kvs + vocab_kvs,
                           [("token_embd.weight", 0, [hidden, vocab], f32_values(hidden * vocab)),
                            ("output_norm.weight", 0, [hidden], f32_values(hidden, 1))] + layer +
                           [("blk.0.attn_q_norm.weight", 0, [4], f32_values(4, 1)),
                            ("blk.0.attn_k_norm.weight", 0, [4], f32_values(4, 1))]))


# DeepSeek-V2: MLA (q LoRA 4, kv LoRA 4, nope 2 + rope 2, v 2, 2 heads), one dense layer, then one
# MoE layer of 4 experts (2 used, 1 shared, expert width 4); kv_b whole or split as llama.cpp does.
def deepseek2(split):
    heads, q_lora, kv_lora, nope, rope, v, experts, width = 2, 4, 4, 2, 2, 2, 4, 4
    kvs = [("general.architecture", "str", "deepseek2"), ("deepseek2.block_count", "u32", 2),
           ("deepseek2.context_length", "u32", 64), ("deepseek2.embedding_length", "u32", hidden),
           ("deepseek2.feed_forward_length", "u32", 16), ("deepseek2.attention.head_count", "u32", heads),
           ("deepseek2.rope.freq_base", "f32", 10000.0), ("deepseek2.attention.layer_norm_rms_epsilon", "f32", 1e-6),
           ("deepseek2.vocab_size", "u32", vocab), ("deepseek2.attention.q_lora_rank", "u32", q_lora),
           ("deepseek2.attention.kv_lora_rank", "u32", kv_lora), ("deepseek2.rope.dimension_count", "u32", rope),
           ("deepseek2.expert_count", "u32", experts), ("deepseek2.expert_used_count", "u32", 2),
           ("deepseek2.expert_shared_count", "u32", 1), ("deepseek2.expert_feed_forward_length", "u32", width),
           ("deepseek2.leading_dense_block_count", "u32", 1), ("deepseek2.expert_weights_scale", "f32", 1.0),
           ("deepseek2.rope.scaling.type", "str", "yarn"), ("deepseek2.rope.scaling.factor", "f32", 4.0),
           ("deepseek2.rope.scaling.original_context_length", "u32", 16),
           ("deepseek2.rope.scaling.yarn_log_multiplier", "f32", 0.0707)]
    if split:
        kvs += [("deepseek2.attention.head_count_kv", "u32", 1), ("deepseek2.attention.key_length", "u32", kv_lora + rope),
                ("deepseek2.attention.value_length", "u32", kv_lora),
                ("deepseek2.attention.key_length_mla", "u32", nope + rope),
                ("deepseek2.attention.value_length_mla", "u32", v)]
    else:
        kvs += [("deepseek2.attention.head_count_kv", "u32", heads), ("deepseek2.attention.key_length", "u32", nope + rope),
                ("deepseek2.attention.value_length", "u32", v)]

    def t(name, *ne):
        n = 1
        for x in ne:
            n *= x
        return (name, 0, list(ne), f32_values(n))

    tensors = [t("token_embd.weight", hidden, vocab), t("output_norm.weight", hidden), t("output.weight", hidden, vocab)]
    for b in range(2):
        g = f"blk.{b}."
        tensors += [t(g + "attn_norm.weight", hidden), t(g + "attn_q_a.weight", hidden, q_lora),
                    t(g + "attn_q_a_norm.weight", q_lora), t(g + "attn_q_b.weight", q_lora, heads * (nope + rope)),
                    t(g + "attn_kv_a_mqa.weight", hidden, kv_lora + rope), t(g + "attn_kv_a_norm.weight", kv_lora),
                    t(g + "attn_output.weight", heads * v, hidden), t(g + "ffn_norm.weight", hidden)]
        if split:
            tensors += [t(g + "attn_k_b.weight", nope, kv_lora, heads), t(g + "attn_v_b.weight", kv_lora, v, heads)]
        else:
            tensors += [t(g + "attn_kv_b.weight", kv_lora, heads * (nope + v))]
        if b == 0:
            tensors += [t(g + "ffn_gate.weight", hidden, 16), t(g + "ffn_up.weight", hidden, 16),
                        t(g + "ffn_down.weight", 16, hidden)]
        else:
            tensors += [t(g + "ffn_gate_inp.weight", hidden, experts), t(g + "ffn_gate_exps.weight", hidden, width, experts),
                        t(g + "ffn_up_exps.weight", hidden, width, experts), t(g + "ffn_down_exps.weight", width, hidden, experts),
                        t(g + "ffn_gate_shexp.weight", hidden, width), t(g + "ffn_up_shexp.weight", hidden, width),
                        t(g + "ffn_down_shexp.weight", width, hidden)]
    return gguf(kvs + vocab_kvs, tensors)


write(d, "deepseek2_split.gguf", deepseek2(True))
write(d, "deepseek2_whole.gguf", deepseek2(False))


# ---- tokenizer.json ----
def tokenizer(pre, decoder, normalizer=None, added=(), vocab=None, merges=("a b",), **model):
    return json.dumps({"added_tokens": list(added), "normalizer": normalizer, "pre_tokenizer": pre, "decoder": decoder,
                       "post_processor": {"type": "TemplateProcessing", "single": [{"SpecialToken": {"id": "<s>"}}]},
                       "model": dict(type="BPE", vocab=vocab or {"<s>": 0, "a": 1, "b": 2, "ab": 3, "\u2581": 4},
                                     merges=list(merges), **model)}, ensure_ascii=False)


byte_level = {"type": "ByteLevel", "add_prefix_space": False, "use_regex": True}
d = corpus("fuzz_tokenizer_json")
write(d, "byte_level.json", tokenizer(byte_level, {"type": "ByteLevel"},
                                      added=[{"id": 0, "content": "<s>", "special": True, "lstrip": True}]))
write(d, "split_digits.json", tokenizer({"type": "Sequence", "pretokenizers": [
    {"type": "Split", "pattern": {"Regex": "\\p{N}{1,3}"}, "behavior": "Isolated", "invert": False},
    {"type": "Digits", "individual_digits": True}, byte_level]}, {"type": "ByteLevel"},
    normalizer={"type": "NFC"}))
write(d, "metaspace.json", tokenizer(None, {"type": "Sequence", "decoders": [
    {"type": "Replace", "pattern": {"String": "\u2581"}, "content": " "}, {"type": "ByteFallback"}, {"type": "Fuse"},
    {"type": "Strip", "content": " ", "start": 1, "stop": 0}]},
    normalizer={"type": "Sequence", "normalizers": [{"type": "Prepend", "prepend": "\u2581"},
                                                     {"type": "Replace", "pattern": {"String": " "}, "content": "\u2581"}]},
    byte_fallback=True, unk_token="<s>", merges=[["a", "b"]]))
write(d, "metaspace_pre.json", tokenizer(
    {"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": "first", "split": True},
    {"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": "first", "split": True},
    added=[{"id": 0, "content": "<s>", "special": True, "lstrip": False, "rstrip": False, "single_word": False,
            "normalized": False}], merges=[["a", "b"]]))

# ---- kilnc configs ----
d = corpus("fuzz_config_yaml")
for name in ["tiny-llama", "tiny-qwen3", "tiny-deepseek-v2"]:
    shutil.copy(os.path.join(ROOT, "configs", name + ".yaml"), d)
d = corpus("fuzz_config_hf")
for name in ["tiny-llama", "tiny-qwen3", "tiny-deepseek-v2"]:
    shutil.copy(os.path.join(ROOT, "tests", "golden", name, "config.json"), os.path.join(d, name + ".json"))

# ---- JSONL requests ----
d = corpus("fuzz_requests")
write(d, "ids.jsonl", '{"prompt_ids": [5, 6, 7], "max_tokens": 4, "temperature": 0}\n'
                      '{"id": "x", "prompt_ids": [1], "top_k": 5, "top_p": 0.9, "min_p": 0.1, "seed": 3, '
                      '"stop_token_ids": [2], "ignore_eos": true, "logprobs": true}\n')
write(d, "text.jsonl", '{"prompt": "Hello <|im_end|> there", "max_tokens": 2}\n\n'
                       '{"chat": "hi<|im_start|>", "system": "be brief", "max_tokens": 8}\n')

# ---- OpenAI API request bodies (first byte: bit 0 chat, bit 1 --chat-special-tokens) ----
d = corpus("fuzz_openai")
completions = [
    {"model": "fuzz", "prompt": "Hello there", "max_tokens": 8, "temperature": 0, "stop": ["lo", "e t"]},
    {"prompt": [5, 6, 7, 300], "max_tokens": 4, "logprobs": 3, "echo": True, "n": 2, "seed": 3},
    {"prompt": ["one", "two"], "stream": True, "stream_options": {"include_usage": True}, "logit_bias": {"65": -100},
     "stop_token_ids": [10], "min_tokens": 1, "top_k": 5, "top_p": 0.5, "min_p": 0.1, "presence_penalty": 1.5,
     "frequency_penalty": -1, "repetition_penalty": 1.2, "prompt_logprobs": 2, "include_stop_str_in_output": True},
    {"prompt": [[1, 2], [3]], "max_completion_tokens": 3, "best_of": 1, "ignore_eos": True, "skip_special_tokens": False},
    {"prompt": "Pick", "max_tokens": 8, "guided_choice": ["red", "green"], "n": 2},
    {"prompt": "Code", "guided_grammar": "root ::= \"id-\" [0-9]{3}"},
    {"prompt": "Hello there", "truncate_prompt_tokens": 3, "allowed_token_ids": [5, 6, 300], "bad_words": ["lo", " e"],
     "add_special_tokens": False, "return_tokens_as_token_ids": True, "logprobs": 1},
]
chats = [
    {"messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi <|im_end|>"}],
     "max_tokens": 16, "logprobs": True, "top_logprobs": 2, "stop": "\u00e9"},
    {"model": "fuzz", "messages": [{"role": "user", "content": [{"type": "text", "text": "part"}]}], "stream": True,
     "chat_template_kwargs": {"enable_thinking": False}, "add_generation_prompt": False, "n": 3},
    {"messages": [{"role": "user", "content": "x"}, {"role": "assistant", "content": "y"}], "tools": [{"type": "function"}]},
    {"messages": [{"role": "user", "content": "JSON"}], "response_format": {"type": "json_schema", "json_schema": {
        "name": "r", "schema": {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"enum": ["x", None]}},
                                "required": ["a"]}}}},
    {"messages": [{"role": "user", "content": "JSON"}], "response_format": {"type": "json_object"}},
    {"messages": [{"role": "user", "content": "call"}], "tools": [{"type": "function", "function": {"name": "f",
     "parameters": {"type": "object", "properties": {"a": {"type": "integer"}}}}}], "tool_choice": "required"},
    {"messages": [{"role": "user", "content": "<tool_call>{\"name\": \"f\", \"arguments\": {}}</tool_call>"}],
     "tools": [{"type": "function", "function": {"name": "f"}}], "stream": True},
    {"messages": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Sure, "}],
     "continue_final_message": True, "add_generation_prompt": False, "documents": [{"title": "t", "text": "x"}]}
]
for i, body in enumerate(completions):
    write(d, "completion%d" % i, bytes([0]) + json.dumps(body).encode())
for i, body in enumerate(chats):
    write(d, "chat%d" % i, bytes([1 + 2 * (i % 2) + (4 if i >= 5 else 0) + (16 if i == 6 else 0)]) + json.dumps(body).encode())

# ---- structured output (first byte: 0 GBNF, 1 JSON schema, 2 choices; after a NUL, token picks) ----
d = corpus("fuzz_grammar")
grammars = ['root ::= "{" ws pair ("," ws pair)* "}"\npair ::= [a-z]+ ws ":" ws ("true" | [0-9]{1,3})\nws ::= [ \\t\\n]{0,2}\n',
            'root ::= ("a" | "ab" | [^"\\\\])* "."\n', 'root ::= x{2,5} y?\nx ::= "\\u00e9" | .\ny ::= ("\\x41" root)\n']
schemas = [{"type": "object", "properties": {"name": {"type": "string", "maxLength": 4}, "n": {"type": "number"},
                                             "tags": {"type": "array", "items": {"type": "boolean"}, "maxItems": 2}},
            "required": ["name"], "additionalProperties": {"type": "null"}},
           {"$defs": {"t": {"anyOf": [{"type": "integer"}, {"type": "array", "items": {"$ref": "#/$defs/t"}}]}},
            "$ref": "#/$defs/t"},
           {"type": "array", "prefixItems": [{"const": "x"}, {"enum": [1, None]}], "minItems": 1}]
for i, g in enumerate(grammars):
    write(d, "gbnf%d" % i, bytes([0]) + g.encode() + b"\0" + bytes(range(7, 60, 3)))
for i, s in enumerate(schemas):
    write(d, "schema%d" % i, bytes([1]) + json.dumps(s).encode() + b"\0" + bytes(range(1, 90, 2)))
write(d, "choice0", bytes([2]) + json.dumps(["yes", "no", "\u00e9t\u00e9"]).encode() + b"\0\x01\x81")
for i, r in enumerate([r"^\d{4}-(0[1-9]|1[0-2])$", r"(?:[A-Z][a-z]+ ?){1,3}[.!?]", r"[^\s\\\"]{2,}|\x41\u00e9"]):
    write(d, "regex%d" % i, bytes([3]) + r.encode() + b"\0" + bytes(range(3, 70, 5)))

# ---- a model's answer (first byte: 0 hermes, 1 llama3_json, 2 pythonic, 3 none; +4: deepseek_r1) ----
d = corpus("fuzz_answer_parsers")
answers = [
    (0, 'Let me check.\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'),
    (0, '<tool_call>[{"name": "f", "arguments": {"k": true}}, {"name": "g"}]</tool_call> then <tool'),
    (1, '<|python_tag|>{"name": "t", "parameters": {"zone": "UTC"}}; {"name": "u", "parameters": {}}'),
    (2, '[get_weather(city="Paris", days=2), now()]'),
    (2, "[f(a='it\\'s', b=[1, -2.5e3, None], c={'k': (True, 0x1)}, d=\"\"\"two\nlines\"\"\")]"),
    (2, '[f(s="\\u00e9\\x41\\101", n=1_000,)]'),
    (6, '<think>\nplan\n</think>\n\n[g(x=3)]'),
    (4, 'still thinking </think>\n\nThe answer.'),
    (3, '<think>a</thi'),
    (6, '\u0085\u00a0<think>x\u2028</think>\u0085[f()]'),  # white space of two and three bytes (NEL, NBSP, U+2028)
]
for i, (options, text) in enumerate(answers):
    write(d, "answer%d" % i, bytes([options]) + text.encode())

# ---- chat ----
d = corpus("fuzz_chat")
for i, (system, user) in enumerate([("", "Hello!"), ("Be brief.", "What is 2+2?"),
                                    ("x<|im_end|>\n<|im_start|>system", "<|eot_id|><|start_header_id|>system"),
                                    ("  ", "\u00e9\u65e5\u672c \U0001F600")]):
    write(d, "chat%d" % i, bytes([i]) + system.encode() + b"\0" + user.encode())

# ---- dictionaries: the tokens the formats are built from ----
json_words = ['"{"', '"}"', '"["', '"]"', '":"', '","', '"true"', '"false"', '"null"', '"\\""', '"-1"', '"1e400"',
              '"18446744073709551616"', '"2.5"', '"\\\\u0000"']


def dictionary(name, words):
    with open(os.path.join(HERE, name + ".dict"), "w") as f:
        f.write("# libFuzzer dictionary for %s (written by make_seeds.py)\n" % name)
        for w in words:
            f.write(w + "\n")


def keys(*names):
    return ['"\\"%s\\""' % n for n in names]


dictionary("fuzz_safetensors", json_words + keys("dtype", "shape", "data_offsets", "__metadata__", "F32", "BF16",
                                                  "F16", "F64", "I64", "U8", "BOOL"))
dictionary("fuzz_tokenizer_json", json_words + keys(
    "model", "type", "BPE", "vocab", "merges", "added_tokens", "id", "content", "special", "lstrip", "rstrip",
    "single_word", "normalized", "normalizer", "pre_tokenizer", "decoder", "post_processor", "Sequence",
    "pretokenizers", "normalizers", "decoders", "processors", "ByteLevel", "Split", "Digits", "NFC", "Prepend",
    "Replace", "Strip", "Fuse", "ByteFallback", "pattern", "Regex", "String", "behavior", "Isolated", "Removed",
    "MergedWithPrevious", "MergedWithNext", "Contiguous", "invert", "byte_fallback", "unk_token", "ignore_merges",
    "TemplateProcessing", "single", "SpecialToken", "add_prefix_space", "use_regex", "start", "stop",
    "Metaspace", "replacement", "prepend_scheme", "always", "first", "never", "split",
    "individual_digits", "fuse_unk", "dropout"))
dictionary("fuzz_config_hf", json_words + keys(
    "model_type", "llama", "qwen3", "deepseek_v2", "hidden_size", "num_hidden_layers", "num_attention_heads",
    "num_key_value_heads", "head_dim", "intermediate_size", "vocab_size", "max_position_embeddings",
    "rms_norm_eps", "rope_theta", "rope_scaling", "rope_parameters", "rope_type", "factor", "yarn", "default",
    "low_freq_factor", "high_freq_factor", "original_max_position_embeddings", "tie_word_embeddings",
    "kv_lora_rank", "q_lora_rank", "qk_rope_head_dim", "qk_nope_head_dim", "v_head_dim", "n_routed_experts",
    "n_shared_experts", "num_experts_per_tok", "moe_intermediate_size", "first_k_dense_replace", "topk_method",
    "n_group", "topk_group", "norm_topk_prob", "routed_scaling_factor", "hidden_act", "silu", "eos_token_id"))
dictionary("fuzz_requests", json_words + keys(
    "id", "prompt", "chat", "system", "prompt_ids", "max_tokens", "temperature", "top_p", "top_k", "min_p", "seed",
    "stop_token_ids", "ignore_eos", "logprobs", "<|im_start|>", "<|im_end|>") + ['"\\x0a"'])
dictionary("fuzz_openai", json_words + keys(
    "model", "prompt", "messages", "role", "content", "system", "user", "assistant", "type", "text", "max_tokens",
    "max_completion_tokens", "min_tokens", "temperature", "top_p", "top_k", "min_p", "seed", "n", "best_of", "stop",
    "stop_token_ids", "ignore_eos", "logprobs", "top_logprobs", "prompt_logprobs", "echo", "stream", "stream_options",
    "include_usage", "logit_bias", "presence_penalty", "frequency_penalty", "repetition_penalty", "suffix",
    "skip_special_tokens", "include_stop_str_in_output", "chat_template_kwargs", "add_generation_prompt", "tools",
    "response_format", "json_object", "json_schema", "schema", "guided_json", "guided_choice", "guided_grammar",
    "structured_outputs", "use_beam_search", "user", "tool_choice", "required", "function", "properties", "items",
    "anyOf", "enum", "const", "$ref", "$defs", "allowed_token_ids", "bad_words", "truncate_prompt_tokens",
    "add_special_tokens", "continue_final_message", "documents", "return_tokens_as_token_ids", "priority",
    "<|im_start|>", "<|im_end|>", "<|endoftext|>"))
dictionary("fuzz_grammar", json_words + keys(
    "type", "object", "array", "string", "integer", "number", "boolean", "null", "properties", "required",
    "pattern", "format", "date-time", "uuid", "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum",
    "additionalProperties", "items", "prefixItems", "minItems", "maxItems", "minLength", "maxLength", "enum", "const",
    "anyOf", "oneOf", "allOf", "$ref", "$defs", "definitions", "#/$defs/") +
    ['"::="', '"root"', '"|"', '"("', '")"', '"*"', '"+"', '"?"', '"{2,}"', '"[^"', '"[a-z]"', '"\\\\x41"',
     '"\\\\u00e9"', '"."', '"#"'])
dictionary("fuzz_answer_parsers", json_words + ['"<tool_call>"', '"</tool_call>"', '"<|python_tag|>"', '"<think>"',
                                              '"</think>"', '";"', '"("', '")"', '"="', '"True"', '"None"', '"\'\'\'"',
                                              '"\\\\x"', '"\\\\U0001"', '"1_0"', '"name"', '"arguments"', '"parameters"'])
dictionary("fuzz_config_yaml", ['"name: "', '"model:"', '"build:"', '"\\x0a  "', '": "', '"- "', '"["', '"]"',
                                '"{"', '"}"', '"&a "', '"*a"', '"---"', '"family: "', '"rope_scaling:"',
                                '"hidden_size: "', '"1.0e-5"', '"true"', '"null"', '"~"', '"!!str "', '"<<: "'])
dictionary("fuzz_chat", ['"<|im_start|>"', '"<|im_end|>"', '"<|eot_id|>"', '"<|start_header_id|>"',
                         '"<|end_header_id|>"', '"<|begin_of_text|>"', '"<think>"', '"\\x00"', '"\\x0a"',
                         '"<\\xef\\xbd\\x9cbegin\\xe2\\x96\\x81of\\xe2\\x96\\x81sentence\\xef\\xbd\\x9c>"'])
