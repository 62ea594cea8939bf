"""Building the HF transformers model that a kiln config describes, and comparing greedy tokens.

kiln configs use HF's field names, so a config maps onto an HF config almost one to one. Used by
make_golden.py (tiny fixtures), compare_hf.py (real-shape checks on the GPU machine),
tools/bench/bench.py (HF's decode speed) and tools/smollm2_check.py.
"""
import copy

import torch
import yaml

MODEL_TYPE = {"llama": "llama", "qwen3": "qwen3", "deepseek_v2": "deepseek_v2"}


def hf_config_dict(kiln_config_path):
    """The HF config.json dict for a kiln YAML config."""
    with open(kiln_config_path) as f:
        doc = yaml.safe_load(f)
    arch = dict(doc["model"])
    family = arch.pop("family")
    cfg = {"model_type": MODEL_TYPE[family], "hidden_act": "silu", "torch_dtype": "bfloat16",
           "attention_bias": False}
    if family == "llama":
        cfg["architectures"] = ["LlamaForCausalLM"]
        cfg["mlp_bias"] = False
    elif family == "qwen3":
        cfg["architectures"] = ["Qwen3ForCausalLM"]
    else:
        cfg["architectures"] = ["DeepseekV2ForCausalLM"]
    cfg.update(arch)
    return cfg


def use_original_deepseek_v2_routing():
    """transformers 5.17's DeepseekV2TopkRouter always multiplies the top-k weights by
    routed_scaling_factor and ignores norm_topk_prob. DeepSeek-V2's own modeling code (the
    published checkpoints' trust_remote_code model) renormalizes them instead when norm_topk_prob
    is set and top_k > 1. kiln implements the original; the references patch HF to match."""
    import torch.nn.functional as F
    from transformers.models.deepseek_v2 import modeling_deepseek_v2 as m

    if getattr(m.DeepseekV2TopkRouter, "_kiln_original_routing", False):
        return

    def forward(self, hidden_states):
        hidden_states = hidden_states.view(-1, self.hidden_dim)
        router_logits = F.linear(hidden_states.type(torch.float32), self.weight.type(torch.float32))
        scores = router_logits.softmax(dim=-1, dtype=torch.float32)
        if self.topk_method == "group_limited_greedy":
            group_scores = scores.view(-1, self.num_group, self.num_experts // self.num_group).max(dim=-1).values
            group_idx = torch.topk(group_scores, k=self.topk_group, dim=-1, sorted=False)[1]
            group_mask = torch.zeros_like(group_scores).scatter_(1, group_idx, 1)
            score_mask = (group_mask.unsqueeze(-1).expand(-1, self.num_group, self.num_experts // self.num_group)
                          .reshape(-1, self.num_experts))
            scores = scores.masked_fill(~score_mask.bool(), 0.0)
        topk_weights, topk_indices = torch.topk(scores, k=self.top_k, dim=-1, sorted=False)
        if self.top_k > 1 and self.kiln_norm_topk_prob:
            topk_weights = topk_weights / (topk_weights.sum(dim=-1, keepdim=True) + 1e-20)
        else:
            topk_weights = topk_weights * self.routed_scaling_factor
        return router_logits, topk_weights, topk_indices

    init = m.DeepseekV2TopkRouter.__init__

    def init_with_norm(self, config):
        init(self, config)
        self.kiln_norm_topk_prob = bool(config.norm_topk_prob)

    m.DeepseekV2TopkRouter.__init__ = init_with_norm
    m.DeepseekV2TopkRouter.forward = forward
    m.DeepseekV2TopkRouter._kiln_original_routing = True


def use_kiln_routing(model_type):
    """HF routes DeepSeek-V2 differently from kiln (use_original_deepseek_v2_routing); call before
    building or loading a model of `model_type`. Other families need nothing."""
    if model_type == "deepseek_v2":
        use_original_deepseek_v2_routing()


def from_kiln_config(cfg_dict, dtype=torch.float32, device="cpu", attn_implementation=None):
    """A model of that HF config dict (hf_config_dict, or a config.json), built by HF's from_config
    on `device` in `dtype` with HF's random initialization (seeded by torch.manual_seed beforehand),
    in eval mode. DeepSeek-V2 models route as kiln does. `attn_implementation`: HF's ("eager",
    "sdpa", ...; None: HF's default)."""
    from transformers import AutoConfig, AutoModelForCausalLM

    use_kiln_routing(cfg_dict["model_type"])
    with torch.device(device):
        kwargs = {"attn_implementation": attn_implementation} if attn_implementation else {}
        return AutoModelForCausalLM.from_config(AutoConfig.for_model(**cfg_dict), dtype=dtype, **kwargs).eval()


def build_model(cfg_dict, seed, dtype=torch.float32, device="cpu"):
    """A randomly initialized model of that config, its weights rounded to bf16.

    Weights are rounded through bf16 whatever `dtype` is, so an fp32 model computes exactly on
    the values saved to the bf16 checkpoint. Initialization is widened (std 0.1 instead of HF's
    0.02) and norm weights drawn around 1, so tiny random models produce varied, decisive logits.
    """
    torch.manual_seed(seed)
    model = from_kiln_config(cfg_dict)
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() == 1:  # RMSNorm weights
                p.copy_(1.0 + 0.1 * torch.randn(p.shape, generator=generator))
            else:
                p.copy_(0.1 * torch.randn(p.shape, generator=generator))
            p.copy_(p.to(torch.bfloat16).to(torch.float32))
    return model.to(device=device, dtype=dtype).eval()


def save_checkpoint(model, out_dir):
    """Writes config.json + model.safetensors with bf16 weights (save_pretrained), and returns the
    checkpoint reloaded in fp32: the reference computes on exactly the saved values. (Converting
    the model in place would also round buffers such as RoPE's inv_freq to bf16.)"""
    from transformers import AutoModelForCausalLM

    copy.deepcopy(model).to(torch.bfloat16).save_pretrained(out_dir, safe_serialization=True)
    use_kiln_routing(model.config.model_type)
    return AutoModelForCausalLM.from_pretrained(out_dir, dtype=torch.float32).eval()


def set_expert_layout(out_dir, fused):
    """Writes a saved DeepSeek checkpoint's routed experts in the requested layout: fused, as
    transformers 5 holds them in memory (mlp.experts.gate_up_proj [E, 2I, H], gate rows first;
    mlp.experts.down_proj [E, H, I]); or per expert, as the published DeepSeek-V2 checkpoints
    (mlp.experts.{e}.gate_proj.weight [I, H], up_proj [I, H], down_proj [H, I]).
    save_pretrained in transformers 5.17 writes the per-expert layout."""
    import re

    from safetensors.torch import load_file, save_file

    path = f"{out_dir}/model.safetensors"
    tensors = load_file(path)
    per_expert = re.compile(r"(.*mlp\.experts\.)(\d+)\.(gate_proj|up_proj|down_proj)\.weight$")
    fused_name = re.compile(r"(.*mlp\.experts\.)(gate_up_proj|down_proj)$")
    out, experts = {}, {}
    for name, t in tensors.items():  # gather every expert tensor as (prefix, expert, kind)
        if m := per_expert.match(name):
            experts.setdefault(m.group(1), {}).setdefault(int(m.group(2)), {})[m.group(3)] = t
        elif m := fused_name.match(name):
            for e in range(t.shape[0]):
                if m.group(2) == "gate_up_proj":
                    inter = t.shape[1] // 2
                    experts.setdefault(m.group(1), {}).setdefault(e, {})["gate_proj"] = t[e, :inter]
                    experts[m.group(1)][e]["up_proj"] = t[e, inter:]
                else:
                    experts.setdefault(m.group(1), {}).setdefault(e, {})["down_proj"] = t[e]
        else:
            out[name] = t
    for prefix, by_expert in experts.items():
        ids = sorted(by_expert)
        if fused:
            out[prefix + "gate_up_proj"] = torch.stack(
                [torch.cat([by_expert[e]["gate_proj"], by_expert[e]["up_proj"]]) for e in ids]).contiguous()
            out[prefix + "down_proj"] = torch.stack([by_expert[e]["down_proj"] for e in ids]).contiguous()
        else:
            for e in ids:
                for kind, t in by_expert[e].items():
                    out[f"{prefix}{e}.{kind}.weight"] = t.contiguous()
    save_file(out, path, metadata={"format": "pt"})


@torch.no_grad()
def greedy(model, prompt_ids, new_tokens):
    """Greedy continuation by full recomputation (no cache: the plainest reference), with the logits
    of each generated step."""
    device = next(model.parameters()).device
    ids = list(prompt_ids)
    step_logits = []
    for _ in range(new_tokens):
        logits = model(torch.tensor([ids], device=device)).logits[0, -1].float()
        step_logits.append(logits.cpu())
        ids.append(int(torch.argmax(logits)))
    return ids[len(prompt_ids):], torch.stack(step_logits)


@torch.no_grad()
def prompt_logits(model, prompt_ids):
    device = next(model.parameters()).device
    return model(torch.tensor([prompt_ids], device=device)).logits[0].float().cpu()


@torch.no_grad()
def greedy_cached(model, prompt_ids, new_tokens):
    """Greedy continuation with HF's KV cache, past end-of-sequence tokens, with each step's logits.
    (generate(min_new_tokens=n) would instead forbid EOS until n tokens: a different sequence from
    kiln's --ignore-eos, which keeps going but does not forbid anything.)"""
    device = next(model.parameters()).device
    x, past, tokens, step_logits = torch.tensor([prompt_ids], device=device), None, [], []
    for _ in range(new_tokens):
        out = model(input_ids=x, past_key_values=past, use_cache=True)
        past = out.past_key_values
        logits = out.logits[0, -1].float()
        tokens.append(int(torch.argmax(logits)))
        step_logits.append(logits.cpu())
        x = torch.tensor([[tokens[-1]]], device=device)
    return tokens, step_logits


def first_difference(a, b):
    """The first index where two token lists differ; the shorter length if one is a prefix of the other."""
    return next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))


def greedy_verdict(ours, hf, hf_logits, kiln_logits_at):
    """vLLM's rule for kiln's greedy tokens `ours` against HF's `hf` (with HF's logits at each step):
    identical, or where they first differ each side's token is in the other's top-5.
    kiln_logits_at(d) returns kiln's logits at step d (the prompt plus hf[:d]); it is called only
    when the tokens differ. Returns (d, ok, verdict text), d the number of equal leading tokens."""
    d = first_difference(ours, hf)
    if d == len(hf):
        return d, True, "identical"
    if d == len(ours):
        return d, False, f"kiln stopped after {d} tokens"
    ours_in_hf = ours[d] in torch.topk(hf_logits[d], 5).indices.tolist()
    hf_in_ours = hf[d] in torch.topk(kiln_logits_at(d), 5).indices.tolist()
    ok = ours_in_hf and hf_in_ours
    return d, ok, (f"first differ at {d} (kiln {ours[d]}, HF {hf[d]}): "
                   + ("each in the other's top-5" if ok else "NOT in each other's top-5"))
