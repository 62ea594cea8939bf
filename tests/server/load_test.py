#!/usr/bin/env python3
"""CI load test: tools/load/kiln_load.py against `<model> serve` on the CPU backend — 2,000
streaming requests from 200 concurrent clients arriving as a Poisson process. Passes with 0
errors and 0 lost requests; prints p50/p99 time to first token and inter-token latency and writes
load.json and load.png into the given folder.

    load_test.py --binary build/bin/tiny-smollm2 --out build/tests/load
"""
import argparse
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from server_harness import Server  # noqa: E402

LOAD = os.path.join(HERE, "..", "..", "tools", "load", "kiln_load.py")


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--binary", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--requests", type=int, default=2000)
    p.add_argument("--concurrency", type=int, default=200)
    p.add_argument("--rate", type=float, default=400.0)
    args = p.parse_args()
    os.makedirs(args.out, exist_ok=True)
    with Server(args.binary, "--max-waiting", str(args.concurrency + 56)) as s:
        cmd = [sys.executable, LOAD, "--url", s.url, "--requests", str(args.requests), "--concurrency", str(args.concurrency),
               "--rate", str(args.rate), "--max-tokens", "16", "--json", os.path.join(args.out, "load.json"),
               "--png", os.path.join(args.out, "load.png")]
        run = subprocess.run(cmd, capture_output=True, text=True, timeout=1200)
        metrics = s.metrics()
    summary = json.loads(run.stdout)
    t, i = summary["ttft"], summary["inter_token"]
    print(f"{summary['succeeded']} of {summary['requests']} requests from {summary['concurrency']} clients in "
          f"{summary['wall_s']:.1f} s ({summary['requests_per_s']:.0f} req/s, {summary['output_tokens_per_s']:.0f} tok/s): "
          f"{summary['errors']} errors, {summary['lost']} lost; TTFT p50 {t['p50_ms']:.1f} ms, p99 {t['p99_ms']:.1f} ms; "
          f"inter-token p50 {i['p50_ms']:.2f} ms, p99 {i['p99_ms']:.2f} ms")
    ok = run.returncode == 0 and summary["errors"] == 0 and summary["lost"] == 0 and summary["succeeded"] == args.requests
    ok = ok and metrics["kiln:generation_tokens_total"] == summary["output_tokens"]
    if not ok:
        print("FAILED:", run.stderr[-2000:], summary.get("error_samples"),
              "server tokens", metrics["kiln:generation_tokens_total"], "client tokens", summary["output_tokens"])
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
