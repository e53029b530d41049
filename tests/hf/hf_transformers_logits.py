#!/usr/bin/python3
"""Logits of a Hugging Face model directory computed by transformers itself (optional check).

Loads DIR with transformers.AutoModelForCausalLM (float64, eager attention) and prints
{"logits": [[...], ...]} for the given ids, the same JSON as hf_reference.py, so a test can compare
Strata, the numpy reference and transformers on one export. With --make-random {gpt2,llama} OUT it
instead writes a small random model with save_pretrained (safetensors), for import tests.
Exits 77 when torch or transformers is not importable, or too old for the model (the caller skips).

Usage: hf_transformers_logits.py DIR 1,2,3
       hf_transformers_logits.py --make-random llama OUT
"""
import json
import sys

import importlib.util

if importlib.util.find_spec("transformers") is None or importlib.util.find_spec("torch") is None:
    sys.exit(77)  # checked before importing: importing torch alone takes seconds
try:
    import torch
    import transformers
except Exception:  # noqa: BLE001 - any import failure means "not available"
    sys.exit(77)


def make_random(family, out):
    torch.manual_seed(0)
    if family == "llama":
        cfg = transformers.LlamaConfig(vocab_size=96, hidden_size=32, intermediate_size=40, num_hidden_layers=2,
                                       num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=32,
                                       rms_norm_eps=1e-5, rope_theta=10000.0, tie_word_embeddings=False)
        model = transformers.LlamaForCausalLM(cfg)
    else:
        cfg = transformers.GPT2Config(vocab_size=96, n_embd=32, n_layer=2, n_head=4, n_positions=32)
        model = transformers.GPT2LMHeadModel(cfg)
    with torch.no_grad():  # non-trivial norms and biases
        for name, p in model.named_parameters():
            if p.dim() == 1:
                p.copy_(torch.rand_like(p) * 0.5 + (0.75 if "weight" in name else -0.25))
    model.save_pretrained(out, safe_serialization=True)


def main():
    if len(sys.argv) == 4 and sys.argv[1] == "--make-random":
        make_random(sys.argv[2], sys.argv[3])
        return
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    ids = [int(v) for v in sys.argv[2].split(",")]
    with open(sys.argv[1] + "/config.json") as f:
        cfg = json.load(f)
    if cfg.get("model_type") not in transformers.models.auto.configuration_auto.CONFIG_MAPPING:
        sys.exit(77)  # this transformers predates the family (Qwen3 needs >= 4.51)
    if "head_dim" in cfg:  # older transformers derive head_dim from hidden_size / heads
        probe = transformers.AutoModelForCausalLM.from_config(transformers.AutoConfig.from_pretrained(sys.argv[1]))
        if probe.model.layers[0].self_attn.q_proj.weight.shape[0] != cfg["num_attention_heads"] * cfg["head_dim"]:
            sys.exit(77)
    model = transformers.AutoModelForCausalLM.from_pretrained(sys.argv[1], torch_dtype=torch.float64,
                                                              attn_implementation="eager")
    model.eval()
    with torch.no_grad():
        logits = model(torch.tensor([ids])).logits[0]
    json.dump({"logits": logits.tolist()}, sys.stdout)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
