#!/usr/bin/env python3
"""Time to first token of the first request after start against later ones (no setup paid by the
first request: kernels loaded, cuBLASLt plans built, decode graphs captured at warm-up).

    python3 tools/bench/ttft.py MODEL [--requests 10] [--prompt 32] [--bin-dir build/bin]

One process, requests one at a time (--max-batch 1): request k's time to first token is its first
token's time minus the previous request's finish (the engine admits it then). Prints each, and the
first against the tenth.
"""
import argparse
import json
import os
import random
import subprocess
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("--requests", type=int, default=10)
    ap.add_argument("--prompt", type=int, default=32, help="prompt tokens")
    ap.add_argument("--bin-dir", default=os.path.join(ROOT, "build", "bin"))
    args = ap.parse_args()
    rng = random.Random(7)
    with tempfile.NamedTemporaryFile("w", suffix=".jsonl", delete=False) as f:
        for _ in range(args.requests):
            ids = [rng.randrange(3, 30000) for _ in range(args.prompt)]
            f.write(json.dumps({"prompt_ids": ids, "max_tokens": 8, "temperature": 0, "ignore_eos": True}) + "\n")
        requests = f.name
    cmd = [os.path.join(args.bin_dir, args.model), "--random-weights", "1", "--backend", "cuda", "--prompts-file",
           requests, "--max-batch", "1", "--output-format", "json", "--no-progress"]
    report = json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout)
    os.unlink(requests)
    results = sorted(report["requests"], key=lambda r: r["first_token_ms"])
    ttft, previous_finish = [], 0.0
    for r in results:
        ttft.append(r["first_token_ms"] - previous_finish)
        previous_finish = r["finish_ms"]
    print(f"{args.model}: time to first token (ms) of requests 1..{len(ttft)}: " + " ".join(f"{t:.2f}" for t in ttft))
    last = ttft[min(9, len(ttft) - 1)]
    print(f"{args.model}: first {ttft[0]:.2f} ms, tenth {last:.2f} ms, first / tenth = {ttft[0] / last:.2f}")


if __name__ == "__main__":
    main()
