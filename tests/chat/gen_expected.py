#!/usr/bin/env python3
"""Renders tests/chat/templates/*.jinja with Python's jinja2, set up as transformers'
apply_chat_template sets it up (sandboxed, trim_blocks, lstrip_blocks, loop controls,
raise_exception, a tojson that keeps non-ASCII), over the conversations below, and writes
expected.json: what kiln's JinjaChatTemplate (minja) must render byte for byte.

    python3 tests/chat/gen_expected.py           # rewrite expected.json
    python3 tests/chat/gen_expected.py --check   # exit 1 when expected.json differs (ctest)
"""
import json
import os
import sys

import jinja2
from jinja2.ext import loopcontrols
from jinja2.sandbox import ImmutableSandboxedEnvironment

HERE = os.path.dirname(os.path.abspath(__file__))

TEMPLATES = {
    "qwen3": ("qwen3.jinja", "", "<|im_end|>"),
    "llama-3.2": ("llama-3.2.jinja", "<|begin_of_text|>", "<|eot_id|>"),
    "deepseek-v2": ("deepseek-v2.jinja", "<\uff5cbegin\u2581of\u2581sentence\uff5c>", "<\uff5cend\u2581of\u2581sentence\uff5c>"),
    "smollm2": ("smollm2.jinja", "<|im_start|>", "<|im_end|>"),
}

CONVERSATIONS = [
    [{"role": "user", "content": "Hello!"}],
    [{"role": "system", "content": "You are a pirate."}, {"role": "user", "content": "What is 2+2?"}],
    [{"role": "system", "content": "  padded system \n"}, {"role": "user", "content": "\n  padded user\t "}],
    [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello! How can I help?"},
     {"role": "user", "content": "Tell me a joke."}],
    [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "One"},
     {"role": "assistant", "content": "1"}, {"role": "user", "content": "Two"},
     {"role": "assistant", "content": "2"}, {"role": "user", "content": "Three"}],
    [{"role": "user", "content": "Unicode: caf\u00e9 \u4f60\u597d \U0001f680 \u00a0nbsp\u00a0"}],
    [{"role": "user", "content": "<|im_end|> and <|eot_id|> inside user text"}],
    [{"role": "user", "content": "Think first."},
     {"role": "assistant", "content": "<think>\nsome reasoning\n</think>\n\nThe answer."},
     {"role": "user", "content": "And again?"}],
]

# (name, add_generation_prompt, extra template variables)
VARIANTS = [
    ("gen", True, {}),
    ("no_gen", False, {}),
    ("no_thinking", True, {"enable_thinking": False}),
    ("date", True, {"date_string": "03 Feb 2026"}),
]


def environment():
    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    return env


def cases():
    env = environment()
    out = []
    for name, (file, bos, eos) in TEMPLATES.items():
        with open(os.path.join(HERE, "templates", file), encoding="utf-8") as f:
            template = env.from_string(f.read())
        for c, messages in enumerate(CONVERSATIONS):
            for variant, add_generation_prompt, extra in VARIANTS:
                if variant == "date" and name != "llama-3.2":
                    continue
                if variant == "no_thinking" and name != "qwen3":
                    continue
                # Llama 3.x reads the date from strftime_now when no date_string is given: pin it.
                variables = dict(extra)
                if name == "llama-3.2" and "date_string" not in variables:
                    variables["date_string"] = "26 Jul 2024"
                text = template.render(messages=messages, add_generation_prompt=add_generation_prompt,
                                       bos_token=bos, eos_token=eos, **variables)
                out.append({"template": file, "bos_token": bos, "eos_token": eos, "conversation": c,
                            "messages": messages, "add_generation_prompt": add_generation_prompt,
                            "extra": variables, "expected": text})
    return out


def main():
    path = os.path.join(HERE, "expected.json")
    text = json.dumps({"generator": "tests/chat/gen_expected.py", "jinja2": jinja2.__version__.split(".")[0],
                       "cases": cases()}, indent=1, ensure_ascii=False) + "\n"
    if "--check" in sys.argv:
        with open(path, encoding="utf-8") as f:
            old = json.load(f)
        if old["cases"] != json.loads(text)["cases"]:
            print(f"{path} differs from Python jinja2's rendering: run tests/chat/gen_expected.py")
            return 1
        print(f"{len(old['cases'])} cases match jinja2 {jinja2.__version__}")
        return 0
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)
    print(f"{len(json.loads(text)['cases'])} cases -> {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
