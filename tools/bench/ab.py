#!/usr/bin/env python3
"""Two builds of one model, alternating, on the GPU machine: ab.py OLD_DIR NEW_DIR MODEL ROUNDS
BATCHES [profile], BATCHES e.g. 1,8,64. Each run is one --prompts-file of BATCH requests of 32 ids
and 128 new tokens (greedy, random weights); a line per batch gives every run's decode_ms_per_step,
new / old of the best runs, and whether every request's output ids were the same in all runs (md5).
`profile`: then one --profile run of each, its per-op ms a step. The A/B behind most entries of
bench/RESULTS.md since the fifty-second session. OLD_ARGS / NEW_ARGS (environment, shell words)
are added to that side's runs: the same binary twice with NEW_ARGS='--quantize fp8' times FP8
against bf16 (new / old is then FP8's step over bf16's; the ids differ by design)."""
import hashlib, json, os, shlex, subprocess, sys, tempfile

old, new, model, rounds, batches = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), sys.argv[5]
ids = [(i * 37 + 11) % 1000 + 3 for i in range(32)]
side_args = {name: shlex.split(os.environ.get(name.upper() + "_ARGS", "")) for name in ("old", "new")}


def run(bin_dir, f, extra=()):
    cmd = [os.path.join(bin_dir, model), "--random-weights", "1", "--backend", "cuda", "--temperature", "0",
           "--ignore-eos", "--output-format", "json", "--prompts-file", f, *extra]
    r = json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout)
    h = hashlib.md5(json.dumps([q["output_ids"] for q in r["requests"]]).encode()).hexdigest()[:10]
    return r["timings"]["decode_ms_per_step"], h, r


for batch in map(int, batches.split(",")):
    with tempfile.NamedTemporaryFile("w", suffix=".jsonl", delete=False) as f:
        for i in range(batch):
            f.write(json.dumps({"prompt_ids": [(t + 7 * i) % 1000 + 3 for t in ids], "max_tokens": 128}) + "\n")
    res = {"old": [], "new": []}
    for _ in range(rounds):
        for name, d in (("old", old), ("new", new)):
            ms, h, _ = run(d, f.name, side_args[name])
            res[name].append((ms, h))
    o = [m for m, _ in res["old"]]
    n = [m for m, _ in res["new"]]
    same = len({h for _, h in res["old"] + res["new"]}) == 1
    print(f"{model} b{batch}: old {', '.join(f'{m:.4f}' for m in o)} | new {', '.join(f'{m:.4f}' for m in n)} | "
          f"new/old {min(n) / min(o):.3f} | ids {'same' if same else 'DIFFER ' + str(res)}", flush=True)
    if len(sys.argv) > 6 and sys.argv[6] == "profile":
        for name, d in (("old", old), ("new", new)):
            _, _, r = run(d, f.name, [*side_args[name], "--profile"])
            ops = r.get("decode_ops") or []
            print(f"  profile {name}: " + ", ".join(f"{o['op']} {o['ms_per_step']:.3f}" for o in ops), flush=True)
    os.unlink(f.name)
