#!/usr/bin/env python3
"""Writes tests/server/tiny-chat/: a byte-level BPE tokenizer small enough for the tiny test models
(vocabulary 640): the 256 byte tokens, merges learned from the text below, and ChatML's special
tokens, with a ChatML chat template and a generation_config.json. The server tests run
build/bin/tiny-smollm2 with random weights and this tokenizer (-m tests/server/tiny-chat).

    python3 tests/server/make_tiny_tokenizer.py
"""
import collections
import json
import os
import re

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "tiny-chat")
VOCAB = 640
SPECIAL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
TEXT = """The quick brown fox jumps over the lazy dog. Once upon a time there was a little model that
wanted to talk. It read the books of the library, the letters of the alphabet and the numbers from
one to ten. What is the capital of France? The capital of France is Paris. Hello! How are you today?
I am fine, thank you. Tell me a story about the sea, the sky and the mountains. Why is the sky blue?
Because the air scatters blue light more than red light. Write a poem about cats and dogs."""


def bytes_to_unicode():
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("\xa1"), ord("\xac") + 1)) + list(range(ord("\xae"), ord("\xff") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, [chr(c) for c in cs]))


def main():
    byte_map = bytes_to_unicode()
    alphabet = [byte_map[b] for b in range(256)]
    vocab = {s: i for i, s in enumerate(alphabet)}
    pattern = re.compile(r"""'s|'t|'re|'ve|'m|'ll|'d| ?[A-Za-z]+| ?[0-9]| ?[^\sA-Za-z0-9]+|\s+(?!\S)|\s+""")
    words = collections.Counter("".join(byte_map[b] for b in w.encode()) for w in pattern.findall(TEXT))
    splits = {w: list(w) for w in words}
    merges = []
    while len(vocab) < VOCAB - len(SPECIAL):
        pairs = collections.Counter()
        for w, count in words.items():
            s = splits[w]
            for a, b in zip(s, s[1:]):
                pairs[(a, b)] += count
        if not pairs:
            break
        (a, b), _ = max(pairs.items(), key=lambda kv: (kv[1], kv[0]))
        merges.append(f"{a} {b}")
        vocab[a + b] = len(vocab)
        for w in words:
            s, out, i = splits[w], [], 0
            while i < len(s):
                if i + 1 < len(s) and s[i] == a and s[i + 1] == b:
                    out.append(a + b)
                    i += 2
                else:
                    out.append(s[i])
                    i += 1
            splits[w] = out
    added = []
    for t in SPECIAL:
        added.append({"id": len(vocab), "content": t, "single_word": False, "lstrip": False, "rstrip": False,
                      "normalized": False, "special": True})
        vocab[t] = len(vocab)
    tokenizer = {
        "version": "1.0", "truncation": None, "padding": None, "added_tokens": added, "normalizer": None,
        "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True},
        "post_processor": None,
        "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True},
        "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
                  "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False, "vocab": vocab, "merges": merges},
    }
    template = ("{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n'}}"
                "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}")
    os.makedirs(OUT, exist_ok=True)
    with open(os.path.join(OUT, "tokenizer.json"), "w") as f:
        json.dump(tokenizer, f, ensure_ascii=False)
    with open(os.path.join(OUT, "tokenizer_config.json"), "w") as f:
        json.dump({"bos_token": None, "eos_token": "<|im_end|>", "add_bos_token": False, "chat_template": template}, f, indent=1)
    with open(os.path.join(OUT, "generation_config.json"), "w") as f:
        json.dump({"eos_token_id": vocab["<|im_end|>"], "temperature": 0.7, "top_p": 0.9}, f, indent=1)
    print(f"{len(vocab)} tokens, {len(merges)} merges -> {OUT}")


if __name__ == "__main__":
    main()
