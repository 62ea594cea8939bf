#!/usr/bin/env python3
"""Decode from quantized GGUF files on the GPU machine: kiln and llama.cpp on the same file, same run.

    python3 tools/bench/gguf_bench.py llama-3.2-1b llama-3.1-8b --bin-dir BIN --llama-cpp DIR \
        --quant Q4_0,Q8_0 --work /tmp/gguf --out gguf.md

For each model: a bf16 GGUF of its exact shapes (random weights, llama.cpp's gguf-py:
peer_llama_cpp.py), quantized by llama-quantize to each type; on each file llama-bench tg128 (at
depth 32, as bench.py's llama.cpp column) and kiln (`BIN/<model> -m FILE`, batch 1, a 32-token
prompt, 128 new tokens, greedy: ms per decode step, and the bytes a step reads as its
--output-format json counts them), beside the bytes of the file's own tensors a step reads
(file_step_bytes): kiln should read the file's bytes, no more (its count adds the KV cache, 13 MB
of an 8B's 4.8 GB here). The floor is kiln's bytes over the device-to-device copy bandwidth
measured in the same run (bench.py's copy_bandwidth). Prefill: a 512-token prompt (kiln's
prefill_s, best of 3) against llama-bench pp512. --baseline-bin-dir runs a second build (a change's
parent) on the same files in the same run, for a change measured on one card.
"""
import argparse
import json
import os
import random
import subprocess
import sys

BENCH = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, BENCH)
import peer_llama_cpp  # noqa: E402
from bench import PROMPT, NEW, copy_bandwidth, ops_line  # noqa: E402

PREFILL = 512  # the prompt of the prefill columns (llama-bench pp512)


def file_step_bytes(gguf, path, model_type):
    """The bytes of the file's own tensors one decode step reads (issue 12 asks kiln's to be these,
    ±2%): every tensor, but the token embedding table one row of it where the file has an
    output.weight of its own (a tied LM head reads the whole table). None for MoE models, whose
    steps read only the routed experts chosen."""
    if model_type == "deepseek_v2":
        return None
    tensors = {t.name: t for t in gguf.GGUFReader(path).tensors}
    total = sum(int(t.n_bytes) for t in tensors.values())
    embedding = tensors.get("token_embd.weight")
    if embedding is not None and "output.weight" in tensors:
        rows = int(embedding.shape[-1])  # GGUF lists the vocabulary last
        total -= int(embedding.n_bytes) - int(embedding.n_bytes) // rows
    return total


def run_kiln(binary, path, ids, new_tokens=NEW, reps=2, key="decode_ms_per_step", extra=()):
    cmd = [binary, "-m", path, "--backend", "cuda", "--prompt-ids", ",".join(map(str, ids)), "--max-tokens",
           str(new_tokens), "--temperature", "0", "--ignore-eos", "--output-format", "json", *extra]
    runs = []
    for _ in range(reps):
        p = subprocess.run(cmd, capture_output=True, text=True)
        if p.returncode != 0:
            raise RuntimeError(f"kiln exit {p.returncode}: {peer_llama_cpp.tail(p.stderr or p.stdout)}")
        runs.append(json.loads(p.stdout))
    return min(runs, key=lambda r: r["timings"][key])


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("models", nargs="+")
    ap.add_argument("--bin-dir", required=True, help="kiln binaries, one per model")
    ap.add_argument("--llama-cpp", required=True, help="llama.cpp: bin/llama-bench, bin/llama-quantize, gguf-py/")
    ap.add_argument("--quant", default="Q4_0,Q8_0", help="llama-quantize types, comma list")
    ap.add_argument("--work", default="/tmp/gguf-bench", help="where the GGUF files go (removed per model)")
    ap.add_argument("--baseline-bin-dir", help="kiln binaries of another build, run on the same files in the same "
                    "run (a change measured against its parent)")
    ap.add_argument("--keep", action="store_true", help="keep the quantized files in --work")
    ap.add_argument("--profile", action="store_true", help="one more kiln run per file with --profile: its "
                    "per-op decode times under the table (that run's own step time is not used)")
    ap.add_argument("--out", help="also write the table here")
    args = ap.parse_args()
    os.makedirs(args.work, exist_ok=True)
    bw = copy_bandwidth()
    rows = []
    for model in args.models:
        gguf = peer_llama_cpp.import_gguf(args.llama_cpp)
        cfg = peer_llama_cpp.model_config(model)
        src = os.path.join(args.work, f"{model}-bf16.gguf")
        peer_llama_cpp.write_gguf(gguf, cfg, src, model)
        rng = random.Random(0)
        ids = [rng.randrange(3, cfg["vocab_size"]) for _ in range(PROMPT)]
        long_ids = [rng.randrange(3, cfg["vocab_size"]) for _ in range(PREFILL)]
        for q in [q for q in args.quant.split(",") if q]:
            path = os.path.join(args.work, f"{model}-{q}.gguf")
            row = {"model": model, "file": q}
            try:
                peer_llama_cpp.quantize(args.llama_cpp, src, path, q)
                row["file_gb"] = os.path.getsize(path) / 1e9
                row["file_step_bytes"] = file_step_bytes(gguf, path, cfg["model_type"])
                row["llama_cpp_ms"] = peer_llama_cpp.run_bench(args.llama_cpp, path)["ms_per_token"]
                k = run_kiln(os.path.join(args.bin_dir, model), path, ids)
                t, b = k["timings"], k["decode_bytes_per_step"]
                row.update(kiln_ms=t["decode_ms_per_step"], bytes=b["total"], formats=k["memory"]["weight_formats"],
                           weight_bytes=k["memory"]["weight_bytes"], load_s=t["load_s"])
                row["floor_ms"] = b["total"] / bw * 1e3
                if args.profile:
                    prof = run_kiln(os.path.join(args.bin_dir, model), path, ids, reps=1, extra=["--profile"])
                    row["decode_ops"] = prof.get("decode_ops")
                if args.baseline_bin_dir:
                    base = run_kiln(os.path.join(args.baseline_bin_dir, model), path, ids)
                    row["baseline_ms"] = base["timings"]["decode_ms_per_step"]
                # Prefill of a 512-token prompt: kiln's one step (quantized projections expanded to
                # bf16 for cuBLASLt), llama.cpp's pp512.
                p = run_kiln(os.path.join(args.bin_dir, model), path, long_ids, 1, 3, "prefill_s")
                row["kiln_pp_ms"] = 1e3 * p["timings"]["prefill_s"]
                row["llama_cpp_pp_ms"] = peer_llama_cpp.run_prefill_bench(args.llama_cpp, path, PREFILL)
            except Exception as e:  # one file's failure costs its row only
                row["error"] = str(e)
            rows.append(row)
            print(json.dumps(row), flush=True)
            if os.path.exists(path) and not args.keep:
                os.remove(path)
        os.remove(src)
    columns = ["model", "file", "file GB", "kiln weights GB", "kiln ms/token", "bytes/step GB",
               "the file's bytes/step GB", "kiln's bytes vs the file's", "floor ms",
               "% of floor", "llama.cpp tg128 ms", "llama.cpp / kiln", "kiln pp512 ms", "llama.cpp pp512 ms",
               "kiln load s", "kiln weight formats"] + (["baseline ms/token", "change"] if args.baseline_bin_dir else [])
    lines = [f"copy bandwidth {bw / 1e12:.2f} TB/s (read + write)", "",
             "| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    for r in rows:
        if "error" in r:  # the error in the formats column, dashes elsewhere
            cells = [r["model"], r["file"]] + ["—"] * (len(columns) - 2)
            cells[columns.index("kiln weight formats")] = r["error"][:120]
        else:
            fb = r["file_step_bytes"]
            cells = [r["model"], r["file"], f"{r['file_gb']:.2f}", f"{r['weight_bytes'] / 1e9:.2f}",
                     f"{r['kiln_ms']:.3f}", f"{r['bytes'] / 1e9:.3f}", f"{fb / 1e9:.3f}" if fb else "—",
                     f"{100 * (r['bytes'] / fb - 1):+.1f}%" if fb else "—", f"{r['floor_ms']:.3f}",
                     f"{100 * r['floor_ms'] / r['kiln_ms']:.0f}%", f"{r['llama_cpp_ms']:.3f}",
                     f"{r['llama_cpp_ms'] / r['kiln_ms']:.2f}×", f"{r['kiln_pp_ms']:.1f}", f"{r['llama_cpp_pp_ms']:.1f}",
                     f"{r['load_s']:.1f}", r["formats"]]
            if args.baseline_bin_dir:
                cells += [f"{r['baseline_ms']:.3f}", f"{100 * (r['kiln_ms'] / r['baseline_ms'] - 1):+.1f}%"]
        lines.append("| " + " | ".join(cells) + " |")
    ops = [ops_line(f"{r['model']} {r['file']}", r["decode_ops"]) for r in rows if r.get("decode_ops")]
    if ops:
        lines += ["", "Decode per op (kiln --profile; ms per step, bytes read, GB/s):"] + ops
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text)


if __name__ == "__main__":
    main()
