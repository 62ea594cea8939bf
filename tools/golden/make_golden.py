#!/usr/bin/env python3
"""Makes the golden fixtures under tests/golden/: for each tiny kiln config, a random-weight HF
transformers model (weights saved in bf16), and for several prompts its fp32 prompt logits and 16
greedy tokens (with the logits of each greedy step, for the GPU tests' top-5 rule).

Needs torch and transformers (the GPU machine has them; so does a venv with the PyPI packages):
    python3 tools/golden/make_golden.py [--only tiny-llama ...]
The references are computed in fp32 on the CPU, so the fixtures do not depend on where this runs.
"""
import argparse
import json
import os
import sys

import torch
from safetensors.torch import save_file

sys.path.insert(0, os.path.dirname(__file__))
from hf_model import build_model, greedy, hf_config_dict, prompt_logits, save_checkpoint, set_expert_layout  # noqa: E402

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))

# (model, seed, per-expert tensors). Every family of the tests, and each DeepSeek option both ways:
# tiny-deepseek-v2 keeps transformers 5's fused expert tensors, tiny-deepseek-v2-lite is rewritten
# into the published checkpoints' per-expert tensors.
MODELS = [
    ("tiny-llama", 11, False),
    ("tiny-qwen3", 12, False),
    ("tiny-smollm2", 13, False),
    ("tiny-deepseek-v2", 14, False),
    ("tiny-deepseek-v2-lite", 15, True),
]
PROMPT_LENGTHS = [1, 5, 45]  # one token, a few, and past 40 (several KV pages)
NEW_TOKENS = 16


def make(name, seed, per_expert):
    cfg = hf_config_dict(os.path.join(ROOT, "configs", f"{name}.yaml"))
    out = os.path.join(ROOT, "tests", "golden", name)
    os.makedirs(out, exist_ok=True)
    model = save_checkpoint(build_model(cfg, seed), out)
    if cfg["model_type"] == "deepseek_v2":
        set_expert_layout(out, fused=not per_expert)

    generator = torch.Generator().manual_seed(seed + 1000)
    tensors, summary = {}, []
    for i, length in enumerate(PROMPT_LENGTHS):
        # Avoid ids 0..2 (bos/eos/pad in the configs) so nothing stops early.
        ids = torch.randint(3, cfg["vocab_size"], (length,), generator=generator).tolist()
        logits = prompt_logits(model, ids)
        tokens, step_logits = greedy(model, ids, NEW_TOKENS)
        tensors[f"prompt_{i}_ids"] = torch.tensor(ids, dtype=torch.int32)
        tensors[f"prompt_{i}_logits"] = logits.contiguous()
        tensors[f"prompt_{i}_greedy"] = torch.tensor(tokens, dtype=torch.int32)
        tensors[f"prompt_{i}_greedy_logits"] = step_logits.contiguous()
        summary.append({"length": length, "greedy": tokens})
    save_file(tensors, os.path.join(out, "golden.safetensors"),
              metadata={"prompts": str(len(PROMPT_LENGTHS)), "new_tokens": str(NEW_TOKENS),
                        "made_by": "tools/golden/make_golden.py", "seed": str(seed)})
    print(name, json.dumps(summary))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--only", nargs="*", help="models to make (default: all)")
    args = parser.parse_args()
    torch.set_num_threads(max(1, os.cpu_count() or 1))
    for name, seed, per_expert in MODELS:
        if not args.only or name in args.only:
            make(name, seed, per_expert)


if __name__ == "__main__":
    main()
