#!/usr/bin/python3
"""Logits of a Hugging Face model directory computed by transformers itself (optional check).

Loads DIR with transformers.AutoModelForCausalLM (float64, eager attention) and prints
{"logits": [[...], ...]} for the given ids, the same JSON as hf_reference.py, so a test can compare
Strata, the numpy reference and transformers on one export. With --make-random FAMILY OUT it
instead writes a small random model with save_pretrained (safetensors), for import tests: gpt2,
llama, deepseek_v3 (q_lora_rank 12, YaRN with mscale 0.9 / mscale_all_dim 0.7, layer 0 dense,
layers 1-2 MoE with 8 experts in 4 groups (2 kept), top-4, 2 shared experts, routed_scaling_factor
2.5, random e_score_correction_bias) or deepseek_v3_qproj (q_lora_rank null, one group, top-2,
one shared expert, tied embeddings, YaRN factor 16 with mscale = mscale_all_dim = 1). transformers'
DeepseekV3ForCausalLM has no MTP layers, so save_pretrained writes none (num_nextn_predict_layers 0).
Exits 77 when torch or transformers is not importable, or too old for the model (the caller skips).

Usage: hf_transformers_logits.py DIR 1,2,3
       hf_transformers_logits.py --make-random {gpt2,llama,deepseek_v3,deepseek_v3_qproj} OUT
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


def deepseek_kwargs(family):
    common = dict(vocab_size=96, hidden_size=32, num_hidden_layers=3, num_attention_heads=4, num_key_value_heads=4,
                  kv_lora_rank=8, qk_nope_head_dim=6, qk_rope_head_dim=4, v_head_dim=5, intermediate_size=40,
                  moe_intermediate_size=12, first_k_dense_replace=1, max_position_embeddings=64, rms_norm_eps=1e-6,
                  num_nextn_predict_layers=0)
    if family == "deepseek_v3":
        return dict(common, q_lora_rank=12, n_routed_experts=8, n_shared_experts=2, num_experts_per_tok=4, n_group=4,
                    topk_group=2, routed_scaling_factor=2.5, tie_word_embeddings=False,
                    rope_parameters={"rope_type": "yarn", "rope_theta": 10000.0, "factor": 4.0,
                                     "original_max_position_embeddings": 16, "beta_fast": 32.0, "beta_slow": 1.0,
                                     "mscale": 0.9, "mscale_all_dim": 0.7})
    return dict(common, q_lora_rank=None, n_routed_experts=4, n_shared_experts=1, num_experts_per_tok=2, n_group=1,
                topk_group=1, routed_scaling_factor=1.0, tie_word_embeddings=True,
                rope_parameters={"rope_type": "yarn", "rope_theta": 10000.0, "factor": 16.0,
                                 "original_max_position_embeddings": 4, "beta_fast": 32.0, "beta_slow": 1.0,
                                 "mscale": 1.0, "mscale_all_dim": 1.0})


def make_random(family, out):
    torch.manual_seed(0)
    if family == "llama":
        cfg = transformers.LlamaConfig(vocab_size=96, hidden_size=32, intermediate_size=40, num_hidden_layers=2,
                                       num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=32,
                                       rms_norm_eps=1e-5, rope_theta=10000.0, tie_word_embeddings=False)
        model = transformers.LlamaForCausalLM(cfg)
    elif family.startswith("deepseek_v3"):
        model = transformers.DeepseekV3ForCausalLM(transformers.DeepseekV3Config(**deepseek_kwargs(family)))
    else:
        cfg = transformers.GPT2Config(vocab_size=96, n_embd=32, n_layer=2, n_head=4, n_positions=32)
        model = transformers.GPT2LMHeadModel(cfg)
    with torch.no_grad():  # non-trivial norms and biases
        for name, p in model.named_parameters():
            if p.dim() == 1:
                p.copy_(torch.rand_like(p) * 0.5 + (0.75 if "weight" in name else -0.25))
            elif family.startswith("deepseek_v3"):  # DeepseekV3's init std 0.02 leaves routing flat
                p.normal_(0.0, 0.3)
        for name, b in model.named_buffers():
            if name.endswith("e_score_correction_bias"):  # a trained model's bias steers the choice
                b.copy_(torch.rand_like(b) * 0.2 - 0.1)
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
    if "head_dim" in cfg and cfg.get("model_type") != "deepseek_v3":  # older ones derive it from hidden / heads
        probe = transformers.AutoModelForCausalLM.from_config(transformers.AutoConfig.from_pretrained(sys.argv[1]))
        if probe.model.layers[0].self_attn.q_proj.weight.shape[0] != cfg["num_attention_heads"] * cfg["head_dim"]:
            sys.exit(77)
    # Eager attention and experts: the grouped-GEMM experts of transformers 5 take no float64.
    extra = {"experts_implementation": "eager"} if int(transformers.__version__.split(".")[0]) >= 5 else {}
    model = transformers.AutoModelForCausalLM.from_pretrained(sys.argv[1], torch_dtype=torch.float64,
                                                              attn_implementation="eager", **extra)
    model.eval()
    with torch.no_grad():
        logits = model(torch.tensor([ids])).logits[0]
    json.dump({"logits": logits.tolist()}, sys.stdout)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
