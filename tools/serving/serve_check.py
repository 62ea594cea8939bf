#!/usr/bin/env python3
"""Serving check on the GPU machine (issue 4), on random weights:

1. 256 requests, prompt and output lengths drawn from 100..1024, run together through a KV pool too
   small for all of them at once (preemptions must happen), then each alone (--max-batch 1):
   greedy outputs must be identical, request by request.
2. The same with a shared 512-token prefix, against the same lengths without one: the prefix cache
   must show hits and a shorter prefill time.

    python3 tools/serving/serve_check.py build/bin/qwen3-0.6b --kv-pages 2048 --work /tmp/serve
"""
import argparse
import json
import os
import random
import subprocess
import sys


def write_requests(path, requests):
    with open(path, "w") as f:
        for r in requests:
            f.write(json.dumps(r) + "\n")


def run(binary, requests_path, out_path, extra):
    cmd = [binary, "--random-weights", "1", "--backend", "cuda", "--prompts-file", requests_path, "--output", out_path,
           "--output-format", "json", "--no-progress"] + extra
    summary = json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout)
    with open(out_path) as f:
        results = [json.loads(line) for line in f]
    return summary, results


def describe(name, s):
    c, t = s["counts"], s["timings"]
    return (f"{name}: {c['prompts']} requests, {c['prompt_tokens']} prompt tokens ({c['cached_prompt_tokens']} from the "
            f"prefix cache), {c['output_tokens']} output tokens, {c['preemptions']} preemptions, {c['steps']} steps; "
            f"prefill {t['prefill_s']:.2f} s, decode {t['decode_s']:.2f} s, wall {t['wall_s']:.2f} s, "
            f"decode {t['decode_tok_s']:.0f} tok/s, TTFT p50 {t['ttft_ms_p50']:.0f} ms")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("binary")
    ap.add_argument("--kv-pages", type=int, default=2048)
    ap.add_argument("--vocab", type=int, default=151936)
    ap.add_argument("--work", default="/tmp/serve")
    ap.add_argument("--requests", type=int, default=256)
    args = ap.parse_args()
    os.makedirs(args.work, exist_ok=True)
    rng = random.Random(7)
    report = []

    # 1. Preemption: batched vs alone.
    reqs = [{"id": i, "prompt_ids": [rng.randrange(3, args.vocab) for _ in range(rng.randint(100, 1024))],
             "max_tokens": rng.randint(100, 1024), "temperature": 0, "ignore_eos": True}
            for i in range(args.requests)]
    path = os.path.join(args.work, "requests.jsonl")
    write_requests(path, reqs)
    batched, out_b = run(args.binary, path, os.path.join(args.work, "batched.jsonl"), ["--kv-pages", str(args.kv_pages)])
    alone, out_a = run(args.binary, path, os.path.join(args.work, "alone.jsonl"),
                       ["--kv-pages", str(args.kv_pages), "--max-batch", "1"])
    report.append(describe(f"together ({args.kv_pages} KV pages)", batched))
    report.append(describe("each alone (--max-batch 1)", alone))
    finished = sum(1 for r in out_b if "output_ids" in r and len(r["output_ids"]) == reqs[r["line"] - 1]["max_tokens"])
    same, diffs = 0, []
    for b, a in zip(out_b, out_a):
        if b.get("output_ids") == a.get("output_ids"):
            same += 1
        else:
            ob, oa = b.get("output_ids", []), a.get("output_ids", [])
            d = next((i for i, (x, y) in enumerate(zip(ob, oa)) if x != y), min(len(ob), len(oa)))
            diffs.append((b["line"], d, b.get("preemptions", 0)))
    report.append(f"finished with all their tokens: {finished}/{len(reqs)}; identical to running alone: {same}/{len(reqs)}")
    for line, d, pre in diffs[:10]:
        report.append(f"  request on line {line}: first differs at output token {d} (preempted {pre} times)")

    # 2. Prefix caching: a shared 512-token prefix against the same lengths without one.
    prefix = [rng.randrange(3, args.vocab) for _ in range(512)]
    shared, distinct = [], []
    for i in range(args.requests):
        suffix = [rng.randrange(3, args.vocab) for _ in range(rng.randint(100, 512))]
        n = rng.randint(16, 64)
        shared.append({"id": i, "prompt_ids": prefix + suffix, "max_tokens": n, "temperature": 0, "ignore_eos": True})
        distinct.append({"id": i, "prompt_ids": [rng.randrange(3, args.vocab) for _ in range(512)] + suffix,
                         "max_tokens": n, "temperature": 0, "ignore_eos": True})
    write_requests(os.path.join(args.work, "shared.jsonl"), shared)
    write_requests(os.path.join(args.work, "distinct.jsonl"), distinct)
    s_shared, _ = run(args.binary, os.path.join(args.work, "shared.jsonl"), os.path.join(args.work, "shared_out.jsonl"), [])
    s_distinct, _ = run(args.binary, os.path.join(args.work, "distinct.jsonl"),
                        os.path.join(args.work, "distinct_out.jsonl"), [])
    report.append(describe("shared 512-token prefix", s_shared))
    report.append(describe("no shared prefix", s_distinct))
    print("\n".join(report))
    ok = (finished == len(reqs) and batched["counts"]["preemptions"] > 0 and s_shared["counts"]["cached_prompt_tokens"] > 0
          and s_shared["timings"]["prefill_s"] < s_distinct["timings"]["prefill_s"])
    print("serving check:", "PASS" if ok and same == len(reqs) else "see above")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
