#!/root/hfenv/bin/python
"""Dev-time check of gguf-to-hf against HF transformers (not run by ctest: CI has no Python).

usage: check_gguf_to_hf.py MODEL.gguf HF_DIR

HF_DIR is gguf-to-hf's output for MODEL.gguf. Checks that
  1. transformers loads HF_DIR as a LlamaForCausalLM,
  2. every tensor equals what transformers itself dequantizes from the GGUF (its GGUF loader,
     load_gguf_checkpoint, which also undoes the q/k permutation; called directly because
     from_pretrained(gguf_file=...) additionally needs accelerate),
  3. a model built from transformers' own reading of the GGUF config with those tensors gives the
     same prompt logits and greedy tokens, and greedy decoding with the GGUF's tokenizer produces
     text (printed for a human to judge).
Prints the max abs difference per check; exits 1 if any tensor differs or a name is missing.
"""
import os
import sys

import numpy as np
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, LlamaConfig, LlamaForCausalLM
from transformers.modeling_gguf_pytorch_utils import load_gguf_checkpoint


def main() -> int:
    gguf_path, hf_dir = sys.argv[1], sys.argv[2]
    gguf_dir, gguf_name = os.path.split(os.path.abspath(gguf_path))

    ours = AutoModelForCausalLM.from_pretrained(hf_dir, dtype=torch.float32)
    print(f"loaded {type(ours).__name__} from {hf_dir}: {sum(p.numel() for p in ours.parameters())} parameters")
    parsed = load_gguf_checkpoint(gguf_path, return_tensors=True, model_to_load=ours)
    theirs_sd = {name: torch.as_tensor(t).float() for name, t in parsed["tensors"].items()}
    ours_sd = dict(ours.state_dict())
    if ours.config.tie_word_embeddings:
        ours_sd.pop("lm_head.weight", None)  # the embedding itself; the GGUF has no output.weight
    failures = 0

    their_config = LlamaConfig(**{k: v for k, v in parsed["config"].items() if k != "model_type"})
    for field in ("hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
                  "num_key_value_heads", "head_dim", "max_position_embeddings", "rms_norm_eps",
                  "vocab_size", "tie_word_embeddings"):
        a, b = getattr(ours.config, field), getattr(their_config, field)
        if field == "rms_norm_eps":  # stored as FLOAT32: ours is its shortest decimal, theirs the widened double
            a, b = float(np.float32(a)), float(np.float32(b))
        if a != b:
            print(f"config {field}: ours {a}, transformers {b}")
            failures += 1
    if ours.config.rope_parameters["rope_theta"] != their_config.rope_parameters["rope_theta"]:
        print(f"config rope_theta: ours {ours.config.rope_parameters}, transformers {their_config.rope_parameters}")
        failures += 1
    theirs = LlamaForCausalLM(their_config).float().eval()
    missing, unexpected = theirs.load_state_dict(theirs_sd, strict=False)
    if unexpected or [m for m in missing if m != "lm_head.weight"]:
        print("transformers' tensors do not fit its model:", missing, unexpected)
        failures += 1
    theirs.tie_weights()
    if set(ours_sd) != set(theirs_sd):
        print("state_dict names differ:", sorted(set(ours_sd) ^ set(theirs_sd)))
        failures += 1
    worst_name, worst = "", 0.0
    for name in sorted(set(ours_sd) & set(theirs_sd)):
        a, b = ours_sd[name], theirs_sd[name]
        if a.shape != b.shape:
            print(f"{name}: shape {tuple(a.shape)} vs transformers {tuple(b.shape)}")
            failures += 1
            continue
        diff = (a - b).abs().max().item() if a.numel() else 0.0
        if diff > worst:
            worst_name, worst = name, diff
        if diff != 0.0:
            failures += 1
    print(f"tensors compared: {len(set(ours_sd) & set(theirs_sd))}, max abs difference: {worst}"
          + (f" ({worst_name})" if worst_name else ""))

    tokenizer = AutoTokenizer.from_pretrained(gguf_dir, gguf_file=gguf_name)
    messages = [{"role": "user", "content": "What is the capital of France?"}]
    prompt = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    ids = tokenizer(prompt, return_tensors="pt").input_ids
    with torch.no_grad():
        out_ours = ours.generate(ids, max_new_tokens=24, do_sample=False)
        out_theirs = theirs.generate(ids, max_new_tokens=24, do_sample=False)
        logits_diff = (ours(ids).logits - theirs(ids).logits).abs().max().item()
    print(f"prompt logits max abs difference: {logits_diff}")
    print("greedy (gguf-to-hf):  ", repr(tokenizer.decode(out_ours[0, ids.shape[1]:])))
    print("greedy (transformers):", repr(tokenizer.decode(out_theirs[0, ids.shape[1]:])))
    if not torch.equal(out_ours, out_theirs):
        print("greedy tokens differ")
        failures += 1
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
