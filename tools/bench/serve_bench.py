#!/usr/bin/env python3
"""Serving benchmark on the GPU machine (issue 14): `<model> serve` under tools/load/kiln_load.py
at 1, 8 and 64 concurrent streaming clients, next to HF transformers' continuous batching
(`generate_batch` where the installed transformers has it) and its batched `generate` (with
per-step timestamps, for TTFT and inter-token latency), on the same GPU in the same run. Random
weights of the model's own config (the GPU machine has no model downloads); prompts are random
token ids; every request generates exactly --max-tokens tokens (ignore_eos / min_new_tokens).

One command (builds the binaries if needed, writes a markdown section and the raw JSON):

    python3 tools/bench/serve_bench.py --models qwen3-0.6b llama-3.1-8b --out bench/serve-bench

then paste bench/serve-bench/RESULTS-section.md into bench/RESULTS.md.
"""
import argparse
import gc
import json
import os
import re
import subprocess
import sys
import time

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "tools", "golden"))
LOAD = os.path.join(ROOT, "tools", "load", "kiln_load.py")


def build(model):
    binary = os.path.join(ROOT, "build", "bin", model)
    if not os.path.exists(binary):
        subprocess.run([os.path.join(ROOT, "tools", "kiln-build"), os.path.join(ROOT, "configs", model + ".yaml")], check=True)
    return binary


def kiln_runs(binary, args):
    proc = subprocess.Popen([binary, "serve", "--backend", "cuda", "--random-weights", "1", "--port", "0",
                             "--max-waiting", "4096"], stderr=subprocess.PIPE, text=True)
    port = None
    log = []
    while port is None:
        line = proc.stderr.readline()
        if not line:
            raise RuntimeError("kiln serve exited: " + "".join(log))
        log.append(line)
        m = re.search(r"listening on http://[\d.]+:(\d+)", line)
        port = int(m.group(1)) if m else None
    while not any("ready:" in x for x in log):
        log.append(proc.stderr.readline())
    print("".join(log), end="")
    results = {}
    try:
        for c in args.concurrency:
            requests = max(args.min_requests, args.requests_per_client * c)
            out = os.path.join(args.out, f"kiln-{os.path.basename(binary)}-c{c}.json")
            cmd = [sys.executable, LOAD, "--url", f"http://127.0.0.1:{port}", "--requests", str(requests), "--concurrency",
                   str(c), "--max-tokens", str(args.max_tokens), "--ignore-eos", "--temperature", "0",
                   "--prompt-ids-len", str(args.prompt_len), "--prompt-ids-vocab", "1000", "--json", out,
                   "--png", out.replace(".json", ".png")]
            # One warm-up pass (CUDA graphs, allocator) at this concurrency, then the measured one.
            warm = cmd[:-4]  # without --json / --png
            warm[warm.index("--requests") + 1] = str(2 * c)
            subprocess.run(warm, check=True, capture_output=True)
            s = json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout)
            results[c] = s
            print(f"kiln c={c}: {s['output_tokens_per_s']:.0f} tok/s, TTFT p50 {s['ttft']['p50_ms']:.1f} ms, "
                  f"ITL p50 {s['inter_token']['p50_ms']:.2f} p99 {s['inter_token']['p99_ms']:.2f} ms, "
                  f"{s['errors']} errors, {s['lost']} lost", flush=True)
    finally:
        proc.terminate()
        proc.wait(120)
    return results


def hf_runs(model_name, args):
    import torch
    from hf_model import from_kiln_config, hf_config_dict
    from transformers import GenerationConfig, StoppingCriteria, StoppingCriteriaList

    torch.manual_seed(0)
    cfg = hf_config_dict(os.path.join(ROOT, "configs", model_name + ".yaml"))
    model = from_kiln_config(cfg, torch.bfloat16, "cuda")
    results = {}

    class StepClock(StoppingCriteria):
        def __init__(self):
            self.times = []

        def __call__(self, input_ids, scores, **kw):
            torch.cuda.synchronize()
            self.times.append(time.perf_counter())
            return torch.zeros(input_ids.shape[0], dtype=torch.bool, device=input_ids.device)

    def prompts(n, seed):
        g = torch.Generator().manual_seed(seed)
        return [torch.randint(0, 1000, (args.prompt_len,), generator=g).tolist() for _ in range(n)]

    for c in args.concurrency:
        requests = max(args.min_requests, args.requests_per_client * c)
        row = {}
        # Batched generate, c requests at a time: TTFT = first step, ITL = later steps.
        ttft, itl, tokens = [], [], 0
        t0 = time.perf_counter()
        for start in range(0, requests, c):
            batch = torch.tensor(prompts(min(c, requests - start), start), device="cuda")
            clock = StepClock()
            torch.cuda.synchronize()
            t = time.perf_counter()
            out = model.generate(batch, max_new_tokens=args.max_tokens, min_new_tokens=args.max_tokens, do_sample=False,
                                 pad_token_id=0, stopping_criteria=StoppingCriteriaList([clock]))
            tokens += (out.shape[1] - batch.shape[1]) * batch.shape[0]
            ttft += [clock.times[0] - t] * batch.shape[0]
            itl += [b - a for a, b in zip(clock.times, clock.times[1:])] * batch.shape[0]
        wall = time.perf_counter() - t0
        itl.sort()
        ttft.sort()
        pick = lambda v, p: 1e3 * v[min(len(v) - 1, int(p * (len(v) - 1) + 0.5))] if v else float("nan")  # noqa: E731
        row["generate"] = {"output_tokens_per_s": tokens / wall, "ttft_p50_ms": pick(ttft, 0.5), "ttft_p99_ms": pick(ttft, 0.99),
                           "itl_p50_ms": pick(itl, 0.5), "itl_p99_ms": pick(itl, 0.99)}
        # Continuous batching, where this transformers has it: throughput only (no per-token clock).
        if hasattr(model, "generate_batch"):
            gen = GenerationConfig(max_new_tokens=args.max_tokens, min_new_tokens=args.max_tokens, do_sample=False,
                                   eos_token_id=-1, pad_token_id=0, max_batch_tokens=c * (args.prompt_len + args.max_tokens))
            inputs = prompts(requests, 12345)
            model.generate_batch(inputs=inputs[:min(4, requests)], generation_config=gen)  # warm-up
            torch.cuda.synchronize()
            t = time.perf_counter()
            outs = model.generate_batch(inputs=inputs, generation_config=gen)
            torch.cuda.synchronize()
            wall = time.perf_counter() - t
            n = sum(len(getattr(o, "generated_tokens", [])) for o in (outs.values() if isinstance(outs, dict) else outs))
            row["generate_batch"] = {"output_tokens_per_s": (n or requests * args.max_tokens) / wall, "wall_s": wall}
        results[c] = row
        print(f"HF c={c}: {row}", flush=True)
    del model
    gc.collect()
    torch.cuda.empty_cache()
    return results


def markdown(all_results, args, device):
    lines = [f"## {time.strftime('%Y-%m-%d')} — serving: kiln serve vs HF transformers ({device})", "",
             f"Random weights, {args.prompt_len}-token prompts, {args.max_tokens} output tokens each (ignore_eos), greedy; "
             f"closed loop: each client sends its next request when the last one ends; "
             f"`python3 tools/bench/serve_bench.py --models {' '.join(args.models)}`. kiln: streaming over HTTP "
             f"(tools/load/kiln_load.py); HF: in-process, no HTTP.", "",
             "| model | clients | kiln tok/s | kiln TTFT p50 / p99 ms | kiln ITL p50 / p99 ms | HF generate tok/s | HF TTFT p50 / p99 ms | HF ITL p50 / p99 ms | HF generate_batch tok/s |",
             "|---|---|---|---|---|---|---|---|---|"]
    for model, (kiln, hf) in all_results.items():
        for c in args.concurrency:
            k = kiln.get(c, {})
            h = hf.get(c, {}) if hf else {}
            g, b = h.get("generate", {}), h.get("generate_batch")
            lines.append(
                f"| {model} | {c} | {k.get('output_tokens_per_s', 0):.0f} | {k.get('ttft', {}).get('p50_ms', 0):.1f} / "
                f"{k.get('ttft', {}).get('p99_ms', 0):.1f} | {k.get('inter_token', {}).get('p50_ms', 0):.2f} / "
                f"{k.get('inter_token', {}).get('p99_ms', 0):.2f} | {g.get('output_tokens_per_s', 0):.0f} | "
                f"{g.get('ttft_p50_ms', 0):.1f} / {g.get('ttft_p99_ms', 0):.1f} | {g.get('itl_p50_ms', 0):.2f} / "
                f"{g.get('itl_p99_ms', 0):.2f} | {'%.0f' % b['output_tokens_per_s'] if b else 'n/a (not in this transformers)'} |")
    return "\n".join(lines) + "\n"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--models", nargs="+", default=["qwen3-0.6b", "llama-3.1-8b"])
    ap.add_argument("--concurrency", nargs="+", type=int, default=[1, 8, 64])
    ap.add_argument("--requests-per-client", type=int, default=4)
    ap.add_argument("--min-requests", type=int, default=16)
    ap.add_argument("--prompt-len", type=int, default=128)
    ap.add_argument("--max-tokens", type=int, default=128)
    ap.add_argument("--no-hf", action="store_true")
    ap.add_argument("--out", default="bench/serve-bench")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    device = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"], capture_output=True,
                            text=True).stdout.strip().splitlines()[0]
    all_results = {}
    for model in args.models:
        kiln = kiln_runs(build(model), args)
        hf = None if args.no_hf else hf_runs(model, args)
        all_results[model] = (kiln, hf)
        with open(os.path.join(args.out, "results.json"), "w") as f:
            json.dump({m: {"kiln": k, "hf": h} for m, (k, h) in all_results.items()}, f, indent=1)
    text = markdown(all_results, args, device)
    with open(os.path.join(args.out, "RESULTS-section.md"), "w") as f:
        f.write(text)
    print(text)


if __name__ == "__main__":
    main()
