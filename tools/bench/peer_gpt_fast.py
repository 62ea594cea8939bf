#!/usr/bin/env python3
"""gpt-fast's decode speed on a kiln model's shapes: the "gpt-fast" peer column of bench.py.

    python3 tools/bench/peer_gpt_fast.py --gpt-fast DIR llama-3.2-1b [--json]

DIR holds gpt-fast's model.py (pytorch-labs/gpt-fast; fetched and carried to the GPU
machine, never committed: bench/README.md). Its Transformer is built with the shapes of
configs/<model>.yaml and random bf16 weights, then run the way gpt-fast's generate.py runs it: KV
caches for batch 1, the prompt prefilled eagerly, then one token per call of a decode step compiled
with torch.compile(mode="reduce-overhead", fullgraph=True) (Inductor kernels replayed as CUDA
graphs), attention left to Inductor (the math SDPA backend), greedy here instead of sampling. The
first generation compiles and warms up; the best of the timed ones gives ms per decode step, the
same quantity as kiln's decode_ms_per_step.

gpt-fast's model.py describes Llama-style models only (no q/k norms, head_dim = dim / n_head, no
biases): other configs raise Unsupported, and bench.py prints "—" for them.
"""
import argparse
import dataclasses
import importlib.util
import json
import os
import sys
import time

import torch

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "tools", "golden"))
from hf_model import hf_config_dict  # noqa: E402

PROMPT, NEW = 32, 128  # bench.py's shape


class Unsupported(Exception):
    """The model is not one gpt-fast's model.py describes."""


def load_model_py(gpt_fast_dir):
    """gpt-fast's model.py as a module of its own name, so it cannot shadow anything called `model`."""
    path = os.path.join(gpt_fast_dir, "model.py")
    if not os.path.isfile(path):
        raise FileNotFoundError(f"no model.py in {gpt_fast_dir}")
    spec = importlib.util.spec_from_file_location("gpt_fast_model", path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # dataclasses look their module up while the class is made
    spec.loader.exec_module(mod)
    return mod


def model_args(mod, cfg, max_seq_length):
    """gpt-fast's ModelArgs for an HF config dict (hf_config_dict), and notes on what differs."""
    if cfg["model_type"] != "llama":
        raise Unsupported(f"{cfg['model_type']}: gpt-fast's model.py has Llama-style layers only")
    if cfg.get("attention_bias") or cfg.get("mlp_bias"):
        raise Unsupported("biases: gpt-fast's projections have none")
    head_dim = cfg.get("head_dim") or cfg["hidden_size"] // cfg["num_attention_heads"]
    if head_dim * cfg["num_attention_heads"] != cfg["hidden_size"]:
        # model.py derives head_dim from dim / n_head and sizes wo as dim x dim.
        raise Unsupported(f"head_dim {head_dim} x {cfg['num_attention_heads']} heads != hidden {cfg['hidden_size']}")
    fields = {f.name for f in dataclasses.fields(mod.ModelArgs)}
    kw = dict(block_size=max_seq_length,  # RoPE table rows: only positions < max_seq_length are used
              vocab_size=cfg["vocab_size"], n_layer=cfg["num_hidden_layers"], n_head=cfg["num_attention_heads"],
              n_local_heads=cfg.get("num_key_value_heads", cfg["num_attention_heads"]), dim=cfg["hidden_size"],
              intermediate_size=cfg["intermediate_size"], rope_base=cfg.get("rope_theta", 10000.0),
              norm_eps=cfg["rms_norm_eps"])
    if "head_dim" in fields:
        kw["head_dim"] = head_dim
    notes = []
    scaling = cfg.get("rope_scaling")
    if scaling:
        if scaling.get("rope_type", scaling.get("type")) != "llama3":
            raise Unsupported(f"rope_scaling {scaling}: gpt-fast knows llama3 frequency scaling only")
        if "rope_scaling" in fields:
            kw["rope_scaling"] = {k: scaling[k] for k in
                                  ("factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings")}
        else:  # an older model.py: the same work per step, only the RoPE table's values differ
            notes.append("model.py has no rope_scaling: RoPE frequencies unscaled")
    args = mod.ModelArgs(**kw)
    if args.dim // args.n_head != head_dim or getattr(args, "head_dim", head_dim) != head_dim:
        raise Unsupported(f"model.py's head_dim differs from the config's {head_dim}")
    return args, notes


def build(mod, args, tie_embeddings, device, seed=0):
    """gpt-fast's Transformer with random bf16 weights on `device`, made in place there (an 8B model
    never exists in fp32 or on the host). Norm weights are 1; the rest N(0, 0.02): decode speed
    does not depend on the values, only finite logits matter."""
    with torch.device("meta"):
        model = mod.Transformer(args)
    model = model.to(dtype=torch.bfloat16).to_empty(device=device)
    if tie_embeddings:  # as the checkpoint: one matrix embeds and projects to logits
        model.output.weight = model.tok_embeddings.weight
    gen = torch.Generator(device=device).manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() == 1:
                p.fill_(1.0)
            else:
                p.normal_(0.0, 0.02, generator=gen)
    return model.eval().requires_grad_(False)


def inductor_settings():
    """generate.py's Inductor settings (each set only where this PyTorch still has it)."""
    import torch._inductor.config as ic

    for obj, name in ((ic, "coordinate_descent_tuning"), (ic.triton, "unique_kernel_names"), (ic, "fx_graph_cache")):
        if hasattr(obj, name):
            setattr(obj, name, True)


def math_attention():
    """The SDPA backend generate.py decodes under: math, which Inductor then fuses and generates."""
    try:
        from torch.nn.attention import SDPBackend, sdpa_kernel
        return sdpa_kernel([SDPBackend.MATH])
    except ImportError:
        return torch.backends.cuda.sdp_kernel(enable_flash=False, enable_mem_efficient=False, enable_math=True)


def decode_step(model, token, input_pos):
    """One decode step, greedy: the next token id for each sequence, shape [batch, 1]."""
    logits = model(token, input_pos)
    return torch.argmax(logits[:, -1], dim=-1, keepdim=True).to(torch.int)


def sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize(device)


@torch.no_grad()
def generate(model, step, prompt, new_tokens):
    """Prefill (eager, as generate.py without --compile_prefill), then new_tokens - 1 decode steps.
    Returns (seconds per decode step, the generated ids)."""
    device = prompt.device
    input_pos = torch.arange(0, prompt.numel(), device=device)
    token = decode_step(model, prompt.view(1, -1), input_pos)
    input_pos = torch.tensor([prompt.numel()], device=device, dtype=torch.int)
    tokens = [token]
    sync(device)
    t = time.perf_counter()
    with math_attention():
        for _ in range(new_tokens - 1):
            # clone: a CUDA-graph replay reuses its output buffer on the next call
            token = step(model, token, input_pos).clone()
            input_pos += 1
            tokens.append(token)
    sync(device)
    elapsed = time.perf_counter() - t
    return elapsed / (new_tokens - 1), torch.cat(tokens, dim=-1)[0].tolist()


def decode_ms(gpt_fast_dir, model_name, prompt_ids, new_tokens=NEW, device="cuda", compile=True, runs=3):
    """gpt-fast's ms per decode step on `model_name`'s shapes (configs/<model_name>.yaml, or a path to a
    kiln YAML). Returns a dict: ms_per_token, compile_s (the first, warm-up generation), tokens (of
    the last run), notes. Raises Unsupported for models model.py does not describe."""
    cfg_path = model_name if model_name.endswith(".yaml") else os.path.join(ROOT, "configs", model_name + ".yaml")
    cfg = hf_config_dict(cfg_path)
    mod = load_model_py(gpt_fast_dir)
    device = torch.device(device)
    args, notes = model_args(mod, cfg, len(prompt_ids) + new_tokens)
    model = build(mod, args, cfg.get("tie_word_embeddings", False), device)
    with device:  # setup_caches makes the KV cache, RoPE table and mask on the default device
        model.setup_caches(max_batch_size=1, max_seq_length=len(prompt_ids) + new_tokens)
    step = decode_step
    if compile:
        inductor_settings()
        step = torch.compile(decode_step, mode="reduce-overhead", fullgraph=True)
    else:
        notes.append("not compiled")
    prompt = torch.tensor(prompt_ids, device=device, dtype=torch.long)
    t = time.perf_counter()
    generate(model, step, prompt, new_tokens)  # compiles; CUDA graphs are recorded within
    compile_s = time.perf_counter() - t
    best, tokens = min(generate(model, step, prompt, new_tokens) for _ in range(runs))
    del model, step
    torch._dynamo.reset()
    if device.type == "cuda":
        torch.cuda.empty_cache()
    return {"ms_per_token": best * 1e3, "compile_s": compile_s, "tokens": tokens, "notes": notes}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("model", help="a kiln model name (configs/<model>.yaml) or a kiln YAML path")
    ap.add_argument("--gpt-fast", required=True, help="directory holding gpt-fast's model.py")
    ap.add_argument("--prompt-ids", help=f"comma list (default: {PROMPT} random ids, seeded)")
    ap.add_argument("--new-tokens", type=int, default=NEW)
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--no-compile", action="store_true", help="eager (checks on the CPU)")
    ap.add_argument("--runs", type=int, default=3, help="timed generations after the warm-up; the best counts")
    ap.add_argument("--json", action="store_true", help="print the result as one JSON line")
    args = ap.parse_args()
    if args.prompt_ids:
        ids = [int(t) for t in args.prompt_ids.split(",")]
    else:
        cfg_path = args.model if args.model.endswith(".yaml") else os.path.join(ROOT, "configs", args.model + ".yaml")
        vocab = hf_config_dict(cfg_path)["vocab_size"]
        ids = torch.randint(3, vocab, (PROMPT,), generator=torch.Generator().manual_seed(5)).tolist()
    try:
        r = decode_ms(args.gpt_fast, args.model, ids, args.new_tokens, args.device, not args.no_compile, args.runs)
    except Unsupported as e:
        r = {"unsupported": str(e)}
    if args.json:
        print(json.dumps(r))
    elif "unsupported" in r:
        print(f"{args.model}: not supported by gpt-fast: {r['unsupported']}")
    else:
        print(f"{args.model}: gpt-fast {r['ms_per_token']:.3f} ms/token (compile + warm-up {r['compile_s']:.1f} s)"
              + "".join(f"; {n}" for n in r["notes"]))


if __name__ == "__main__":
    main()
