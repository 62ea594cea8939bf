#!/usr/bin/env python3
"""Tensor parallelism on one machine with several GPUs: the same binary, the same random weights,
at 1 GPU and at N GPUs, in one run (DESIGN.md "Performance, as we measure it").

    python3 tools/bench/tensor_parallel.py llama-3.1-8b --ranks 2 --out tp.md
    python3 tools/bench/tensor_parallel.py llama-3.1-8b --ranks 2 --b1-only --kiln-args=--no-pdl

Per rank count: decode ms per step at batch 1 (a 32-token prompt, 128 new tokens, greedy, as
bench.py), at batch 8 and 64 (one --prompts-file of N such requests), and prefill of one 2,048-token
prompt; the floor of a batch-1 step is the bytes one GPU reads per step (its shards, the weights
every rank keeps whole, its share of the routed experts chosen and of the KV cache: the binary's
`decode_bytes_per_step.per_gpu` from a --profile run, which counts the experts) over one GPU's copy
bandwidth. Agreement with one GPU: greedy tokens equal, or where they first differ each side's
token is in the other's top 5 at that position (vLLM's rule); and the prompt logits' largest
difference relative to the largest logit.
"""
import argparse
import json
import os
import shlex
import struct
import subprocess
import sys
import tempfile

import torch

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "tools", "bench"))
sys.path.insert(0, os.path.join(ROOT, "tools", "golden"))
from bench import copy_bandwidth  # noqa: E402
from hf_model import hf_config_dict  # noqa: E402

PROMPT, NEW, PREFILL = 32, 128, 2048


KILN_ARGS = []  # --kiln-args: options every run takes (e.g. --no-pdl, --l2-warm)


def kiln(binary, ranks, extra):
    cmd = [binary, "--random-weights", "1", "--backend", "cuda", "--temperature", "0", "--ignore-eos",
           "--output-format", "json", "--tensor-parallel-size", str(ranks)] + KILN_ARGS + extra
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        raise SystemExit(f"{' '.join(cmd[:12])} ... failed ({r.returncode}):\n{r.stderr[-3000:]}")
    return json.loads(r.stdout)


def logits_of(path):
    with open(path, "rb") as f:
        data = f.read()
    n = struct.unpack("<Q", data[:8])[0]
    head = json.loads(data[8:8 + n])["logits"]
    begin, end = head["data_offsets"]
    return torch.frombuffer(bytearray(data[8 + n + begin:8 + n + end]), dtype=torch.float32).reshape(head["shape"])


def prompt_logits(binary, ranks, ids):
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "logits.safetensors")
        kiln(binary, ranks, ["--prompt-ids", ",".join(map(str, ids)), "--max-tokens", "1", "--dump-logits", path])
        return logits_of(path)


def decode(binary, ranks, ids, batch):
    if batch == 1:
        r = min((kiln(binary, ranks, ["--prompt-ids", ",".join(map(str, ids)), "--max-tokens", str(NEW)])
                 for _ in range(2)), key=lambda r: r["timings"]["decode_ms_per_step"])
        return r
    with tempfile.NamedTemporaryFile("w", suffix=".jsonl", delete=False) as f:
        for i in range(batch):
            f.write(json.dumps({"prompt_ids": [(t + i) % 1000 + 3 for t in ids], "max_tokens": NEW}) + "\n")
    try:
        return kiln(binary, ranks, ["--prompts-file", f.name])
    finally:
        os.unlink(f.name)


def agreement(binary, ranks, ids, base_out, out):
    """'identical', or where the greedy tokens first differ, whether each is in the other's top 5."""
    if base_out == out:
        return f"identical ({len(out)} tokens)"
    k = next(i for i, (a, b) in enumerate(zip(base_out, out)) if a != b)
    prefix = ids + base_out[:k]
    top_base = prompt_logits(binary, 1, prefix)[-1].topk(5).indices.tolist()
    top_tp = prompt_logits(binary, ranks, prefix)[-1].topk(5).indices.tolist()
    ok = out[k] in top_base and base_out[k] in top_tp
    return f"first differ at token {k}: {base_out[k]} vs {out[k]}; top-5 rule {'holds' if ok else 'FAILS'}"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("--ranks", type=int, nargs="+", default=[2])
    ap.add_argument("--bin-dir", default=os.path.join(ROOT, "build", "bin"))
    ap.add_argument("--out", default="tp.md")
    ap.add_argument("--kiln-args", default="", help="options every kiln run takes, e.g. '--kiln-args=--no-pdl' or '--kiln-args=--l2-warm'")
    ap.add_argument("--b1-only", action="store_true", help="batch 1 and agreement only: no b8, b64 or prefill runs")
    args = ap.parse_args()
    KILN_ARGS.extend(shlex.split(args.kiln_args))
    binary = os.path.join(args.bin_dir, args.model)
    vocab = hf_config_dict(os.path.join(ROOT, "configs", args.model + ".yaml"))["vocab_size"]
    gen = torch.Generator().manual_seed(5)
    ids = torch.randint(3, vocab, (PROMPT,), generator=gen).tolist()
    long_ids = torch.randint(3, vocab, (PREFILL,), generator=gen).tolist()
    bw = copy_bandwidth()
    gpus = torch.cuda.device_count()
    lines = [f"{gpus} × {torch.cuda.get_device_name()}; one GPU's copy bandwidth {bw / 1e12:.2f} TB/s (read + write)"
             + (f"; kiln {args.kiln_args}" if args.kiln_args else ""), "",
             "| GPUs | b1 ms/token | bytes/GPU/step (GB) | floor ms | % of floor | b8 ms/step | b64 ms/step | "
             "prefill 2048 (ms) | vs 1 GPU (b1) | agreement with 1 GPU | prompt logits max diff |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    print(lines[0], flush=True)
    base_logits = prompt_logits(binary, 1, ids)
    base = None
    for ranks in [1] + args.ranks:
        r1 = decode(binary, ranks, ids, 1)
        ms = r1["timings"]["decode_ms_per_step"]
        out = r1["requests"][0]["output_ids"]
        prof = kiln(binary, ranks, ["--prompt-ids", ",".join(map(str, ids)), "--max-tokens", str(NEW), "--profile"])
        weights = prof["decode_bytes_per_step"]["per_gpu"]  # what one GPU reads per step
        floor = weights / bw * 1e3
        nan = float("nan")  # --b1-only: the columns not run
        b8 = nan if args.b1_only else decode(binary, ranks, ids, 8)["timings"]["decode_ms_per_step"]
        b64 = nan if args.b1_only else decode(binary, ranks, ids, 64)["timings"]["decode_ms_per_step"]
        prefill_ms = nan
        if not args.b1_only:
            pre = kiln(binary, ranks, ["--prompt-ids", ",".join(map(str, long_ids)), "--max-tokens", "1"])
            prefill_ms = pre["timings"]["prefill_s"] * 1e3
        if base is None:
            base = (ms, out)
            agree, diff, speed = "—", "—", "—"
        else:
            agree = agreement(binary, ranks, ids, base[1], out)
            tp_logits = prompt_logits(binary, ranks, ids)
            diff = f"{((tp_logits - base_logits).abs().max() / base_logits.abs().max()).item():.2e}"
            speed = f"{ms / base[0]:.2f}×"
        line = (f"| {ranks} | {ms:.3f} | {weights / 1e9:.2f} | {floor:.3f} | {100 * floor / ms:.0f}% | {b8:.3f} | "
                f"{b64:.3f} | {prefill_ms:.1f} | {speed} | {agree} | {diff} |")
        lines.append(line)
        print(line, flush=True)
    with open(args.out, "w") as f:
        f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
