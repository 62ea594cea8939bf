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
import sys
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


def run_kiln(model, ids, bin_dir, profile=True):
    cmd = [os.path.join(bin_dir, model), "--random-weights", "1", "--backend", "cuda", "--prompt-ids",
           ",".join(map(str, ids)), "--max-tokens", str(NEW), "--temperature", "0", "--ignore-eos",
           "--output-format", "json"]

    def run(extra):
        return json.loads(subprocess.run(cmd + extra, check=True, capture_output=True, text=True).stdout)

    best = min((run([]) for _ in range(2)), key=lambda r: r["timings"]["decode_ms_per_step"])
    # The bytes a step reads come from a --profile run (MoE models count their routed experts only
    # then); the timing from runs without it.
    if profile:
        best["decode_bytes_per_step"] = run(["--profile"])["decode_bytes_per_step"]
    return best


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
    args = ap.parse_args()
    bw = copy_bandwidth()
    rate = matmul_rate()
    gpu = torch.cuda.get_device_name()
    lines = [f"GPU: {gpu}; copy bandwidth {bw / 1e12:.2f} TB/s (read + write); bf16 matmul {rate / 1e12:.0f} TFLOP/s",
             "",
             "| model | kiln ms/token | floor ms (bytes/step) | % of bandwidth | kiln prefill 32 tok (ms) | HF ms/token | kiln vs HF |"
             + (" baseline ms/token | change |" if args.baseline_bin_dir else ""),
             "|---|---|---|---|---|---|---|" + ("---|---|" if args.baseline_bin_dir else "")]
    print(lines[0], flush=True)
    gen = torch.Generator().manual_seed(5)
    for m in args.models:
        vocab = hf_config_dict(os.path.join(ROOT, "configs", m + ".yaml"))["vocab_size"]
        ids = torch.randint(3, vocab, (PROMPT,), generator=gen).tolist()
        r = run_kiln(m, ids, args.bin_dir)
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
            base = run_kiln(m, ids, args.baseline_bin_dir, profile=False)["timings"]["decode_ms_per_step"]
            line += f" {base:.3f} | {100 * (ms - base) / base:+.1f}% |"
        lines.append(line)
        print(line, flush=True)
    with open(args.out, "w") as f:
        f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
