#!/usr/bin/env python3
"""llama.cpp's decode speed on a kiln model's shapes: the "llama.cpp" peer columns of bench.py.

    python3 tools/bench/peer_llama_cpp.py --llama-cpp DIR llama-3.2-1b [--quant Q4_0,Q8_0] [--json]

DIR is llama.cpp built on the GPU machine (.carry/peers_build.sh packs bin/llama-bench,
bin/llama-quantize, their libraries and gguf-py; a build tree with build/bin/ works too; fetched,
carried and built there, never committed: bench/README.md). A GGUF file with the exact shapes of
configs/<model>.yaml and random bf16 weights is written into --work (streamed one tensor at a time:
an 8B model is 16 GB), optionally quantized with llama-quantize, and measured with

    llama-bench -m FILE -p 0 -n 128 -d 32 -ngl 99 -o json

tg128 at depth 32: 128 tokens decoded one at a time after a 32-token context, bench.py's shape
(the 32 prompt tokens are processed before the timed part). ms per token = 1000 / avg_ts, llama.cpp's
own headline number, averaged over llama-bench's repetitions. Files are deleted afterwards unless
--keep.
"""
import argparse
import contextlib
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile

import numpy as np

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "tools", "golden"))
from hf_model import hf_config_dict  # noqa: E402

NEW, DEPTH = 128, 32  # bench.py's shape: 128 new tokens after a 32-token prompt
# kiln family (HF model_type) -> llama.cpp architecture
ARCH = {"llama": "llama", "qwen3": "qwen3", "deepseek_v2": "deepseek2"}


class Unsupported(Exception):
    """The model is not one this GGUF writer describes."""


def tool(llama_cpp_dir, name):
    """A llama.cpp binary: DIR/bin (packed), DIR/build/bin (a build tree) or DIR itself."""
    for sub in ("bin", os.path.join("build", "bin"), "."):
        path = os.path.join(llama_cpp_dir, sub, name)
        if os.path.isfile(path) and os.access(path, os.X_OK):
            return path
    raise FileNotFoundError(f"no {name} under {llama_cpp_dir} (bin/, build/bin/)")


def import_gguf(llama_cpp_dir):
    """llama.cpp's own gguf-py, the writer of the version whose binaries read the file."""
    path = os.path.join(llama_cpp_dir, "gguf-py")
    if not os.path.isdir(os.path.join(path, "gguf")):
        raise FileNotFoundError(f"no gguf-py/gguf under {llama_cpp_dir}")
    sys.path.insert(0, path)
    import gguf
    return gguf


def llama3_rope_factors(cfg, head_dim):
    """Per-frequency divisors of Llama 3.1 RoPE scaling, the `rope_freqs` tensor llama.cpp reads for
    rope_type llama3 (the same rule as HF's _compute_llama3_parameters, as divisors)."""
    s = cfg["rope_scaling"]
    factor, low, high = s["factor"], s["low_freq_factor"], s["high_freq_factor"]
    old_ctx = s["original_max_position_embeddings"]
    out = []
    for i in range(0, head_dim, 2):
        freq = 1.0 / cfg.get("rope_theta", 10000.0) ** (i / head_dim)
        wavelen = 2 * math.pi / freq
        if wavelen < old_ctx / high:
            out.append(1.0)
        elif wavelen > old_ctx / low:
            out.append(factor)
        else:
            smooth = (old_ctx / wavelen - low) / (high - low)
            out.append(1.0 / ((1 - smooth) / factor + smooth))
    return np.array(out, dtype=np.float32)


def tensor_plan(gguf, cfg):
    """[(name, numpy shape (rows = output features), "bf16" | "f32", fixed values, "random" or None)]
    in file order. Matrices are bf16 as in the checkpoints (random); 1-D weights f32 as llama.cpp's
    converter writes them (norms: ones); DeepSeek's router f32 and random, so that tokens spread over
    the experts as kiln's random weights route them."""
    t = lambda kind, bid=None: gguf.TENSOR_NAMES[kind].format(bid=bid) + ".weight"  # noqa: E731
    T = gguf.MODEL_TENSOR
    H, V, I = cfg["hidden_size"], cfg["vocab_size"], cfg["intermediate_size"]
    plan = [(t(T.TOKEN_EMBD), (V, H), "bf16", None), (t(T.OUTPUT_NORM), (H,), "f32", None)]
    if not cfg.get("tie_word_embeddings", False):  # tied: llama.cpp projects with token_embd
        plan.append((t(T.OUTPUT), (V, H), "bf16", None))
    if cfg["model_type"] == "deepseek_v2":
        return plan + deepseek2_layers(t, T, cfg)
    nq, nkv = cfg["num_attention_heads"], cfg.get("num_key_value_heads", cfg["num_attention_heads"])
    hd = cfg.get("head_dim") or H // nq
    if cfg.get("rope_scaling"):
        plan.append((t(T.ROPE_FREQS), (hd // 2,), "f32", llama3_rope_factors(cfg, hd)))
    for i in range(cfg["num_hidden_layers"]):
        plan += [(t(T.ATTN_NORM, i), (H,), "f32", None),
                 (t(T.ATTN_Q, i), (nq * hd, H), "bf16", None),
                 (t(T.ATTN_K, i), (nkv * hd, H), "bf16", None),
                 (t(T.ATTN_V, i), (nkv * hd, H), "bf16", None),
                 (t(T.ATTN_OUT, i), (H, nq * hd), "bf16", None)]
        if cfg["model_type"] == "qwen3":  # per-head RMSNorm of q and k
            plan += [(t(T.ATTN_Q_NORM, i), (hd,), "f32", None), (t(T.ATTN_K_NORM, i), (hd,), "f32", None)]
        plan += [(t(T.FFN_NORM, i), (H,), "f32", None),
                 (t(T.FFN_GATE, i), (I, H), "bf16", None),
                 (t(T.FFN_UP, i), (I, H), "bf16", None),
                 (t(T.FFN_DOWN, i), (H, I), "bf16", None)]
    return plan


def deepseek2_layers(t, T, cfg):
    """DeepSeek-V2's layers as llama.cpp's converter writes them (conversion/deepseek.py): MLA with
    kv_b_proj split into attn_k_b [heads, kv_lora, nope] (each head's rows transposed) and attn_v_b
    [heads, v, kv_lora], the routed experts stacked, the router in f32."""
    H, I, E = cfg["hidden_size"], cfg["intermediate_size"], cfg["n_routed_experts"]
    nq, q_lora, kv_lora = cfg["num_attention_heads"], cfg.get("q_lora_rank"), cfg["kv_lora_rank"]
    nope, rope, v = cfg["qk_nope_head_dim"], cfg["qk_rope_head_dim"], cfg["v_head_dim"]
    im, shared = cfg["moe_intermediate_size"], cfg["n_shared_experts"] * cfg["moe_intermediate_size"]
    plan = []
    for i in range(cfg["num_hidden_layers"]):
        plan.append((t(T.ATTN_NORM, i), (H,), "f32", None))
        if q_lora:
            plan += [(t(T.ATTN_Q_A, i), (q_lora, H), "bf16", None), (t(T.ATTN_Q_A_NORM, i), (q_lora,), "f32", None),
                     (t(T.ATTN_Q_B, i), (nq * (nope + rope), q_lora), "bf16", None)]
        else:
            plan.append((t(T.ATTN_Q, i), (nq * (nope + rope), H), "bf16", None))
        plan += [(t(T.ATTN_KV_A_MQA, i), (kv_lora + rope, H), "bf16", None),
                 (t(T.ATTN_KV_A_NORM, i), (kv_lora,), "f32", None),
                 (t(T.ATTN_K_B, i), (nq, kv_lora, nope), "bf16", None),
                 (t(T.ATTN_V_B, i), (nq, v, kv_lora), "bf16", None),
                 (t(T.ATTN_OUT, i), (H, nq * v), "bf16", None),
                 (t(T.FFN_NORM, i), (H,), "f32", None)]
        if i < cfg["first_k_dense_replace"]:
            plan += [(t(T.FFN_GATE, i), (I, H), "bf16", None), (t(T.FFN_UP, i), (I, H), "bf16", None),
                     (t(T.FFN_DOWN, i), (H, I), "bf16", None)]
            continue
        plan += [(t(T.FFN_GATE_INP, i), (E, H), "f32", "random"),
                 (t(T.FFN_GATE_EXP, i), (E, im, H), "bf16", None), (t(T.FFN_UP_EXP, i), (E, im, H), "bf16", None),
                 (t(T.FFN_DOWN_EXP, i), (E, H, im), "bf16", None)]
        if shared:
            plan += [(t(T.FFN_GATE_SHEXP, i), (shared, H), "bf16", None),
                     (t(T.FFN_UP_SHEXP, i), (shared, H), "bf16", None),
                     (t(T.FFN_DOWN_SHEXP, i), (H, shared), "bf16", None)]
    return plan


def add_deepseek2_metadata(gguf, w, cfg):
    """The deepseek2 keys llama.cpp's converter writes (conversion/deepseek.py): MLA as multi-query
    attention over the latent (one KV head of kv_lora + rope, the per-head sizes in the _mla keys),
    the experts, and YaRN."""
    kv_lora, nope, rope = cfg["kv_lora_rank"], cfg["qk_nope_head_dim"], cfg["qk_rope_head_dim"]
    w.add_head_count_kv(1)
    w.add_key_length(kv_lora + rope)
    w.add_value_length(kv_lora)
    w.add_key_length_mla(nope + rope)
    w.add_value_length_mla(cfg["v_head_dim"])
    w.add_rope_dimension_count(rope)
    if cfg.get("q_lora_rank"):
        w.add_q_lora_rank(cfg["q_lora_rank"])
    w.add_kv_lora_rank(kv_lora)
    w.add_leading_dense_block_count(cfg["first_k_dense_replace"])
    w.add_expert_feed_forward_length(cfg["moe_intermediate_size"])
    w.add_expert_count(cfg["n_routed_experts"])
    w.add_expert_used_count(cfg["num_experts_per_tok"])
    w.add_expert_shared_count(cfg["n_shared_experts"])
    w.add_expert_group_count(cfg["n_group"])
    w.add_expert_group_used_count(cfg["topk_group"])
    w.add_expert_weights_scale(cfg["routed_scaling_factor"])
    if cfg.get("norm_topk_prob"):
        w.add_expert_weights_norm(True)
    w.add_expert_gating_func(gguf.ExpertGatingFuncType.SOFTMAX)
    s = cfg.get("rope_scaling")
    if s:
        w.add_rope_scaling_type(gguf.RopeScalingType.YARN)
        w.add_rope_scaling_factor(s["factor"])
        w.add_rope_scaling_orig_ctx_len(s["original_max_position_embeddings"])
        w.add_rope_scaling_yarn_log_mul(0.1 * s["mscale_all_dim"])  # as the converter writes it


def check_supported(cfg):
    if cfg["model_type"] not in ARCH:
        raise Unsupported(f"{cfg['model_type']}: this GGUF writer knows {', '.join(ARCH)}")
    # llama.cpp (src/models/deepseek2.cpp) takes a DeepSeek-V2 without a q latent by its layer count.
    layers = cfg["num_hidden_layers"]
    if (cfg["model_type"] == "deepseek_v2" and not cfg.get("q_lora_rank") and layers not in (26, 27)
            and not (layers == 48 and cfg["vocab_size"] == 128256)):
        raise Unsupported(f"DeepSeek-V2 without q_lora_rank and {layers} layers: llama.cpp reads that form only "
                          "at 26 or 27 layers (V2-Lite) or 48 with a 128,256-token vocabulary")
    if cfg.get("attention_bias") or cfg.get("mlp_bias"):
        raise Unsupported("biases are not written")
    scaling = cfg.get("rope_scaling")
    kind = scaling.get("rope_type", scaling.get("type")) if scaling else None
    if scaling and kind != ("yarn" if cfg["model_type"] == "deepseek_v2" else "llama3"):
        raise Unsupported(f"rope_scaling {scaling}: only llama3 frequency scaling (DeepSeek-V2: YaRN) is written")


def write_gguf(gguf, cfg, path, name, seed=0, distinct=False):
    """A GGUF of cfg's shapes with random bf16 weights: metadata as llama.cpp's converter writes it
    for this architecture, no tokenizer (tokenizer.ggml.model "none" + vocab_size: llama.cpp then
    makes vocab_size dummy tokens; llama-bench feeds random ids and never detokenizes).
    Weights are tiles of one random 8 MiB block, written one tensor at a time. Returns the bytes written.
    The tiles repeat rows (an 8B's LM head every 1024 rows), so that five or more tokens share the
    top logit exactly and greedy picks among them by rounding: `distinct` rotates each tile by a
    random offset, so that no two rows are alike (for comparing two engines' or backends' tokens)."""
    check_supported(cfg)
    arch = ARCH[cfg["model_type"]]
    H, nq = cfg["hidden_size"], cfg["num_attention_heads"]
    w = gguf.GGUFWriter(path, arch)
    w.add_name(name)
    w.add_context_length(cfg["max_position_embeddings"])
    w.add_embedding_length(H)
    w.add_block_count(cfg["num_hidden_layers"])
    w.add_feed_forward_length(cfg["intermediate_size"])
    w.add_head_count(nq)
    if arch == "deepseek2":
        add_deepseek2_metadata(gguf, w, cfg)
    else:
        hd = cfg.get("head_dim") or H // nq
        w.add_head_count_kv(cfg.get("num_key_value_heads", nq))
        w.add_key_length(hd)
        w.add_value_length(hd)
        w.add_rope_dimension_count(hd)
    w.add_rope_freq_base(cfg.get("rope_theta", 10000.0))
    w.add_layer_norm_rms_eps(cfg["rms_norm_eps"])
    w.add_vocab_size(cfg["vocab_size"])
    w.add_file_type(gguf.LlamaFileType.MOSTLY_BF16)
    w.add_tokenizer_model("none")
    plan = tensor_plan(gguf, cfg)
    for tname, shape, dtype, _ in plan:
        if dtype == "bf16":  # numpy has no bf16: the bits travel as uint16
            w.add_tensor_info(tname, shape, np.dtype(np.uint16), 2 * math.prod(shape),
                              raw_dtype=gguf.GGMLQuantizationType.BF16)
        else:
            w.add_tensor_info(tname, shape, np.dtype(np.float32), 4 * math.prod(shape))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_ti_data_to_file()
    rng = np.random.default_rng(seed)
    f32 = (rng.standard_normal(1 << 22, dtype=np.float32) * 0.02).view(np.uint32)
    block = ((f32 + 0x7FFF + ((f32 >> 16) & 1)) >> 16).astype(np.uint16)  # fp32 -> bf16, round to nearest even
    total = 0
    for _, shape, dtype, values in plan:
        if isinstance(values, str):  # "random": f32 weights that must not all be equal (a router)
            data = rng.standard_normal(shape, dtype=np.float32) * 0.02
        elif values is not None:
            data = values
        elif dtype == "bf16" and distinct:
            data = rotated_tiles(block, shape, rng)
        elif dtype == "bf16":
            data = np.resize(block, shape)  # the block repeated: one tensor in memory at a time
        else:
            data = np.ones(shape, dtype=np.float32)
        w.write_tensor_data(data)
        total += data.nbytes
        del data
    w.close()
    return total


def rotated_tiles(block, shape, rng):
    """`block` repeated to fill `shape`, each repetition rotated by its own random offset."""
    n = math.prod(shape)
    out = np.empty(n, dtype=block.dtype)
    for start in range(0, n, block.size):
        count = min(block.size, n - start)
        out[start:start + count] = np.roll(block, int(rng.integers(1, block.size)))[:count]
    return out.reshape(shape)


def run_bench(llama_cpp_dir, path, ngl=99, new_tokens=NEW, depth=DEPTH, reps=5, timeout=600):
    """llama-bench's tg result for one file: a dict with ms_per_token (1000 / avg_ts) and what
    llama-bench reports of the model (type, size in bytes, parameters) and its run (flash attention,
    backend, build)."""
    cmd = [tool(llama_cpp_dir, "llama-bench"), "-m", path, "-p", "0", "-n", str(new_tokens), "-d", str(depth),
           "-ngl", str(ngl), "-r", str(reps), "-o", "json"]
    env = dict(os.environ)
    libdir = os.path.dirname(cmd[0])  # the packed libraries sit beside the binaries
    env["LD_LIBRARY_PATH"] = libdir + (":" + env["LD_LIBRARY_PATH"] if env.get("LD_LIBRARY_PATH") else "")
    p = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=timeout)
    if p.returncode != 0:
        raise RuntimeError(f"llama-bench exit {p.returncode}: {tail(p.stderr or p.stdout)}")
    rows = [r for r in json.loads(p.stdout) if r.get("n_gen") == new_tokens]
    if not rows:
        raise RuntimeError(f"llama-bench printed no tg{new_tokens} row: {tail(p.stdout)}")
    r = rows[0]
    return {"ms_per_token": 1e3 / r["avg_ts"], "stddev_ts": r.get("stddev_ts"), "model_type": r.get("model_type"),
            "model_size": r.get("model_size"), "model_n_params": r.get("model_n_params"),
            "flash_attn": r.get("flash_attn"), "backends": r.get("backends"), "gpu_info": r.get("gpu_info"),
            "build_commit": r.get("build_commit"), "n_depth": r.get("n_depth")}


def run_prefill_bench(llama_cpp_dir, path, tokens=512, ngl=99, reps=5, timeout=600, extra=()):
    """llama-bench's pp result for one file: milliseconds for a prompt of `tokens` (tokens / avg_ts).
    `extra`: more llama-bench options (PREFILL_ARGS for long prompts)."""
    cmd = [tool(llama_cpp_dir, "llama-bench"), "-m", path, "-p", str(tokens), "-n", "0", "-ngl", str(ngl),
           "-r", str(reps), "-o", "json", *extra]
    env = dict(os.environ)
    env["LD_LIBRARY_PATH"] = os.path.dirname(cmd[0]) + (":" + env["LD_LIBRARY_PATH"] if env.get("LD_LIBRARY_PATH") else "")
    p = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=timeout)
    if p.returncode != 0:
        raise RuntimeError(f"llama-bench exit {p.returncode}: {tail(p.stderr or p.stdout)}")
    rows = [r for r in json.loads(p.stdout) if r.get("n_prompt") == tokens and r.get("n_gen") == 0]
    if not rows:
        raise RuntimeError(f"llama-bench printed no pp{tokens} row: {tail(p.stdout)}")
    return 1e3 * tokens / rows[0]["avg_ts"]


def quantize(llama_cpp_dir, src, dst, qtype, timeout=900):
    cmd = [tool(llama_cpp_dir, "llama-quantize"), src, dst, qtype]
    env = dict(os.environ, LD_LIBRARY_PATH=os.path.dirname(cmd[0]) + ":" + os.environ.get("LD_LIBRARY_PATH", ""))
    p = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=timeout)
    if p.returncode != 0:
        raise RuntimeError(f"llama-quantize {qtype} exit {p.returncode}: {tail(p.stderr or p.stdout)}")


def tail(text, n=3):
    return " | ".join(line for line in text.strip().splitlines()[-n:])


def model_config(model_name):
    """The HF config dict of a kiln model name (configs/<model_name>.yaml) or a kiln YAML path."""
    path = model_name if model_name.endswith(".yaml") else os.path.join(ROOT, "configs", model_name + ".yaml")
    return hf_config_dict(path)


@contextlib.contextmanager
def bf16_file(llama_cpp_dir, model_name, tools, work=None, keep=False):
    """A bf16 GGUF of `model_name`'s shapes in a new directory under `work`: yields (directory,
    file), removed afterwards unless `keep`. The llama.cpp `tools` are looked up before a file of
    many GB is written. Raises Unsupported for architectures not written here."""
    cfg = model_config(model_name)
    check_supported(cfg)
    for name in tools:
        tool(llama_cpp_dir, name)
    gguf = import_gguf(llama_cpp_dir)
    work_dir = tempfile.mkdtemp(prefix="kiln-lcpp-", dir=work)
    try:
        src = os.path.join(work_dir, "model-bf16.gguf")
        write_gguf(gguf, cfg, src, model_name)
        yield work_dir, src
    finally:
        if keep:
            print(f"kept {work_dir}", file=sys.stderr)
        else:
            shutil.rmtree(work_dir, ignore_errors=True)


def decode_ms(llama_cpp_dir, model_name, quants=(), work=None, ngl=99, keep=False, reps=5):
    """llama.cpp's tg ms per token on `model_name`'s shapes (configs/<model_name>.yaml or a kiln YAML
    path): {"bf16": result, "Q4_0": result, ...}, each result as run_bench's or {"error": why} for a
    quantization that failed. Raises Unsupported for architectures not written here."""
    tools = ["llama-bench"] + (["llama-quantize"] if quants else [])
    with bf16_file(llama_cpp_dir, model_name, tools, work, keep) as (work_dir, src):
        out = {"bf16": run_bench(llama_cpp_dir, src, ngl, reps=reps)}
        for q in quants:
            dst = os.path.join(work_dir, f"model-{q}.gguf")
            try:
                quantize(llama_cpp_dir, src, dst, q)
                out[q] = run_bench(llama_cpp_dir, dst, ngl, reps=reps)
            except (RuntimeError, subprocess.TimeoutExpired) as e:
                out[q] = {"error": str(e)}
            if not keep and os.path.exists(dst):
                os.unlink(dst)
        return out


# Long prompts: llama.cpp's flash attention, and micro-batches of 2,048 tokens (its default of 512
# cuts a long prompt into 4× as many passes over the weights; kiln's chunks are 2,048 tokens too).
PREFILL_ARGS = ("-fa", "1", "-b", "2048", "-ub", "2048")


def prefill_ms(llama_cpp_dir, model_name, lengths, work=None, ngl=99, reps=3):
    """llama.cpp's prefill of each prompt length on `model_name`'s shapes in bf16: {n: ms or why not}
    (prefill_bench.py's column). Raises Unsupported for architectures not written here."""
    with bf16_file(llama_cpp_dir, model_name, ["llama-bench"], work) as (_, src):
        out = {}
        for n in lengths:
            try:
                out[n] = run_prefill_bench(llama_cpp_dir, src, n, ngl, reps, timeout=900, extra=PREFILL_ARGS)
            except (RuntimeError, subprocess.TimeoutExpired) as e:
                out[n] = str(e)
        return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("model", help="a kiln model name (configs/<model>.yaml) or a kiln YAML path")
    ap.add_argument("--llama-cpp", required=True, help="llama.cpp: bin/llama-bench, bin/llama-quantize, gguf-py/")
    ap.add_argument("--work", help="where the GGUF files are written (default: the system's temp dir)")
    ap.add_argument("--quant", default="", help="also these llama-quantize types, comma list (e.g. Q4_0,Q8_0,Q4_K_M)")
    ap.add_argument("--ngl", type=int, default=99, help="layers on the GPU (0: the CPU only)")
    ap.add_argument("--reps", type=int, default=5, help="llama-bench repetitions")
    ap.add_argument("--keep", action="store_true", help="keep the GGUF files")
    ap.add_argument("--write-only", metavar="FILE", help="only write the bf16 GGUF to FILE")
    ap.add_argument("--prefill", metavar="N,N", help="instead of decode: the bf16 file's prefill of these prompt "
                    "lengths (llama-bench -p N with PREFILL_ARGS)")
    ap.add_argument("--json", action="store_true", help="print the result as one JSON line")
    args = ap.parse_args()
    if args.write_only:
        n = write_gguf(import_gguf(args.llama_cpp), model_config(args.model), args.write_only, args.model)
        print(f"{args.write_only}: {n / 1e9:.3f} GB of tensors")
        return
    if args.prefill:
        try:
            r = {"prefill_ms": prefill_ms(args.llama_cpp, args.model, [int(n) for n in args.prefill.split(",")],
                                          args.work, args.ngl, args.reps)}
        except Unsupported as e:
            r = {"unsupported": str(e)}
        print(json.dumps(r) if args.json else r)
        return
    quants = [q for q in args.quant.split(",") if q]
    try:
        r = decode_ms(args.llama_cpp, args.model, quants, args.work, args.ngl, args.keep, args.reps)
    except Unsupported as e:
        r = {"unsupported": str(e)}
    if args.json:
        print(json.dumps(r))
    elif "unsupported" in r:
        print(f"{args.model}: not supported: {r['unsupported']}")
    else:
        for k, v in r.items():
            print(f"{args.model} {k}: " + (v["error"] if "error" in v else
                  f"tg{NEW} {v['ms_per_token']:.3f} ms/token ({v['model_type']}, {v['model_size'] / 1e9:.2f} GB)"))


if __name__ == "__main__":
    main()
