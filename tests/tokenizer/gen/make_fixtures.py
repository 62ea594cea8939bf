#!/usr/bin/env python3
"""Builds the tokenizer.json fixtures in tests/tokenizer/fixtures/ and their expected ids.

Each fixture is a small BPE vocabulary trained with HF `tokenizers` on local English text and
the test-vector strings, wired with one model family's pipeline exactly as its published
tokenizer.json is (pre-tokenizer regexes, normalizer, added tokens, post-processor, decoder),
plus the transformers config files kiln reads for BOS/EOS. expected.json holds what HF
tokenizers produces for every test string: ids without and with special tokens, and decodes.
Run at dev time only (CI reads the committed output):

    /root/hfenv/bin/python tests/tokenizer/gen/make_fixtures.py
"""
import json
import os
import sys

from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
sys.path.insert(0, os.path.dirname(__file__))
import test_strings  # noqa: E402

OUT = os.path.join(ROOT, "tests", "tokenizer", "fixtures")

LLAMA3_REGEX = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
                r"|\s*[\r\n]+|\s+(?!\S)|\s+")
QWEN2_REGEX = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
               r"|\s*[\r\n]+|\s+(?!\S)|\s+")
# DeepSeek LLM / V2 (tokenizer.json of deepseek-ai/deepseek-llm-7b-base), written with escapes so
# that no canonical singleton (U+2126, U+212A, U+1FBE, ...) is normalized away in transit.
DEEPSEEK_LETTERS = (
    "\\s?[A-Za-z\u00b5\u00c0-\u00d6\u00d8-\u00f6\u00f8-\u01ba\u01bc-\u01bf\u01c4-\u0293\u0295-\u02af"
    "\u0370-\u0373\u0376\u0377\u037b-\u037d\u037f\u0386\u0388-\u038a\u038c\u038e-\u03a1\u03a3-\u03f5"
    "\u03f7-\u0481\u048a-\u052f\u0531-\u0556\u10a0-\u10c5\u13a0-\u13f5\u13f8-\u13fd\u1c90-\u1cba"
    "\u1cbd-\u1cbf\u1d00-\u1d2b\u1d6b-\u1d77\u1d79-\u1d9a\u1e00-\u1f15\u1f18-\u1f1d\u1f20-\u1f45"
    "\u1f48-\u1f4d\u1f50-\u1f57\u1f59\u1f5b\u1f5d\u1f5f-\u1f7d\u1f80-\u1fb4\u1fb6-\u1fbc\u1fbe"
    "\u1fc2-\u1fc4\u1fc6-\u1fcc\u1fd0-\u1fd3\u1fd6-\u1fdb\u1fe0-\u1fec\u1ff2-\u1ff4\u1ff6-\u1ffc"
    "\u2102\u2107\u210a-\u2113\u2115\u2119-\u211d\u2124\u2126\u2128\u212a-\u212d\u212f-\u2134\u2139"
    "\u213c-\u213f\u2145-\u2149\u214e\u2183\u2184\u2c00-\u2c7b\u2c7e-\u2ce4\u2ceb-\u2cee\u2cf2\u2cf3"
    "\ua640-\ua66d\ua680-\ua69b\ua722-\ua76f\ua771-\ua787\ua78b-\ua78e\uab70-\uabbf\ufb00-\ufb06"
    "\ufb13-\ufb17\uff21-\uff3a\uff41-\uff5a\U00010400-\U0001044f\U000104b0-\U000104d3"
    "\U000104d8-\U000104fb\U00010c80-\U00010cb2\U00010cc0-\U00010cf2\U000118a0-\U000118df"
    "\U0001e900-\U0001e943]+")
DEEPSEEK_SPLITS = [
    "[\r\n]",
    DEEPSEEK_LETTERS,
    "\\s?[!-/:-~\uff01-\uff0f\uff1a-\uff5e\u2018-\u201f\u3000-\u3002]+",
    "\\s+$",
    "[\u4e00-\u9fa5\u0800-\u4e00\uac00-\ud7ff]+",
    "\\p{N}+",
]
DS_BOS = "<\uff5cbegin\u2581of\u2581sentence\uff5c>"
DS_EOS = "<\uff5cend\u2581of\u2581sentence\uff5c>"


def corpus():
    lines = list(test_strings.vector_inputs(ROOT))
    for name in ["GPL-3", "Apache-2.0", "MPL-2.0", "LGPL-2.1"]:
        path = f"/usr/share/common-licenses/{name}"
        lines += open(path, encoding="utf-8").read().splitlines()
    lines += test_strings.EDGE_CASES
    lines += test_strings.random_strings(300, seed=7)
    return lines


def split(regex):
    return pre_tokenizers.Split(pattern=__import__("tokenizers").Regex(regex), behavior="isolated", invert=False)


def byte_level_tokenizer(pre, normalizer=None, vocab_size=1200, specials=()):
    tok = Tokenizer(models.BPE())
    if normalizer is not None:
        tok.normalizer = normalizer
    tok.pre_tokenizer = pre
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=list(specials), show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(corpus(), trainer)
    return tok


def write_fixture(name, tok, configs, extra_strings=()):
    folder = os.path.join(OUT, name)
    os.makedirs(folder, exist_ok=True)
    tok.save(os.path.join(folder, "tokenizer.json"))
    for file_name, content in configs.items():
        with open(os.path.join(folder, file_name), "w", encoding="utf-8") as f:
            json.dump(content, f, indent=2, ensure_ascii=False)
            f.write("\n")
    # Reload so that expectations come from the file exactly as committed.
    tok = Tokenizer.from_file(os.path.join(folder, "tokenizer.json"))
    strings = test_strings.vector_inputs(ROOT) + test_strings.EDGE_CASES + list(extra_strings) + \
        test_strings.random_strings(150)
    cases = []
    for text in strings:
        ids = tok.encode(text, add_special_tokens=False).ids
        cases.append({
            "text": text,
            "ids": ids,
            "ids_with_special": tok.encode(text, add_special_tokens=True).ids,
            "decoded": tok.decode(ids, skip_special_tokens=False),
            "decoded_skip_special": tok.decode(ids, skip_special_tokens=True),
        })
    # HF's split_special_tokens / encode_special_tokens: special-token text stays plain text.
    tok.encode_special_tokens = True
    for case in cases:
        case["ids_special_as_text"] = tok.encode(case["text"], add_special_tokens=False).ids
    with open(os.path.join(folder, "expected.json"), "w", encoding="utf-8") as f:
        json.dump({"generator": "tests/tokenizer/gen/make_fixtures.py",
                   "tokenizers_version": __import__("tokenizers").__version__, "cases": cases},
                  f, indent=1, ensure_ascii=False)
        f.write("\n")
    print(f"{name}: {tok.get_vocab_size()} tokens, {len(cases)} cases")


def add_tokens(tok, tokens):
    from tokenizers import AddedToken
    for content, special, extra in tokens:
        token = AddedToken(content, special=special, normalized=extra.get("normalized", not special),
                           lstrip=extra.get("lstrip", False), rstrip=extra.get("rstrip", False),
                           single_word=extra.get("single_word", False))
        if special:
            tok.add_special_tokens([token])
        else:
            tok.add_tokens([token])


def make_gpt2():
    tok = byte_level_tokenizer(pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True),
                               specials=["<|endoftext|>"])
    # Flags HF honours on added tokens: lstrip/rstrip swallow whitespace, single_word only matches
    # outside words, normalized=false tokens match before normalization.
    add_tokens(tok, [
        ("<mask>", True, {"lstrip": True}),
        ("[R]", True, {"rstrip": True}),
        ("cat", False, {"single_word": True}),
        ("<ctrl>", False, {"normalized": False}),
    ])
    extra = ["a <mask> b  <mask>c", "x[R]   y [R]\n z", "cat concat cats the cat. cat_x", "<ctrl><ctrl>x",
             "<|endoftext|>Hello<|endoftext|>", "<mask[R]>"]
    write_fixture("gpt2", tok, {"config.json": {"bos_token_id": 0, "eos_token_id": 0}}, extra)


def make_llama3():
    specials = ["<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>", "<|end_header_id|>",
                "<|eom_id|>", "<|eot_id|>", "<|reserved_special_token_0|>"]
    tok = byte_level_tokenizer(pre_tokenizers.Sequence([
        split(LLAMA3_REGEX), pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)]),
        specials=specials)
    data = json.loads(tok.to_str())
    # ignore_merges: a word that is itself a token is emitted whole. Add tokens that merges cannot
    # build, so the flag changes ids (" zzqx" below).
    # Special tokens follow the vocabulary, as in Llama 3 (ids 128000+): drop them from the
    # trained vocabulary and renumber it densely (merges refer to token text, not ids).
    vocab = data["model"]["vocab"]
    for added in data["added_tokens"]:
        del vocab[added["content"]]
    vocab = {text: i for i, (text, _) in enumerate(sorted(vocab.items(), key=lambda item: item[1]))}
    for word in ["\u0120zzqx", "zzqx"]:
        vocab[word] = len(vocab)
    data["model"]["vocab"] = vocab
    base = len(vocab)
    for i, added in enumerate(data["added_tokens"]):
        added["id"] = base + i
    data["model"]["ignore_merges"] = True
    data["post_processor"] = {
        "type": "Sequence", "processors": [
            {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": False, "use_regex": True},
            {"type": "TemplateProcessing",
             "single": [{"SpecialToken": {"id": "<|begin_of_text|>", "type_id": 0}},
                        {"Sequence": {"id": "A", "type_id": 0}}],
             "pair": [{"SpecialToken": {"id": "<|begin_of_text|>", "type_id": 0}},
                      {"Sequence": {"id": "A", "type_id": 0}},
                      {"SpecialToken": {"id": "<|begin_of_text|>", "type_id": 1}},
                      {"Sequence": {"id": "B", "type_id": 1}}],
             "special_tokens": {"<|begin_of_text|>": {"id": "<|begin_of_text|>", "ids": [base],
                                                      "tokens": ["<|begin_of_text|>"]}}}]}
    tok = Tokenizer.from_str(json.dumps(data))
    ids = {t: base + i for i, t in enumerate(specials)}
    configs = {
        "tokenizer_config.json": {"bos_token": "<|begin_of_text|>", "eos_token": "<|eot_id|>",
                                  "tokenizer_class": "PreTrainedTokenizerFast"},
        "generation_config.json": {"bos_token_id": ids["<|begin_of_text|>"],
                                   "eos_token_id": [ids["<|end_of_text|>"], ids["<|eom_id|>"], ids["<|eot_id|>"]]},
        "config.json": {"bos_token_id": ids["<|begin_of_text|>"], "eos_token_id": ids["<|end_of_text|>"]},
    }
    extra = [" zzqx zzqx", "zzqxzzqx", "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>",
             "<|eot_id|<|eot_id|>>"]
    write_fixture("llama3", tok, configs, extra)


def make_qwen3():
    specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    tok = byte_level_tokenizer(pre_tokenizers.Sequence([
        split(QWEN2_REGEX), pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)]),
        normalizer=normalizers.NFC(), specials=specials)
    add_tokens(tok, [("<think>", False, {"normalized": False}), ("</think>", False, {"normalized": False})])
    ids = {t: tok.token_to_id(t) for t in specials}
    configs = {
        "tokenizer_config.json": {"bos_token": None, "eos_token": "<|im_end|>", "add_bos_token": False,
                                  "tokenizer_class": "Qwen2Tokenizer"},
        "generation_config.json": {"bos_token_id": ids["<|endoftext|>"],
                                   "eos_token_id": [ids["<|im_end|>"], ids["<|endoftext|>"]]},
        "config.json": {"bos_token_id": ids["<|endoftext|>"], "eos_token_id": ids["<|im_end|>"]},
    }
    extra = ["<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n",
             "e\u0301<think>e\u0301</think>", "\u212b\u2126\u212a"]
    write_fixture("qwen3", tok, configs, extra)


def make_deepseek():
    specials = [DS_BOS, DS_EOS]
    tok = byte_level_tokenizer(pre_tokenizers.Sequence(
        [split(p) for p in DEEPSEEK_SPLITS] + [pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)]),
        normalizer=normalizers.Sequence([]), specials=specials)
    data = json.loads(tok.to_str())
    bos = tok.token_to_id(DS_BOS)
    data["post_processor"] = {
        "type": "TemplateProcessing",
        "single": [{"SpecialToken": {"id": DS_BOS, "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}],
        "pair": [{"SpecialToken": {"id": DS_BOS, "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}},
                 {"SpecialToken": {"id": DS_BOS, "type_id": 1}}, {"Sequence": {"id": "B", "type_id": 1}}],
        "special_tokens": {DS_BOS: {"id": DS_BOS, "ids": [bos], "tokens": [DS_BOS]}}}
    tok = Tokenizer.from_str(json.dumps(data))
    configs = {
        "tokenizer_config.json": {"add_bos_token": True, "add_eos_token": False,
                                  "bos_token": {"__type": "AddedToken", "content": DS_BOS, "lstrip": False,
                                                "normalized": True, "rstrip": False, "single_word": False},
                                  "eos_token": {"__type": "AddedToken", "content": DS_EOS, "lstrip": False,
                                                "normalized": True, "rstrip": False, "single_word": False},
                                  "tokenizer_class": "LlamaTokenizerFast"},
        "generation_config.json": {"bos_token_id": bos, "eos_token_id": tok.token_to_id(DS_EOS)},
    }
    extra = [DS_BOS + "You are kind.\n\nUser: Hi\n\nAssistant:", "\u1f7d\u2126\u212a\u1fbe x\u03a9K",
             "abc   \n  ", "A\uff01\uff1f\u3001\u3002 \u2018q\u2019"]
    write_fixture("deepseek", tok, configs, extra)


def make_smollm():
    specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    tok = byte_level_tokenizer(pre_tokenizers.Sequence([
        pre_tokenizers.Digits(individual_digits=True),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)]), specials=specials)
    ids = {t: tok.token_to_id(t) for t in specials}
    configs = {
        "tokenizer_config.json": {"bos_token": "<|im_start|>", "eos_token": "<|im_end|>",
                                  "tokenizer_class": "GPT2Tokenizer"},
        "generation_config.json": {"bos_token_id": ids["<|im_start|>"], "eos_token_id": ids["<|im_end|>"]},
    }
    write_fixture("smollm2", tok, configs, ["123456 7.89", "x1y22z333"])


def make_llama2_json():
    """SentencePiece-style BPE in tokenizer.json (Llama 2's HF file): Prepend/Replace normalizer,
    no pre-tokenizer, byte fallback, Replace/ByteFallback/Fuse/Strip decoder."""
    tok = Tokenizer(models.BPE(unk_token="<unk>", byte_fallback=True, fuse_unk=True))
    tok.normalizer = normalizers.Sequence([normalizers.Prepend("\u2581"), normalizers.Replace(" ", "\u2581")])
    tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="\u2581", prepend_scheme="never", split=True)
    bytes_ = [f"<0x{b:02X}>" for b in range(256)]
    trainer = trainers.BpeTrainer(vocab_size=900, special_tokens=["<unk>", "<s>", "</s>"] + bytes_,
                                  show_progress=False)
    # Train on Latin-1 only, so that every other character takes the byte-fallback path.
    # (limit_alphabet would do that too, but breaks frequency ties differently from run to run.)
    tok.train_from_iterator(["".join(c for c in line if ord(c) < 0x100) for line in corpus()], trainer)
    data = json.loads(tok.to_str())
    # Byte tokens are ordinary vocabulary entries in Llama 2, not added tokens.
    data["added_tokens"] = [a for a in data["added_tokens"] if a["content"] in ("<unk>", "<s>", "</s>")]
    data["pre_tokenizer"] = None
    data["decoder"] = {"type": "Sequence", "decoders": [
        {"type": "Replace", "pattern": {"String": "\u2581"}, "content": " "},
        {"type": "ByteFallback"}, {"type": "Fuse"}, {"type": "Strip", "content": " ", "start": 1, "stop": 0}]}
    data["post_processor"] = {
        "type": "TemplateProcessing",
        "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}],
        "pair": [{"SpecialToken": {"id": "<s>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}},
                 {"SpecialToken": {"id": "<s>", "type_id": 1}}, {"Sequence": {"id": "B", "type_id": 1}}],
        "special_tokens": {"<s>": {"id": "<s>", "ids": [1], "tokens": ["<s>"]}}}
    tok = Tokenizer.from_str(json.dumps(data))
    configs = {"tokenizer_config.json": {"add_bos_token": True, "bos_token": "<s>", "eos_token": "</s>",
                                         "tokenizer_class": "LlamaTokenizerFast"}}
    write_fixture("llama2_json", tok, configs, ["<s>Hello</s> world", "  two spaces", "\u00e9\u00e8 \U0001f600"])


if __name__ == "__main__":
    make_gpt2()
    make_llama3()
    make_qwen3()
    make_deepseek()
    make_smollm()
    make_llama2_json()
