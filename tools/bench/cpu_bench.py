#!/usr/bin/env python3
"""kiln and llama.cpp on the CPU, on the same GGUF files, with the same thread count.

    python3 tools/bench/cpu_bench.py FILE.gguf [FILE.gguf ...] --llama-cpp DIR -t 2 \
        [--kiln FILE.gguf=BIN ...] [--backend cpu] [--kiln-args "..."] [--no-threads-flag] [--json OUT]

DIR is llama.cpp built for the CPU (bin/ or build/bin/ with llama-bench; bench/README.md, "CPU
peer"). Each file is measured by

    llama-bench -m FILE -t T -p 32,512 -n 64 -r REPS -o json

whose three tests are tg64 (64 tokens decoded one at a time from an empty context), pp32 and
pp512 (a 32- and a 512-token prompt in one batch): tokens/s of the best repetition (max of
samples_ts; the --json output keeps avg_ts and stddev_ts too). A file given a kiln binary with --kiln FILE=BIN (the binary
generated for that model's config; files without one get llama.cpp only) is also run as

    BIN --gguf FILE --backend B --threads T --prompt-ids IDS --max-tokens 64 --temperature 0
        --ignore-eos --output-format json

with 32 and with 512 random ids in the file's vocabulary (seeded, the same every run), the better
of two runs each: decode tok/s = 1000 / timings.decode_ms_per_step (of the 32-id run: 63 steps
after a 32-token prompt, the closest to tg64), prefill tok/s = ids / timings.prefill_s.
--no-threads-flag leaves --threads out (for builds that do not have it yet: kiln then picks its
own thread count, which the table's "kiln device" column shows). Best-of on both sides, because a
shared 2-core machine is noisy; --wait-idle S also waits (up to S seconds) for idle CPUs before each
engine's runs of a file. --rounds N measures each file N times, the two engines alternating (llama.cpp,
kiln, llama.cpp, kiln, ...), and reports each engine's median over the rounds and the median of the
rounds' own ratios: the machine's memory bandwidth moves from minute to minute with its neighbours
(40 to 57 GB/s read within an hour on 2026-11-28), a bandwidth-bound decode with it, and a ratio of
two runs minutes apart measures that as much as the engines. The table's first line gives that
bandwidth before and after (read_bandwidth.cpp, built with g++; --no-read-bandwidth leaves it out).

    python3 tools/bench/cpu_bench.py --llama-cpp DIR --make llama-3.2-1b --quant Q4_0 --files-dir D

writes D/llama-3.2-1b-bf16.gguf (configs/llama-3.2-1b.yaml's shapes, random weights:
peer_llama_cpp.write_gguf) and each --quant type of it (llama-quantize), then stops.
"""
import argparse
import hashlib
import json
import os
import random
import shlex
import statistics
import subprocess
import sys
import tempfile
import time

BENCH = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, BENCH)


class _NoTorch:
    """Stands in for torch where it is not installed (the CPU machine): hf_model, imported through
    peer_llama_cpp, names torch at import time (defaults, decorators), but hf_config_dict, all we
    use of it, never does."""
    def __getattr__(self, name):
        return self

    def __call__(self, *args, **kwargs):
        return self


try:
    import torch  # noqa: F401
except ImportError:
    sys.modules["torch"] = _NoTorch()
import peer_llama_cpp  # noqa: E402

TG, PROMPTS = 64, (32, 512)  # llama-bench tg64, pp32, pp512; kiln the same lengths


def llama_bench(llama_cpp, path, threads, reps, timeout):
    """{"tg64": tok/s, "pp32": tok/s, "pp512": tok/s, "avg": {...}, "stddev": {...}, "info": ...} from one
    llama-bench call. The headline is the best repetition (max of samples_ts), as kiln's is the best of its
    runs: on a shared 2-core machine one preempted ggml thread stalls the others at every barrier, so an
    average mostly measures the neighbours; avg_ts and stddev_ts are kept beside it."""
    cmd = [peer_llama_cpp.tool(llama_cpp, "llama-bench"), "-m", path, "-t", str(threads),
           "-p", ",".join(map(str, PROMPTS)), "-n", str(TG), "-r", str(reps), "-o", "json"]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    if p.returncode != 0:
        raise RuntimeError(f"llama-bench exit {p.returncode}: {peer_llama_cpp.tail(p.stderr or p.stdout)}")
    out = {}
    for r in json.loads(p.stdout):
        name = f"tg{r['n_gen']}" if r["n_gen"] else f"pp{r['n_prompt']}"
        out[name] = max(r["samples_ts"])
        out.setdefault("avg", {})[name] = r["avg_ts"]
        out.setdefault("stddev", {})[name] = r["stddev_ts"]
        out["info"] = {k: r.get(k) for k in ("build_commit", "cpu_info", "backends", "n_threads", "model_type",
                                             "model_size", "model_n_params", "flash_attn")}
    return out


def vocab_size(gguf, path):
    """Rows of token_embd: the ids any model of this file accepts."""
    for t in gguf.GGUFReader(path).tensors:
        if t.name == "token_embd.weight":
            return int(t.shape[1])  # ggml order: (hidden, vocab)
    raise RuntimeError(f"{path}: no token_embd.weight")


def kiln(binary, path, ids, args, reps=2):
    """Best of `reps` runs of one prompt: (decode_ms_per_step, prefill_s, device string)."""
    cmd = [binary, "--gguf", path, "--backend", args.backend] + \
          ([] if args.no_threads_flag else ["--threads", str(args.threads)]) + \
          ["--prompt-ids", ",".join(map(str, ids)), "--max-tokens", str(TG), "--temperature", "0",
           "--ignore-eos", "--output-format", "json"] + shlex.split(args.kiln_args)
    runs = []
    for _ in range(reps):
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=args.timeout)
        if p.returncode != 0:
            raise RuntimeError(f"kiln exit {p.returncode}: {peer_llama_cpp.tail(p.stderr or p.stdout)}")
        runs.append(json.loads(p.stdout))
    return (min(r["timings"]["decode_ms_per_step"] for r in runs), min(r["timings"]["prefill_s"] for r in runs),
            runs[0].get("device", ""))


def sha(path):
    """The kiln binary's hash, in the JSON: binaries are rebuilt often, this says which one ran."""
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()[:16]


def load():
    """1-minute load average, before and after: the machine may be shared, and 2 cores are easily disturbed."""
    with open("/proc/loadavg") as f:
        return float(f.read().split()[0])


def read_bandwidth_tool(threads):
    """A callable that measures the machine's memory read bandwidth for `threads` threads in GB/s
    (tools/bench/read_bandwidth.cpp: 1 GiB a thread, built once with the host's g++ into a directory
    removed when the callable goes; None where it cannot be built or run): the floor of a
    memory-bound decode, which moves from minute to minute on a shared machine, so the table says
    what it was before and after."""
    build_dir = tempfile.TemporaryDirectory(prefix="kiln-bench-")
    out = os.path.join(build_dir.name, "read_bandwidth")
    source = os.path.join(BENCH, "read_bandwidth.cpp")
    try:
        subprocess.run(["g++", "-O3", "-march=native", "-pthread", source, "-o", out], check=True, capture_output=True,
                       timeout=300)
    except (OSError, subprocess.SubprocessError) as e:
        print(f"cpu_bench: read_bandwidth.cpp not built ({e}); the table leaves the bandwidth out", file=sys.stderr)
        return lambda: None

    def measure_once(_keep=build_dir):  # the binary's directory lives as long as this function
        try:
            text = subprocess.run([out, str(threads)], check=True, capture_output=True, text=True, timeout=300).stdout
            return float(text.split("GB/s")[0].split(":")[-1])  # "2 threads: 50.2 GB/s read (...)"
        except (OSError, subprocess.SubprocessError, ValueError, IndexError):
            return None
    return measure_once


def busy(window=3.0):
    """Fraction of all CPUs' time spent busy over `window` seconds (/proc/stat: idle + iowait count as idle)."""
    def sample():
        with open("/proc/stat") as f:
            v = [int(x) for x in f.readline().split()[1:]]
        return sum(v), v[3] + v[4]
    (t0, i0), _, (t1, i1) = sample(), time.sleep(window), sample()
    return 1 - (i1 - i0) / max(1, t1 - t0)


def wait_idle(limit):
    """Wait (at most `limit` seconds) until the CPUs are at least 90% idle: returns the seconds waited, or
    None when they never were (the measurement then goes ahead, and the JSON says so)."""
    start = time.time()
    while time.time() - start < limit:
        if busy() < 0.1:
            return round(time.time() - start)
    return None


def make_files(args):
    gguf = peer_llama_cpp.import_gguf(args.llama_cpp)
    os.makedirs(args.files_dir, exist_ok=True)
    for model in args.make:
        cfg = peer_llama_cpp.model_config(model)
        src = os.path.join(args.files_dir, f"{model}-bf16.gguf")
        peer_llama_cpp.write_gguf(gguf, cfg, src, model)
        print(src)
        for q in [q for q in args.quant.split(",") if q]:
            dst = os.path.join(args.files_dir, f"{model}-{q}.gguf")
            peer_llama_cpp.quantize(args.llama_cpp, src, dst, q)
            print(dst)


def measure(args, gguf, path, binary):
    """One round on one file: llama-bench, then the kiln binary (if any)."""
    row = {"file": path, "threads": args.threads, "llama_cpp": {}, "kiln": {}}
    if args.wait_idle:
        row["waited_s"] = wait_idle(args.wait_idle)
    try:
        row["llama_cpp"] = llama_bench(args.llama_cpp, path, args.threads, args.reps, args.timeout)
    except Exception as e:  # one engine's failure costs its cells only
        row["llama_cpp_error"] = str(e)
    if binary:
        if args.wait_idle:
            row["kiln_waited_s"] = wait_idle(args.wait_idle)
        try:
            rng = random.Random(0)
            vocab = vocab_size(gguf, path)
            row["kiln"]["binary"] = {"path": binary, "sha256": sha(binary)}
            for n in PROMPTS:
                ids = [rng.randrange(3, vocab) for _ in range(n)]
                dec_ms, pre_s, device = kiln(binary, path, ids, args)
                row["kiln"][f"pp{n}"] = n / pre_s
                if n == PROMPTS[0]:
                    row["kiln"][f"tg{TG}"] = 1e3 / dec_ms
                row["kiln"]["device"] = device
        except Exception as e:
            row["kiln_error"] = str(e)
    return row


def combine(rounds, tests):
    """Rounds of one file as one row: each engine's median per test, the median of the rounds' ratios
    ("ratio"), and the rounds themselves."""
    row = {k: rounds[0][k] for k in ("file", "threads")}
    for engine in ("llama_cpp", "kiln"):
        row[engine] = {t: statistics.median(v) for t in tests
                       if (v := [r[engine][t] for r in rounds if t in r[engine]])}
        for k in ("info", "binary", "device"):
            if k in rounds[0][engine]:
                row[engine][k] = rounds[0][engine][k]
    row["ratio"] = {t: statistics.median(v) for t in tests
                    if (v := [r["kiln"][t] / r["llama_cpp"][t] for r in rounds
                              if t in r["kiln"] and r["llama_cpp"].get(t)])}
    for k in ("llama_cpp_error", "kiln_error"):
        errors = [r[k] for r in rounds if k in r]
        if errors:
            row[k] = errors[0]
    row["rounds"] = rounds
    return row


def fmt(x):
    return "—" if x is None else f"{x:.1f}"


def ratio(a, b):
    return "—" if a is None or b is None else f"{a / b:.2f}×"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("files", nargs="*", help="GGUF files")
    ap.add_argument("--llama-cpp", required=True, help="llama.cpp CPU build: bin/ or build/bin/ llama-bench, gguf-py/")
    ap.add_argument("--kiln", action="append", default=[], metavar="FILE=BIN",
                    help="run kiln binary BIN on FILE too (repeatable; FILE as given among the files)")
    ap.add_argument("-t", "--threads", type=int, default=os.cpu_count(), help="threads, both engines")
    ap.add_argument("--backend", default="cpu", help="kiln --backend")
    ap.add_argument("--no-threads-flag", action="store_true", help="do not pass --threads to kiln")
    ap.add_argument("--kiln-args", default="", help="more kiln arguments, one shell-quoted string")
    ap.add_argument("--reps", type=int, default=5, help="llama-bench repetitions")
    ap.add_argument("--rounds", type=int, default=1,
                    help="measure each file this many times, the engines alternating; report medians")
    ap.add_argument("--timeout", type=int, default=3600, help="seconds one process may take")
    ap.add_argument("--wait-idle", type=int, default=0, metavar="S",
                    help="before each engine's runs of a file, wait up to S seconds for the CPUs to be 90%% idle")
    ap.add_argument("--json", metavar="OUT", help="also write the raw numbers here")
    ap.add_argument("--no-read-bandwidth", action="store_true",
                    help="do not measure the memory read bandwidth before and after (read_bandwidth.cpp)")
    ap.add_argument("--make", action="append", default=[], metavar="MODEL",
                    help="only write MODEL's random-weight bf16 GGUF (+ --quant) into --files-dir")
    ap.add_argument("--quant", default="", help="with --make: llama-quantize types, comma list")
    ap.add_argument("--files-dir", default=".", help="with --make: where the files go")
    args = ap.parse_args()
    if args.make:
        return make_files(args)
    if args.rounds < 1:
        ap.error(f"--rounds must be at least 1, got {args.rounds}")
    binaries = dict(k.split("=", 1) for k in args.kiln)
    unknown = set(binaries) - set(args.files)
    if unknown:
        ap.error(f"--kiln names files not given: {', '.join(sorted(unknown))}")
    gguf = peer_llama_cpp.import_gguf(args.llama_cpp) if binaries else None
    rows, load_before = [], load()
    bandwidth = (lambda: None) if args.no_read_bandwidth else read_bandwidth_tool(args.threads)
    bandwidth_before = bandwidth()
    tests = [f"tg{TG}"] + [f"pp{n}" for n in PROMPTS]
    for path in args.files:
        rounds = [measure(args, gguf, path, binaries.get(path)) for _ in range(args.rounds)]
        row = dict(rounds[0]) if args.rounds == 1 else combine(rounds, tests)
        rows.append(row)
        print(json.dumps(row), file=sys.stderr, flush=True)
    what = "best repetition" if args.rounds == 1 else (
        f"median of {args.rounds} alternating rounds of each engine's best repetition; "
        "ratios: median of the rounds' ratios")
    load_after, bandwidth_after = load(), bandwidth()
    read = "" if bandwidth_before is None or bandwidth_after is None else (
        f"; read bandwidth ({args.threads} threads, read_bandwidth.cpp) {bandwidth_before:.1f} GB/s before, "
        f"{bandwidth_after:.1f} after")
    lines = [f"tokens/s ({what}), {args.threads} threads; kiln --backend {args.backend} {args.kiln_args}".rstrip() +
             f"; load average {load_before:.2f} before, {load_after:.2f} after" + read, "",
             "| file | " + " | ".join(f"llama.cpp {t}" for t in tests) + " | " +
             " | ".join(f"kiln {t}" for t in tests) + " | " + " | ".join(f"kiln/llama.cpp {t}" for t in tests) +
             " | kiln device |",
             "|---" * (3 * len(tests) + 2) + "|"]
    for r in rows:
        lc, kn = r["llama_cpp"], r["kiln"]
        lines.append(f"| {os.path.basename(r['file'])} | " + " | ".join(fmt(lc.get(t)) for t in tests) + " | " +
                     " | ".join(fmt(kn.get(t)) for t in tests) + " | " +
                     " | ".join(f"{r['ratio'][t]:.2f}×" if t in r.get("ratio", {})
                                else ratio(kn.get(t), lc.get(t)) for t in tests) + f" | {kn.get('device', '—')} |")
    notes = [f"- {os.path.basename(r['file'])}: {k}: {r[k][:200]}" for r in rows for k in ("llama_cpp_error", "kiln_error")
             if k in r]
    print("\n".join(lines + ([""] + notes if notes else [])))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
