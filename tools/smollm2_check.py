#!/usr/bin/env python3
"""SmolLM2-135M-Instruct from its Q4_1 GGUF, kiln against HF transformers on the same dequantized
weights (issue 6). Run on the GPU machine:

    python3 tools/smollm2_check.py SmolLM2-135M-Instruct.Q4_1.gguf --work /tmp/smol

kiln answers 5 chat prompts from the GGUF (greedy, 64 tokens); tools/gguf-to-hf writes the
dequantized weights as an HF checkpoint, which HF transformers runs in bf16 (the rounding kiln's
GPU prefill applies to the rows it multiplies; its decode reads the Q4_1 blocks, the file's own
values) on the exact prompt ids kiln's tokenizer and chat template produced. Tokens must
match, or where they first differ each side's token must be in the other's top-5. HF in fp32 (on
the bf16-rounded weights, and on the exact dequantized weights against kiln's fp32 CPU backend)
shows which side bf16 rounding moves. Then the natural answers (stopping at the end of turn) on the
GPU and on the CPU backend, with tok/s.
"""
import argparse
import json
import os
import subprocess
import sys

import torch
from safetensors.torch import load_file

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "golden"))
from hf_model import first_difference, greedy_cached, greedy_verdict  # noqa: E402

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
BINARY = os.path.join(ROOT, "build", "bin", "smollm2-135m")
PROMPTS = [
    "What is the capital of France?",
    "Write a haiku about the sea.",
    "List three primary colors.",
    "How many legs does a spider have?",
    "Explain photosynthesis in one sentence.",
]


def kiln(gguf, prompt, backend, extra):
    """prompt is chat text (the chat template applies, and its end-of-turn token stops) or a list
    of token ids (no template, no stop tokens)."""
    given = ["--prompt-ids", ",".join(map(str, prompt))] if isinstance(prompt, list) else ["--chat", prompt]
    cmd = [BINARY, "--gguf", gguf, "--backend", backend, "--temperature", "0", "--output-format", "json"] + given + extra
    return json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("gguf")
    ap.add_argument("--work", default="/tmp/smol")
    ap.add_argument("--tokens", type=int, default=64)
    args = ap.parse_args()
    hf_dir = os.path.join(args.work, "hf")
    subprocess.run([os.path.join(ROOT, "build", "bin", "gguf-to-hf"), args.gguf, hf_dir], check=True)
    from transformers import AutoModelForCausalLM

    # Three HF references: bf16 (HF's own bf16 inference: weights and activations in bf16), fp32
    # compute on the bf16-rounded weights kiln's GPU prefill uses, and fp32 on the exact dequantized
    # weights (kiln's GPU decode and CPU backends compute with those).
    hf_bf16 = AutoModelForCausalLM.from_pretrained(hf_dir, dtype=torch.bfloat16).cuda().eval()
    hf_fp32_bf16w = AutoModelForCausalLM.from_pretrained(hf_dir, dtype=torch.bfloat16).float().cuda().eval()
    hf_fp32 = AutoModelForCausalLM.from_pretrained(hf_dir, dtype=torch.float32).cuda().eval()
    totals = {"cuda~hf_bf16": 0, "cuda~hf_fp32(bf16 w)": 0, "cpu~hf_fp32": 0}
    total = 0
    for q in PROMPTS:
        # The chat run (its natural answer, stopping at the end of turn) gives the prompt ids; the
        # comparison then continues from those ids without stop tokens, so both sides produce
        # exactly --tokens tokens even past the end of the turn.
        chat = kiln(args.gguf, q, "cuda", ["--max-tokens", "64"])["requests"][0]
        ids = chat["prompt_ids"]
        fixed_length = ["--max-tokens", str(args.tokens), "--ignore-eos"]
        ours = kiln(args.gguf, ids, "cuda", fixed_length)["requests"][0]["output_ids"]
        cpu = kiln(args.gguf, ids, "ref", fixed_length)["requests"][0]["output_ids"]
        hf, hf_logits = greedy_cached(hf_bf16, ids, args.tokens)
        hf32b, _ = greedy_cached(hf_fp32_bf16w, ids, args.tokens)
        hf32, _ = greedy_cached(hf_fp32, ids, args.tokens)

        def kiln_logits_at(d):
            dump = os.path.join(args.work, "step.safetensors")
            kiln(args.gguf, ids + hf[:d], "cuda", ["--max-tokens", "1", "--dump-logits", dump])
            return load_file(dump)["logits"][-1]

        d, _, verdict = greedy_verdict(ours, hf, hf_logits, kiln_logits_at)
        pairs = {"cuda~hf_bf16": d, "cuda~hf_fp32(bf16 w)": first_difference(ours, hf32b), "cpu~hf_fp32": first_difference(cpu, hf32)}
        for k, v in pairs.items():
            totals[k] += v
        total += args.tokens
        print(f"{q!r}: kiln cuda vs HF bf16 {d}/{len(hf)} ({verdict}); kiln cuda vs HF fp32 on bf16 weights "
              f"{pairs['cuda~hf_fp32(bf16 w)']}/{args.tokens}; kiln cpu vs HF fp32 {pairs['cpu~hf_fp32']}/{args.tokens}; "
              f"kiln: {chat['text'][:60]!r}", flush=True)
    for k, v in totals.items():
        print(f"greedy tokens equal before the first difference, {k}: {v}/{total}")

    for backend in ("cuda", "cpu", "ref"):
        r = kiln(args.gguf, PROMPTS[0], backend, ["--max-tokens", "128"])
        t = r["timings"]
        print(f"[{backend}] > {PROMPTS[0]}\n{r['requests'][0]['text']}\n"
              f"[{backend}] {r['device']}: {r['counts']['output_tokens']} tokens, decode {t['decode_tok_s']:.1f} tok/s, "
              f"time to first token {t['ttft_ms_mean']:.1f} ms", flush=True)


if __name__ == "__main__":
    main()
