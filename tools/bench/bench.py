#!/usr/bin/env python3
"""Decode benchmark on the GPU machine: kiln against its floor and HF transformers, same GPU, same
run (DESIGN.md "Performance, as we measure it").

    python3 tools/bench/bench.py llama-3.2-1b qwen3-0.6b --out bench.md

For each model: kiln (build/bin/<model> --random-weights, batch 1, a 32-token prompt, 128 new
tokens, greedy) reports ms per decode step and the bytes a decode step reads (weights + KV); the
floor is those bytes over the device-to-device copy bandwidth measured here (bytes read + written);
HF transformers (from_config, bf16, default attention, no compile) runs the same shape.

Peers, when given (bench/README.md says how they are brought to the GPU machine): --gpt-fast DIR
(gpt-fast's model.py: peer_gpt_fast.py) and --llama-cpp DIR (llama-bench on a GGUF of the same
shapes: peer_llama_cpp.py), each measured in its own process in the same run, so that a failing
peer costs its column only ("—", with the reason printed) and gives its GPU memory back.
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
BENCH = os.path.dirname(os.path.abspath(__file__))


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
        best["decode_ops"] = prof.get("decode_ops")  # the per-op path's profile, when kiln reports it
    return best


def run_kiln_batch(model, ids, batch, bin_dir, extra_args=(), profile=False):
    """ms per decode step with `batch` such requests in one --prompts-file (each its own prompt), best
    of two runs; with `profile`, also the bytes a step read (weights + KV cache) from a --profile run
    (MoE models count the distinct experts read only then): (ms, bytes or None)."""
    with tempfile.NamedTemporaryFile("w", suffix=".jsonl", delete=False) as f:
        for i in range(batch):
            f.write(json.dumps({"prompt_ids": [(t + 7 * i) % 1000 + 3 for t in ids], "max_tokens": NEW}) + "\n")
    cmd = [os.path.join(bin_dir, model), "--random-weights", "1", "--backend", "cuda", "--temperature", "0",
           "--ignore-eos", "--output-format", "json", "--prompts-file", f.name, *extra_args]

    def run(extra):
        return json.loads(subprocess.run(cmd + extra, check=True, capture_output=True, text=True).stdout)

    try:
        ms = min(run([])["timings"]["decode_ms_per_step"] for _ in range(2))
        step_bytes = run(["--profile"])["decode_bytes_per_step"]["total"] if profile else None
    finally:
        os.unlink(f.name)
    return ms, step_bytes


def batch_roofline_ms(step_bytes, token_weight_bytes, batch, bw, rate):
    """A batched decode step's roofline: max(bytes read / copy bandwidth, FLOPs / bf16 matmul rate),
    the FLOPs 2 × the parameters a token multiplies (a bf16 batch-1 step's weight bytes / 2: MoE
    models' active ones) × batch. Attention's FLOPs are left out: at these contexts (32 + 128
    tokens) under 1% of the dense models' and ~3% of DeepSeek-V2's absorbed MLA."""
    return 1e3 * max(step_bytes / bw, token_weight_bytes * batch / rate)


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


def run_peer(script, args, timeout):
    """One peer's CLI with --json in its own process: (result dict, None) or (None, why not)."""
    cmd = [sys.executable, os.path.join(BENCH, script), *args, "--json"]
    t = time.perf_counter()
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return None, f"timed out after {timeout} s"
    print(f"  ({script}: {time.perf_counter() - t:.0f} s)", flush=True)
    lines = p.stdout.strip().splitlines()
    if p.returncode != 0 or not lines:
        err = (p.stderr or p.stdout).strip().splitlines()  # a traceback's last line names the error
        return None, f"exit {p.returncode}: " + (err[-1] if err else "no output")
    r = json.loads(lines[-1])
    if "unsupported" in r:
        return None, "not supported: " + r["unsupported"]
    return r, None


def peer_cells(model, ids, args, quants):
    """The peer columns of one model row: ({column: ms per token or None}, [why each None is missing])."""
    cells, notes = {}, []
    if args.gpt_fast:
        r, why = run_peer("peer_gpt_fast.py", [model, "--gpt-fast", args.gpt_fast,
                                               "--prompt-ids", ",".join(map(str, ids)), "--new-tokens", str(NEW)],
                          args.peer_timeout)
        cells["gpt-fast"] = r and r["ms_per_token"]
        notes += [f"{model}: gpt-fast: {why}"] if why else []
    if args.llama_cpp:
        r, why = run_peer("peer_llama_cpp.py", [model, "--llama-cpp", args.llama_cpp, "--quant", ",".join(quants)]
                          + (["--work", args.peer_work] if args.peer_work else []), args.peer_timeout)
        notes += [f"{model}: llama.cpp: {why}"] if why else []
        for q in ["bf16", *quants]:
            res = (r or {}).get(q, {})
            cells[f"llama.cpp {q}"] = res.get("ms_per_token")
            notes += [f"{model}: llama.cpp {q}: {res['error']}"] if "error" in res else []
    for note in notes:
        print("  " + note, flush=True)
    return cells, notes


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
                    help="also decode this many requests at once (comma list, e.g. 8,64,256): ms per step and "
                         "× its roofline (batch_roofline_ms)")
    ap.add_argument("--batch-bin-dir",
                    help="binaries the --batches runs use, named as the models (e.g. builds of build.max_batch "
                         "256; default: --bin-dir)")
    ap.add_argument("--gpt-fast", default=os.environ.get("KILN_GPT_FAST"),
                    help="directory with gpt-fast's model.py: a gpt-fast column (default $KILN_GPT_FAST)")
    ap.add_argument("--llama-cpp", default=os.environ.get("KILN_LLAMA_CPP"),
                    help="llama.cpp with bin/llama-bench and gguf-py/: a llama.cpp bf16 column "
                         "(default $KILN_LLAMA_CPP)")
    ap.add_argument("--llama-cpp-quant", default="",
                    help="also llama.cpp on these llama-quantize types (comma list, e.g. Q4_0,Q8_0): a column each")
    ap.add_argument("--peer-work", help="where llama.cpp's GGUF files are written (default: the temp dir)")
    ap.add_argument("--peer-timeout", type=int, default=600, help="seconds one peer may take on one model")
    ap.add_argument("--plot", help="also draw ms/token per model (kiln, floor, peers) into this PNG")
    args = ap.parse_args()
    quants = [q for q in args.llama_cpp_quant.split(",") if q]
    peer_cols = (["gpt-fast"] if args.gpt_fast else []) + ([f"llama.cpp {q}" for q in ["bf16", *quants]]
                                                           if args.llama_cpp else [])
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
             + "".join(f" b{b} ms/step (× roofline) |" + (f" baseline b{b} |" if args.baseline_bin_dir else "")
                     for b in batches)
             + "".join(f" {c} ms/token |" for c in peer_cols),
             "|---|---|---|---|---|---|---|" + ("---|---|" if args.baseline_bin_dir else "")
             + "---|" * (len(batches) * (2 if args.baseline_bin_dir else 1)) + "---|" * len(peer_cols)]
    lines.insert(1, f"kiln: {args.bin_dir} {args.kiln_args}".rstrip())
    if batches:
        lines.insert(2, f"batches: {args.batch_bin_dir or args.bin_dir}; roofline = max(bytes a step / copy "
                        "bandwidth, 2 × a token's parameters × batch / matmul rate), attention's FLOPs left out")
    if args.baseline_bin_dir:
        lines.insert(2 + bool(batches), f"baseline: {args.baseline_bin_dir} {args.baseline_args or ''}".rstrip())
    print(lines[0], flush=True)
    gen = torch.Generator().manual_seed(5)
    if args.llama_cpp:
        lines.insert(lines.index(""), "llama.cpp: llama-bench tg128 after a 32-token context "
                                      "(-p 0 -n 128 -d 32 -ngl 99), random bf16 weights in a GGUF of the model's "
                                      "shapes; 1000 / avg t/s")
    stages, ops, notes, plot_rows = [], [], [], []
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
            b_ms, b_bytes = run_kiln_batch(m, ids, b, args.batch_bin_dir or args.bin_dir, kiln_args, profile=True)
            roof = batch_roofline_ms(b_bytes, r["decode_bytes_per_step"]["weights"], b, bw, rate)
            line += f" {b_ms:.3f} ({b_ms / roof:.2f}×) |"
            if args.baseline_bin_dir:
                line += f" {run_kiln_batch(m, ids, b, args.baseline_bin_dir, base_args)[0]:.3f} |"
        cells, why = peer_cells(m, ids, args, quants) if peer_cols else ({}, [])
        notes += why
        line += "".join(" — |" if cells[c] is None else f" {cells[c]:.3f} |" for c in peer_cols)
        lines.append(line)
        print(line, flush=True)
        plot_rows.append((m, {"kiln": ms, "floor": floor, **({"baseline": base} if args.baseline_bin_dir else {}),
                              **{c: v for c, v in cells.items() if v is not None}}))
        if r.get("decode_ops"):
            ops.append(ops_line(m, r["decode_ops"]))
        if r.get("decode_stages"):
            stages.append(f"- {m}: " + ", ".join(
                f"{st['stage']} {st['ms_per_step']:.3f} ms ({st['wait_ms_per_step']:.3f} waiting, {st['gb_per_s']:.0f} GB/s)"
                for st in r["decode_stages"]))
        # Written after every model: a run stopped by its time limit still leaves the rows it measured.
        write_report(args.out, lines, stages, ops, notes)
    if stages:
        print("\n".join(stages), flush=True)
    if ops:
        print("\n".join(ops), flush=True)
    if args.plot:
        from bench_plot import plot
        plot(plot_rows, args.plot, lines[0])


def ops_line(label, decode_ops):
    """One line of kiln's per-op decode profile (`--profile`'s decode_ops): ms per step, bytes, GB/s."""
    return f"- {label}: " + ", ".join(
        f"{o['op']} {o['ms_per_step']:.3f} ms ({o['bytes_per_step'] / 1e6:.1f} MB, {o['gb_per_s']:.0f} GB/s)"
        for o in decode_ops)


def write_report(path, lines, stages, ops, notes):
    """The table, then the whole-step stages, kiln's per-op profile and why any peer cell is empty."""
    blocks = []
    if stages:
        blocks += ["", "Whole-step kernel, per stage family (ms per step, of which waiting for the stage before; "
                       "GB/s):"] + stages
    if ops:
        blocks += ["", "Decode per op (kiln --profile; ms per step, bytes read, GB/s):"] + ops
    if notes:
        blocks += ["", "Peers not measured (—):"] + [f"- {n}" for n in notes]
    with open(path, "w") as f:
        f.write("\n".join(lines + blocks) + "\n")


if __name__ == "__main__":
    main()
