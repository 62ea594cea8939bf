#!/usr/bin/env python3
"""Writes tests/tokenizer/fixtures/nfc_cases.json: strings and their NFC per Python's unicodedata,
covering every code point with a canonical decomposition (composed and decomposed), Hangul jamo
sequences and seeded random runs of bases and combining marks in scrambled order. Dev time only:

    /root/hfenv/bin/python tests/tokenizer/gen/gen_nfc_cases.py
"""
import json
import os
import random
import unicodedata

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))


def main():
    rng = random.Random(1234)
    decomposable = [chr(cp) for cp in range(0x110000)
                    if not 0xD800 <= cp <= 0xDFFF and unicodedata.decomposition(chr(cp))
                    and not unicodedata.decomposition(chr(cp)).startswith("<")]
    marks = [chr(cp) for cp in range(0x300, 0x370)] + ["\u0345", "\u05b0", "\u093c", "\u0e38", "\u302a", "\U0001d165"]
    bases = list("aeiouAEIOUnNcCsSzZyY") + ["\u03b1", "\u03c9", "\u0438", "\u1100", "\uac00"]
    inputs = []
    for i in range(0, len(decomposable), 40):
        chunk = "".join(decomposable[i:i + 40])
        inputs.append(chunk)
        inputs.append(unicodedata.normalize("NFD", chunk))
    inputs += ["\u1100\u1161", "\u1100\u1161\u11a8", "\uac00\u11a8", "\u1100\u1161\u11a8\u11a8", "\u11a8\uac00",
               "\u1112\u1161\u11ab\u1100\u1173\u11af", "\uac01\u11a8"]
    for _ in range(400):
        s = "".join(rng.choice(bases) + "".join(rng.choice(marks) for _ in range(rng.randint(0, 4)))
                    for _ in range(rng.randint(1, 6)))
        inputs.append(s)
    cases = [[s, unicodedata.normalize("NFC", s)] for s in inputs]
    path = os.path.join(ROOT, "tests", "tokenizer", "fixtures", "nfc_cases.json")
    with open(path, "w", encoding="utf-8") as f:
        json.dump({"generator": "tests/tokenizer/gen/gen_nfc_cases.py", "unicode": unicodedata.unidata_version,
                   "cases": cases}, f, ensure_ascii=False, indent=0)
        f.write("\n")
    print(f"{len(cases)} cases -> {path}")


if __name__ == "__main__":
    main()
