#!/usr/bin/env python3
"""Real-shape check against HF transformers (run on the GPU machine): a random-weight model from a
kiln config (HF from_config, bf16, saved with save_pretrained), HF's greedy continuation of a few
random prompts, and kiln's on the same checkpoint. Tokens must be identical, or where they first
differ each side's token must be in the other's top-5 (vLLM's rule).

    python3 tools/golden/compare_hf.py configs/qwen3-0.6b.yaml build/bin/qwen3-0.6b /tmp/work
    python3 tools/golden/compare_hf.py tests/fixtures/odd-shape/config.json build/bin/odd-shape /tmp/work
"""
import argparse
import gc
import json
import os
import subprocess
import sys
import time

import torch
from safetensors.torch import load_file

sys.path.insert(0, os.path.dirname(__file__))
from hf_model import from_kiln_config, greedy_cached, greedy_verdict, hf_config_dict  # noqa: E402


def kiln(binary, model_dir, ids, new_tokens, dump=None):
    cmd = [binary, "--model", model_dir, "--backend", "cuda", "--prompt-ids", ",".join(map(str, ids)),
           "--max-tokens", str(new_tokens), "--temperature", "0", "--ignore-eos", "--output-format", "json"]
    if dump:
        cmd += ["--dump-logits", dump]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    return json.loads(out)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("config", help="kiln YAML or HF config.json")
    ap.add_argument("binary")
    ap.add_argument("workdir")
    ap.add_argument("--prompts", type=int, default=3)
    ap.add_argument("--new-tokens", type=int, default=32)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()

    if args.config.endswith(".json"):
        cfg = json.load(open(args.config))
    else:
        cfg = hf_config_dict(args.config)
    torch.manual_seed(args.seed)
    t0 = time.time()
    model = from_kiln_config(cfg, torch.bfloat16, "cuda")
    model.save_pretrained(args.workdir)
    print(f"model: {sum(p.numel() for p in model.parameters()) / 1e9:.2f}B params, built and saved in {time.time() - t0:.0f} s",
          flush=True)

    gen = torch.Generator().manual_seed(args.seed + 1)
    lengths = [7, 33, 120][: args.prompts]
    prompts = [torch.randint(3, cfg["vocab_size"], (n,), generator=gen).tolist() for n in lengths]
    hf = []
    for ids in prompts:
        tokens, logits = greedy_cached(model, ids, args.new_tokens)
        hf.append((tokens, torch.stack(logits)))
    del model
    gc.collect()
    torch.cuda.empty_cache()

    failures = 0
    for ids, (hf_tokens, hf_logits) in zip(prompts, hf):
        ours = kiln(args.binary, args.workdir, ids, args.new_tokens)["requests"][0]["output_ids"]

        def kiln_logits_at(d):
            dump = os.path.join(args.workdir, "step_logits.safetensors")
            kiln(args.binary, args.workdir, ids + hf_tokens[:d], 1, dump)
            return load_file(dump)["logits"][-1]

        d, ok, verdict = greedy_verdict(ours, hf_tokens, hf_logits, kiln_logits_at)
        failures += 0 if ok else 1
        print(f"{os.path.basename(args.binary)} prompt of {len(ids)} tokens: {d}/{len(hf_tokens)} greedy tokens equal; "
              f"{verdict} -> {'PASS' if ok else 'FAIL'}", flush=True)
    print(f"{len(prompts) - failures} passed, {failures} failed")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
