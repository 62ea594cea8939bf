"""Building the HF transformers model that a kiln config describes.

kiln configs use HF's field names, so a config maps onto an HF config almost one to one. Used by
make_golden.py (tiny fixtures) and compare_hf.py (real-shape checks on the GPU machine).
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


def build_model(cfg_dict, seed, dtype=torch.float32, device="cpu"):
    """A randomly initialized model of that config, its weights rounded to bf16.

    Weights are rounded through bf16 whatever `dtype` is, so an fp32 model computes exactly on
    the values saved to the bf16 checkpoint. Initialization is widened (std 0.1 instead of HF's
    0.02) and norm weights drawn around 1, so tiny random models produce varied, decisive logits.
    """
    from transformers import AutoConfig, AutoModelForCausalLM

    config = AutoConfig.for_model(**cfg_dict)
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
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
    return AutoModelForCausalLM.from_pretrained(out_dir, dtype=torch.float32).eval()


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
