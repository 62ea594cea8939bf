"""Test strings shared by the fixture and cross-check generators: hand-picked edge cases plus a
seeded random mix of scripts, emoji, combining marks, digits and whitespace runs."""
import random

VECTORS_INP = "tests/tokenizer/vectors/ggml-vocab-gpt-2.gguf.inp"


def vector_inputs(root):
    text = open(f"{root}/{VECTORS_INP}", encoding="utf-8").read()
    parts = text.split("\n__ggml_vocab_test__\n")
    assert parts[-1] == ""
    return parts[:-1]


EDGE_CASES = [
    "",
    " ",
    "Hello world",
    " Hello World!",
    "I'm sure it's 'S or 'ſ, he'LL say: 'Ve 'RE 'D 'M 'T",
    "1234567890 12 345 6789",
    "3.14159 and ١٢٣ and ½ and Ⅻ",
    "line one\nline two\r\nline three\n\n\n  indented\ttab",
    "trailing spaces   ",
    "   leading spaces",
    "\u00a0non-breaking\u3000ideographic\u2028line-sep\u0085nel",
    "caf\u00e9 vs cafe\u0301 vs \u212b vs A\u030a vs \u1e9b\u0323",
    "\u1100\u1161\u11a8 \ud55c\uad6d\uc5b4 \u1112\u1161\u11ab",
    "\u0915\u094d\u0937 \u0939\u093f\u0928\u094d\u0926\u0940 \u0e20\u0e32\u0e29\u0e32\u0e44\u0e17\u0e22",
    "\u1f7d \u2126 \u212a \u1fbe \u1fd3 \u1fdb \u03a9 K",
    "\u4f60\u597d\uff0c\u4e16\u754c\uff01\u3053\u3093\u306b\u3061\u306f\u3002\uff21\uff22\uff23",
    "\U0001f680 \U0001f636\u200d\U0001f32b\ufe0f \U0001f44d\U0001f3fd \U0001f1fa\U0001f1f8",
    "def f(x):\n    return x**2  # comment\n",
    "<html><body class=\"x\">a&amp;b</body></html>",
    "!!!!!! ???? ... --- ___ ''' \"\"\"",
    "\u00c4pfel \u00f8 \u00f6 \u00fa \u00ff \u00f5 \u00f7",
    "\u0410\u0411\u0412 \u0430\u0431\u0432 \u0532\u0561\u0580\u0587",
    "x\u0300\u0301\u0302\u0303 combining marks",
    "tab\t\t\tand\u000bvertical\u000cfeed",
]

POOLS = [
    "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ",
    "0123456789",
    " .,;:!?'\"-()[]{}<>/\\|@#$%^&*_+=~`",
    "\u00e0\u00e1\u00e2\u00e4\u00e7\u00e8\u00e9\u00ea\u00f1\u00f6\u00f8\u00fc\u00df\u00c0\u00c9\u00d1\u00d8\u00a1\u00bf\u00b0\u00b5",
    "\u03b1\u03b2\u03b3\u03b4\u0391\u0392\u1f00\u1f7d\u1fbe\u2126\u212a\u0430\u0431\u0432\u0416\u0429",
    "\u4e00\u4e8c\u4e09\u4f60\u597d\u4e16\u754c\u6c34\u706b\u3042\u3044\u3046\u30a2\u30a4\uac00\ub098\ub2e4",
    "\u1100\u1161\u11a8\u1112\u1175",
    "\U0001f600\U0001f680\U0001f44d\U0001f3fd\u2764\ufe0f\u200d\U0001f525\U0001f1fa\U0001f1f8",
    "\u0300\u0301\u0302\u0303\u0308\u0323\u0327\u0345",
    "\u0627\u0644\u0639\u0631\u0628\u064a\u0629\u05e2\u05d1\u05e8\u05d9\u05ea",
    "\u0915\u093e\u093f\u094d\u0937\u0e01\u0e32\u0e23",
    "\uff01\uff1f\uff0c\u3002\u3001\u2018\u2019\u201c\u201d\u2026\u2014",
    "\u00bd\u2153\u2167\u0661\u0662\u0969",
]
WHITESPACE = [" ", "  ", "   ", "\t", "\n", "\n\n", "\r\n", " \n ", "\u00a0", "\u3000", "\u2028"]


def random_strings(count, seed=20240521):
    rng = random.Random(seed)
    out = []
    for _ in range(count):
        parts = []
        for _ in range(rng.randint(1, 12)):
            if rng.random() < 0.25:
                parts.append(rng.choice(WHITESPACE))
            else:
                pool = rng.choice(POOLS)
                parts.append("".join(rng.choice(pool) for _ in range(rng.randint(1, 8))))
        out.append("".join(parts))
    return out
