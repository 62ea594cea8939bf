#!/usr/bin/env python3
"""Decode benchmark on the GPU machine: kiln against its floor and HF transformers, same GPU, same
run (DESIGN.md "Performance, as we measure it").

    python3 tools/bench/bench.py llama-3.2-1b qwen3-0.6b --out bench.md

For each model: kiln (build/bin/<model> --random-weights, batch 1, a 32-token prompt, 128 new
tokens, greedy) reports ms per decode step and the bytes a decode step reads (weights + KV); the
floor is those bytes over the device-to-device copy bandwidth measured here (bytes read + written);
HF transformers (from_config, bf16, default attention, no compile) runs the same shape.
"""
import argparse
import gc
import json
import os
import subprocess
import shlex
import sys
import tempfile
import time

import torch

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "tools", "golden"))
from hf_model import from_kiln_config, hf_config_dict  # noqa: E402

PROMPT, NEW = 32, 128


def copy_bandwidth():
    """Device-to-device copy of 2 GiB: (bytes read + bytes written) / time, median of 20."""
    a = torch.randn(1 << 29, device="cuda")
    b = torch.empty_like(a)
    for _ in range(3):
        b.copy_(a)
    times = []
    for _ in range(20):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        b.copy_(a)
        e.record()
        torch.cuda.synchronize()
        times.append(s.elapsed_time(e) / 1e3)
    times.sort()
    return 2 * a.numel() * 4 / times[len(times) // 2]


def matmul_rate():
    a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    for _ in range(3):
        a @ b
    torch.cuda.synchronize()
    t = time.perf_counter()
    for _ in range(10):
        a @ b
    torch.cuda.synchronize()
    return 10 * 2 * 8192 ** 3 / (time.perf_counter() - t)


def run_kiln(model, ids, bin_dir, profile=True, extra_args=()):
    cmd = [os.path.join(bin_dir, model), "--random-weights", "1", "--backend", "cuda", "--prompt-ids",
           ",".join(map(str, ids)), "--max-tokens", str(NEW), "--temperature", "0", "--ignore-eos",
           "--output-format", "json", *extra_args]

    def run(extra):
        return json.loads(subprocess.run(cmd + extra, check=True, capture_output=True, text=True).stdout)

    best = min((run([]) for _ in range(2)), key=lambda r: r["timings"]["decode_ms_per_step"])
    # The bytes a step reads come from a --profile run (MoE models count their routed experts only
    # then); the timing from runs without it.
    if profile:
        prof = run(["--profile"])
        best["decode_bytes_per_step"] = prof["decode_bytes_per_step"]
        best["decode_stages"] = prof.get("decode_stages")  # the whole-step kernel's, when it ran
    return best


def run_kiln_batch(model, ids, batch, bin_dir, extra_args=()):
    """ms per decode step with `batch` such requests in one --prompts-file (each its own prompt)."""
    with tempfile.NamedTemporaryFile("w", suffix=".jsonl", delete=False) as f:
        for i in range(batch):
            f.write(json.dumps({"prompt_ids": [(t + 7 * i) % 1000 + 3 for t in ids], "max_tokens": NEW}) + "\n")
    cmd = [os.path.join(bin_dir, model), "--random-weights", "1", "--backend", "cuda", "--temperature", "0",
           "--ignore-eos", "--output-format", "json", "--prompts-file", f.name, *extra_args]
    try:
        runs = [json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout) for _ in range(2)]
    finally:
        os.unlink(f.name)
    return min(r["timings"]["decode_ms_per_step"] for r in runs)


@torch.no_grad()
def run_hf(model_name, ids):
    torch.manual_seed(0)
    cfg = hf_config_dict(os.path.join(ROOT, "configs", model_name + ".yaml"))
    model = from_kiln_config(cfg, torch.bfloat16, "cuda")
    x = torch.tensor([ids], device="cuda")

    def generate(n):
        torch.cuda.synchronize()
        t = time.perf_counter()
        model.generate(x, max_new_tokens=n, min_new_tokens=n, do_sample=False, pad_token_id=0)
        torch.cuda.synchronize()
        return time.perf_counter() - t

    generate(8)  # warm-up
    first = min(generate(1) for _ in range(3))
    full = min(generate(NEW) for _ in range(2))
    del model
    gc.collect()
    torch.cuda.empty_cache()
    return (full - first) / (NEW - 1), first


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("models", nargs="+")
    ap.add_argument("--out", default="bench.md")
    ap.add_argument("--no-hf", action="store_true")
    ap.add_argument("--bin-dir", default=os.path.join(ROOT, "build", "bin"), help="the kiln binaries to measure")
    ap.add_argument("--baseline-bin-dir", help="binaries of another build, measured in the same run for comparison")
    ap.add_argument("--kiln-args", default="", help="options of kiln's runs, e.g. '--megakernel'")
    ap.add_argument("--baseline-args",
                    help="options of baseline runs, e.g. '' (with --bin-dir's binaries when no --baseline-bin-dir "
                         "is given: the same build measured two ways)")
    ap.add_argument("--batches", default="",
                    help="also decode this many requests at once (comma list, e.g. 8,64): ms per step")
    args = ap.parse_args()
    kiln_args = shlex.split(args.kiln_args)
    base_args = shlex.split(args.baseline_args or "")
    if args.baseline_args is not None and not args.baseline_bin_dir:
        args.baseline_bin_dir = args.bin_dir
    batches = [int(b) for b in args.batches.split(",") if b]
    bw = copy_bandwidth()
    rate = matmul_rate()
    gpu = torch.cuda.get_device_name()
    lines = [f"GPU: {gpu}; copy bandwidth {bw / 1e12:.2f} TB/s (read + write); bf16 matmul {rate / 1e12:.0f} TFLOP/s",
             "",
             "| model | kiln ms/token | floor ms (bytes/step) | % of bandwidth | kiln prefill 32 tok (ms) | HF ms/token | kiln vs HF |"
             + (" baseline ms/token | change |" if args.baseline_bin_dir else "")
             + "".join(f" b{b} ms/step |" + (f" baseline b{b} |" if args.baseline_bin_dir else "") for b in batches),
             "|---|---|---|---|---|---|---|" + ("---|---|" if args.baseline_bin_dir else "")
             + "---|" * (len(batches) * (2 if args.baseline_bin_dir else 1))]
    lines.insert(1, f"kiln: {args.bin_dir} {args.kiln_args}".rstrip())
    if args.baseline_bin_dir:
        lines.insert(2, f"baseline: {args.baseline_bin_dir} {args.baseline_args or ''}".rstrip())
    print(lines[0], flush=True)
    gen = torch.Generator().manual_seed(5)
    stages = []
    for m in args.models:
        vocab = hf_config_dict(os.path.join(ROOT, "configs", m + ".yaml"))["vocab_size"]
        ids = torch.randint(3, vocab, (PROMPT,), generator=gen).tolist()
        r = run_kiln(m, ids, args.bin_dir, extra_args=kiln_args)
        ms = r["timings"]["decode_ms_per_step"]
        step_bytes = r["decode_bytes_per_step"]["total"]
        floor = step_bytes / bw * 1e3
        prefill = r["timings"]["prefill_s"] * 1e3
        hf_ms, _ = (None, None) if args.no_hf else run_hf(m, ids)
        hf_text = "—" if hf_ms is None else f"{hf_ms * 1e3:.2f}"
        ratio = "—" if hf_ms is None else f"{hf_ms * 1e3 / ms:.1f}×"
        line = (f"| {m} | {ms:.3f} | {floor:.3f} ({step_bytes / 1e9:.2f} GB) | {100 * floor / ms:.0f}% | "
                f"{prefill:.2f} | {hf_text} | {ratio} |")
        if args.baseline_bin_dir:
            base = run_kiln(m, ids, args.baseline_bin_dir, profile=False, extra_args=base_args)
            base = base["timings"]["decode_ms_per_step"]
            line += f" {base:.3f} | {100 * (ms - base) / base:+.1f}% |"
        for b in batches:
            line += f" {run_kiln_batch(m, ids, b, args.bin_dir, kiln_args):.3f} |"
            if args.baseline_bin_dir:
                line += f" {run_kiln_batch(m, ids, b, args.baseline_bin_dir, base_args):.3f} |"
        lines.append(line)
        print(line, flush=True)
        if r.get("decode_stages"):
            stages.append(f"- {m}: " + ", ".join(
                f"{st['stage']} {st['ms_per_step']:.3f} ms ({st['wait_ms_per_step']:.3f} waiting, {st['gb_per_s']:.0f} GB/s)"
                for st in r["decode_stages"]))
    if stages:
        lines += ["", "Whole-step kernel, per stage family (ms per step, of which waiting for the stage before; GB/s):"]
        lines += stages
        print("\n".join(stages), flush=True)
    with open(args.out, "w") as f:
        f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
