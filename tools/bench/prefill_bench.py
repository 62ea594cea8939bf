#!/usr/bin/env python3
"""Prefill benchmark on the GPU machine (issue 16's columns): one prompt of N tokens, kiln against
the matmul rate, HF transformers (attn_implementation="sdpa") and llama.cpp (llama-bench -p N),
all on the same GPU in the same run.

    python3 tools/bench/prefill_bench.py llama-3.2-1b llama-3.1-8b deepseek-v2-lite \
        --tokens 512,2048,8192 [--bin-dir build/bin] [--llama-cpp DIR] [--no-hf] [--out FILE]

kiln: `<bin> --random-weights 1 --prompts-file <one request: N random ids, max_tokens 1>`,
`prefill_s` from `--output-format json` (the wall time of the steps that carried prompt tokens: the prompt is cut
into chunks of the build's max_batched_tokens, and the first token is sampled), the better of two
processes. A prompt longer than the binary's context (build.max_context, or `--ctx-size`) is
skipped; a config of the same model built with a longer context goes in as `name=config.yaml`
beside its binary (tools/kiln-build prints where).

FLOPs of a prompt of N tokens: 2 × non-embedding parameters × N (MoE: the routed experts a token
uses, plus the shared ones and the router) + causal attention, 2 × (d_qk + d_v) × heads × N(N+1)/2
per layer (DeepSeek-V2 counted as the model card writes it: K and V expanded from the latent, head
dims 192 and 128) + the LM head for the last token only. % of the matmul rate = FLOPs / time over
the bf16 rate measured at the start (8192³ products, bench.py's matmul_rate).

HF: `model(ids, logits_to_keep=1)` under torch.no_grad, bf16, the best of three after one warm-up.
llama.cpp: `llama-bench -p N -n 0 -fa 1 -b 2048 -ub 2048 -r 3` on a bf16 GGUF of the same shapes (peer_llama_cpp.py;
the families its writer knows), ms = N / avg_ts.
"""
import argparse
import gc
import json
import os
import random
import subprocess
import sys
import tempfile
import time

import torch
import yaml

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
BENCH = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, BENCH)
sys.path.insert(0, os.path.join(ROOT, "tools", "golden"))
from bench import matmul_rate  # noqa: E402  (bench.py's definition of the rate)
from hf_model import from_kiln_config, hf_config_dict  # noqa: E402


def linear_params(c):
    """Non-embedding parameters one token multiplies by, per the HF config dict `c` (MoE: the
    experts it is routed to, the shared experts and the router; norms left out)."""
    h, layers = c["hidden_size"], c["num_hidden_layers"]
    heads = c["num_attention_heads"]
    if c["model_type"] == "deepseek_v2":
        qk = c["qk_nope_head_dim"] + c["qk_rope_head_dim"]
        q = h * heads * qk if not c.get("q_lora_rank") else h * c["q_lora_rank"] + c["q_lora_rank"] * heads * qk
        kv = h * (c["kv_lora_rank"] + c["qk_rope_head_dim"]) + c["kv_lora_rank"] * heads * (
            c["qk_nope_head_dim"] + c["v_head_dim"])
        attn = q + kv + heads * c["v_head_dim"] * h
        dense_mlp = 3 * h * c["intermediate_size"]
        moe_mlp = (3 * h * c["moe_intermediate_size"] * (c["num_experts_per_tok"] + c["n_shared_experts"])
                   + h * c["n_routed_experts"])
        dense = c["first_k_dense_replace"]
        return layers * attn + dense * dense_mlp + (layers - dense) * moe_mlp
    d = c.get("head_dim") or h // heads
    kv_heads = c["num_key_value_heads"]
    attn = h * heads * d + 2 * h * kv_heads * d + heads * d * h
    return layers * (attn + 3 * h * c["intermediate_size"])


def attention_flops(c, n):
    """Causal attention of an n-token prompt: QKᵀ and PV over n(n+1)/2 pairs, every head and layer."""
    heads = c["num_attention_heads"]
    if c["model_type"] == "deepseek_v2":
        d_qk, d_v = c["qk_nope_head_dim"] + c["qk_rope_head_dim"], c["v_head_dim"]
    else:
        d_qk = d_v = c.get("head_dim") or c["hidden_size"] // heads
    return 2 * (d_qk + d_v) * heads * c["num_hidden_layers"] * n * (n + 1) / 2


def prefill_flops(c, n):
    return 2 * linear_params(c) * n + attention_flops(c, n) + 2 * c["hidden_size"] * c["vocab_size"]


def prompt_ids(n, vocab, seed=11):
    rng = random.Random(seed)
    return [rng.randrange(3, min(vocab, 30000)) for _ in range(n)]


def run_kiln(binary, ids, runs=2):
    """The best prefill_s (seconds) of `runs` processes, and the number of prefill steps. The prompt
    goes in a --prompts-file (32k ids are past what one command line may hold)."""
    with tempfile.NamedTemporaryFile("w", suffix=".jsonl", delete=False) as f:
        f.write(json.dumps({"prompt_ids": ids, "max_tokens": 1}) + "\n")
    cmd = [binary, "--random-weights", "1", "--backend", "cuda", "--prompts-file", f.name, "--temperature", "0",
           "--ignore-eos", "--output-format", "json", "--no-progress"]
    best = None
    try:
        for _ in range(runs):
            r = json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout)
            t = r["timings"]
            if best is None or t["prefill_s"] < best[0]:
                best = (t["prefill_s"], r["counts"]["prefill_steps"])
    finally:
        os.unlink(f.name)
    return best


@torch.no_grad()
def run_hf(cfg, lengths):
    """HF transformers (sdpa attention, bf16): {n: seconds or why not} for each prompt length."""
    torch.manual_seed(0)
    model = from_kiln_config(cfg, torch.bfloat16, "cuda", attn_implementation="sdpa")
    out = {}
    for n in lengths:
        x = torch.tensor([prompt_ids(n, cfg["vocab_size"])], device="cuda")
        try:
            times = []
            for i in range(4):
                torch.cuda.synchronize()
                t = time.perf_counter()
                model(x, logits_to_keep=1)
                torch.cuda.synchronize()
                if i > 0:  # the first is warm-up
                    times.append(time.perf_counter() - t)
            out[n] = min(times)
        except torch.OutOfMemoryError:
            out[n] = "out of memory"
        gc.collect()
        torch.cuda.empty_cache()
    del model
    gc.collect()
    torch.cuda.empty_cache()
    return out


def run_llama_cpp(config, lengths, args):
    """llama-bench -p N in peer_llama_cpp.py's own process, on the shapes of kiln config `config`:
    {n: seconds or why not}."""
    cmd = [sys.executable, os.path.join(BENCH, "peer_llama_cpp.py"), "--llama-cpp", args.llama_cpp, config,
           "--prefill", ",".join(map(str, lengths)), "--json"]
    if args.peer_work:
        cmd += ["--work", args.peer_work]
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=args.peer_timeout)
    except subprocess.TimeoutExpired:
        return {n: f"timed out after {args.peer_timeout} s" for n in lengths}
    lines = p.stdout.strip().splitlines()
    if p.returncode != 0 or not lines:
        err = (p.stderr or p.stdout).strip().splitlines()
        why = f"exit {p.returncode}: " + (err[-1] if err else "no output")
        return {n: why for n in lengths}
    r = json.loads(lines[-1])
    if "unsupported" in r:
        return {n: "not supported: " + r["unsupported"] for n in lengths}
    return {int(n): v / 1e3 if isinstance(v, (int, float)) else v for n, v in r["prefill_ms"].items()}


def max_context(config_path):
    with open(config_path) as f:
        return yaml.safe_load(f)["build"]["max_context"]


def cell(v, kiln_s=None):
    """A peer's ms, and kiln's speed-up over it; or why there is none."""
    if isinstance(v, str):
        return "—", v
    text = f"{v * 1e3:.1f}"
    return (text + (f" ({v / kiln_s:.2f}×)" if kiln_s else "")), None


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("models", nargs="+", help="model names (configs/NAME.yaml), or NAME=CONFIG.yaml")
    ap.add_argument("--tokens", default="512,2048,8192,32768", help="prompt lengths")
    ap.add_argument("--bin-dir", default=os.path.join(ROOT, "build", "bin"))
    ap.add_argument("--no-hf", action="store_true")
    ap.add_argument("--llama-cpp", default=os.environ.get("KILN_LLAMA_CPP"), help="llama.cpp (peer_llama_cpp.py)")
    ap.add_argument("--peer-work", help="where llama.cpp's GGUF files are written (default: a temp dir)")
    ap.add_argument("--peer-timeout", type=int, default=900)
    ap.add_argument("--out", help="append the table (markdown) to this file")
    args = ap.parse_args()
    lengths = [int(t) for t in args.tokens.split(",")]
    for n in lengths:
        if n < 1:
            ap.error(f"--tokens: {n} is not a prompt length (expected positive integers)")

    rate = matmul_rate()
    gpu = torch.cuda.get_device_name()

    def emit(lines):  # printed, and appended to --out, model by model (a long run keeps what it finished)
        print("\n".join(lines), flush=True)
        if args.out:
            with open(args.out, "a") as f:
                f.write("\n".join(lines) + "\n")

    emit([f"GPU: {gpu}; bf16 matmul rate {rate / 1e12:.0f} TFLOP/s (8192³)", "",
          "| model | tokens | kiln ms (steps) | TFLOP | % of matmul rate | HF sdpa ms (kiln ×) | "
          "llama.cpp ms (kiln ×) |", "|---|---|---|---|---|---|---|"])
    notes = []
    for spec in args.models:
        name, _, config = spec.partition("=")
        config = config or os.path.join(ROOT, "configs", name + ".yaml")
        cfg = hf_config_dict(config)
        context = max_context(config)
        runnable = [n for n in lengths if n + 1 <= context]  # the prompt and its one new token
        for n in lengths:
            if n not in runnable:
                notes.append(f"{name}: {n} tokens skipped, the build's context is {context}")
        kiln = {}
        for n in runnable:
            kiln[n] = run_kiln(os.path.join(args.bin_dir, name), prompt_ids(n, cfg["vocab_size"]))
            print(f"{name} {n}: kiln {kiln[n][0] * 1e3:.2f} ms in {kiln[n][1]} steps", flush=True)
        hf = {} if args.no_hf else run_hf(cfg, runnable)
        llama = run_llama_cpp(config, runnable, args) if args.llama_cpp else {}
        rows = []
        for n in runnable:
            s, steps = kiln[n]
            flops = prefill_flops(cfg, n)
            hf_text, why = cell(hf.get(n, "not run"), s)
            if why and not args.no_hf:
                notes.append(f"{name} {n} HF: {why}")
            ll_text, why = cell(llama.get(n, "not run"), s)
            if why and args.llama_cpp:
                notes.append(f"{name} {n} llama.cpp: {why}")
            rows.append(f"| {name} | {n} | {s * 1e3:.2f} ({steps}) | {flops / 1e12:.2f} | "
                        f"{100 * flops / s / rate:.0f}% | {hf_text} | {ll_text} |")
        emit(rows)
    emit([""] + [f"- {n}" for n in notes])


if __name__ == "__main__":
    main()
