#!/usr/bin/env python3
"""Hugging Face directories written and read by transformers' own config classes (no torch).

Run with the .pyenv/bin/python that scripts/setup.sh makes (transformers + safetensors, pinned there).
Exits 3, saying so, when transformers or safetensors is missing.

  make FAMILY OUT [--old-spelling]
      A tiny FAMILY (llama, qwen3, gpt2, mixtral, qwen3_moe, nemotron_h, nemotron_h_mamba, deepseek_v3,
      deepseek_v3_qproj)
      model as transformers 5
      writes it: config.json from the family's config class (LlamaConfig(...).save_pretrained),
      random weights under the family's tensor names with numpy + safetensors.numpy.save_file.
      --old-spelling rewrites config.json as the Hub's configs from before transformers 5 spell
      it: top-level rope_theta / rope_scaling instead of rope_parameters, torch_dtype instead of
      dtype, Qwen3-MoE's num_experts instead of num_local_experts, NemotronH's
      hybrid_override_pattern instead of layers_block_type and a bare Infinity (Python's json) in
      time_step_limit instead of transformers 5's {"__float__": "Infinity"}, DeepSeek-V3's
      rope_scaling {"type": "yarn", ...} as DeepSeek's own config.json spells it.
      deepseek_v3: q_lora_rank 12, YaRN with mscale / mscale_all_dim, layer 0 dense and layers 1, 2
      MoE (8 experts in 4 groups, 2 kept, top-4, 2 shared experts), one MTP layer stored as DeepSeek
      stores it (model.layers.3.{enorm, hnorm, eh_proj, shared_head.*, embed_tokens} and a decoder
      layer; the embedding and head copies equal the model's). deepseek_v3_qproj: q_lora_rank null
      (DeepSeek-V2-Lite's q_proj), one group, top-2, one shared expert, tied embeddings, YaRN with
      DeepSeek-V3's mscale 1 / mscale_all_dim 1, no MTP layer. nemotron_h: layers mamba, attention,
      mlp, moe (the legacy names, which transformers remaps) with 4 Mamba heads of 16 in 2 groups,
      GQA 4/2, an MoE of 8 experts in 4 groups (2 kept), top-4, routed_scaling_factor 2.5, a shared
      expert and moe_latent_size 16, untied; nemotron_h_mamba: mamba, attention, mamba, attention,
      tied. Their weights under the Hub's names ("backbone.", one tensor per expert). gpt_oss: 3 layers
      (sliding window 4 on layers 0 and 2, GptOssConfig's default layer_types), GQA 4/2 of head_dim 8,
      4 experts of 12, top-2, swiglu_limit 1.0, YaRN factor 4 over 16 (truncate false); the experts
      fused ([E, h, 2F] gate/up interleaved), as transformers and the Hub's bf16 checkpoints store them.
      Prints transformers' reading of the directory (see `read`).
  read DIR
      Prints {"transformers_version", "reading": {...}}: the settings the family's modeling code
      takes from AutoConfig.from_pretrained(DIR) (RoPE theta/type/factor after transformers'
      standardisation, YaRN's other keys, head_dim as the attention layer computes it, experts, layer rule, ...).
  check DIR
      Checks that an export (Strata's) is written in this transformers version's spelling and loads:
      every config.json key is one the family's config class knows (besides "strata", Strata's
      own), saving the loaded config again gives back every key with the same value, and
      model.safetensors holds exactly the tensors (names, shapes) the family has for the config.
      Prints the same JSON as `read`; exits 1 naming what differs.

Reference: transformers models/{llama,qwen3,gpt2,mixtral,qwen3_moe,nemotron_h,deepseek_v3,gpt_oss}/configuration_*.py,
modeling_rope_utils.py (RotaryEmbeddingConfigMixin.standardize_rope_params), configuration_utils.py
(PreTrainedConfig.save_pretrained, _encode_special_floats); modeling_*.py for the tensor names.
"""
import json
import os
import sys
import tempfile

try:
    import numpy as np
    import safetensors.numpy
    import transformers
except ImportError as e:  # the caller turns this into a test failure (setup.sh installs them)
    print("hf_transformers_config.py: %s (run scripts/setup.sh, which installs transformers and safetensors "
          "into .pyenv)" % e)
    sys.exit(3)

CLASSES = {"llama": "LlamaConfig", "qwen3": "Qwen3Config", "gpt2": "GPT2Config", "mixtral": "MixtralConfig",
           "qwen3_moe": "Qwen3MoeConfig", "nemotron_h": "NemotronHConfig", "nemotron_h_mamba": "NemotronHConfig",
           "deepseek_v3": "DeepseekV3Config", "deepseek_v3_qproj": "DeepseekV3Config", "gpt_oss": "GptOssConfig"}
ARCHS = {"llama": "LlamaForCausalLM", "qwen3": "Qwen3ForCausalLM", "gpt2": "GPT2LMHeadModel",
         "mixtral": "MixtralForCausalLM", "qwen3_moe": "Qwen3MoeForCausalLM", "nemotron_h": "NemotronHForCausalLM",
         "nemotron_h_mamba": "NemotronHForCausalLM", "deepseek_v3": "DeepseekV3ForCausalLM",
         "deepseek_v3_qproj": "DeepseekV3ForCausalLM", "gpt_oss": "GptOssForCausalLM"}
DEEPSEEK = dict(vocab_size=96, hidden_size=32, num_hidden_layers=3, num_attention_heads=4, num_key_value_heads=4,
                kv_lora_rank=8, qk_nope_head_dim=6, qk_rope_head_dim=4, v_head_dim=5, intermediate_size=40,
                moe_intermediate_size=12, first_k_dense_replace=1, max_position_embeddings=64, rms_norm_eps=1e-6)
NEMOTRON_H = dict(vocab_size=96, hidden_size=32, num_attention_heads=4, num_key_value_heads=2, head_dim=8,
                  mamba_num_heads=4, mamba_head_dim=16, n_groups=2, ssm_state_size=8, chunk_size=8,
                  intermediate_size=40, max_position_embeddings=16, layer_norm_epsilon=1e-5, tie_word_embeddings=False)
LLAMA_LIKE = dict(vocab_size=96, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                  max_position_embeddings=16, rms_norm_eps=1e-5, tie_word_embeddings=False)


def family_kwargs(family):
    """Small configs that exercise each family's spelling: a RoPE theta that is not the default (or the
    family's default where that differs: Mixtral's 1e6), Llama 3 scaling, an explicit head_dim."""
    if family == "llama":
        return dict(LLAMA_LIKE, intermediate_size=40, head_dim=12,
                    rope_parameters={"rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0,
                                     "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                                     "original_max_position_embeddings": 8192})
    if family == "qwen3":
        return dict(LLAMA_LIKE, intermediate_size=40, head_dim=8,
                    rope_parameters={"rope_type": "default", "rope_theta": 1000000.0})
    if family == "mixtral":  # rope_theta left to MixtralConfig's default_theta (1e6)
        return dict(LLAMA_LIKE, intermediate_size=24, num_local_experts=4, num_experts_per_tok=2)
    if family == "qwen3_moe":
        return dict(LLAMA_LIKE, intermediate_size=40, moe_intermediate_size=24, num_experts=4, num_experts_per_tok=2,
                    norm_topk_prob=True, mlp_only_layers=[0], decoder_sparse_step=1,
                    rope_parameters={"rope_type": "default", "rope_theta": 20000.0})
    if family == "gpt2":
        return dict(vocab_size=96, n_embd=32, n_layer=2, n_head=4, n_positions=16, activation_function="gelu_new",
                    bos_token_id=0, eos_token_id=0)
    if family == "nemotron_h":
        return dict(NEMOTRON_H, layers_block_type=["mamba", "attention", "mlp", "moe"], n_routed_experts=8,
                    num_experts_per_tok=4, moe_intermediate_size=12, moe_shared_expert_intermediate_size=20,
                    moe_latent_size=16, n_group=4, topk_group=2, routed_scaling_factor=2.5, norm_topk_prob=True)
    if family == "nemotron_h_mamba":
        return dict(NEMOTRON_H, layers_block_type=["mamba", "attention", "mamba", "attention"], tie_word_embeddings=True)
    if family == "deepseek_v3":
        return dict(DEEPSEEK, q_lora_rank=12, n_routed_experts=8, n_shared_experts=2, num_experts_per_tok=4, n_group=4,
                    topk_group=2, routed_scaling_factor=2.5, norm_topk_prob=True, tie_word_embeddings=False,
                    num_nextn_predict_layers=1,
                    rope_parameters={"rope_type": "yarn", "rope_theta": 10000.0, "factor": 4.0,
                                     "original_max_position_embeddings": 16, "beta_fast": 32.0, "beta_slow": 1.0,
                                     "mscale": 0.9, "mscale_all_dim": 0.7})
    if family == "deepseek_v3_qproj":
        return dict(DEEPSEEK, q_lora_rank=None, n_routed_experts=4, n_shared_experts=1, num_experts_per_tok=2, n_group=1,
                    topk_group=1, routed_scaling_factor=1.0, norm_topk_prob=True, tie_word_embeddings=True,
                    num_nextn_predict_layers=0,
                    rope_parameters={"rope_type": "yarn", "rope_theta": 10000.0, "factor": 16.0,
                                     "original_max_position_embeddings": 4, "beta_fast": 32.0, "beta_slow": 1.0,
                                     "mscale": 1.0, "mscale_all_dim": 1.0})
    if family == "gpt_oss":
        return dict(vocab_size=96, hidden_size=32, num_hidden_layers=3, num_attention_heads=4, num_key_value_heads=2,
                    head_dim=8, num_local_experts=4, num_experts_per_tok=2, intermediate_size=12, sliding_window=4,
                    max_position_embeddings=64, rms_norm_eps=1e-5, swiglu_limit=1.0, tie_word_embeddings=False,
                    rope_parameters={"rope_type": "yarn", "rope_theta": 150000.0, "factor": 4.0, "beta_fast": 32.0,
                                     "beta_slow": 1.0, "truncate": False, "original_max_position_embeddings": 16})
    raise SystemExit("unknown family " + family)


def head_dim(cfg):
    """As the attention layers compute it (getattr(config, "head_dim", ...) or hidden / heads)."""
    return getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads


def tensor_shapes(cfg):
    """{name: shape} of the family's safetensors for config cfg (modeling_*.py module names; MoE experts one
    tensor per expert, as the Hub stores them and transformers' conversion_mapping.py reads them)."""
    t = {}
    if cfg.model_type == "gpt2":
        h, f = cfg.n_embd, cfg.n_inner or 4 * cfg.n_embd
        t["transformer.wte.weight"] = (cfg.vocab_size, h)
        t["transformer.wpe.weight"] = (cfg.n_positions, h)
        for i in range(cfg.n_layer):
            p = "transformer.h.%d." % i
            for ln in ("ln_1", "ln_2"):
                t[p + ln + ".weight"] = t[p + ln + ".bias"] = (h,)
            t[p + "attn.c_attn.weight"], t[p + "attn.c_attn.bias"] = (h, 3 * h), (3 * h,)  # Conv1D [in, out]
            t[p + "attn.c_proj.weight"], t[p + "attn.c_proj.bias"] = (h, h), (h,)
            t[p + "mlp.c_fc.weight"], t[p + "mlp.c_fc.bias"] = (h, f), (f,)
            t[p + "mlp.c_proj.weight"], t[p + "mlp.c_proj.bias"] = (f, h), (h,)
        t["transformer.ln_f.weight"] = t["transformer.ln_f.bias"] = (h,)
        if not cfg.tie_word_embeddings:
            t["lm_head.weight"] = (cfg.vocab_size, h)
        return t
    if cfg.model_type == "deepseek_v3":
        return deepseek_shapes(cfg)
    if cfg.model_type == "nemotron_h":
        return nemotron_h_shapes(cfg)
    if cfg.model_type == "gpt_oss":
        return gpt_oss_shapes(cfg)
    h, hd = cfg.hidden_size, head_dim(cfg)
    nh, nkv = cfg.num_attention_heads, cfg.num_key_value_heads
    t["model.embed_tokens.weight"] = (cfg.vocab_size, h)
    for i in range(cfg.num_hidden_layers):
        p = "model.layers.%d." % i
        t[p + "input_layernorm.weight"] = t[p + "post_attention_layernorm.weight"] = (h,)
        t[p + "self_attn.q_proj.weight"] = (nh * hd, h)
        t[p + "self_attn.k_proj.weight"] = t[p + "self_attn.v_proj.weight"] = (nkv * hd, h)
        t[p + "self_attn.o_proj.weight"] = (h, nh * hd)
        if cfg.model_type in ("qwen3", "qwen3_moe"):
            t[p + "self_attn.q_norm.weight"] = t[p + "self_attn.k_norm.weight"] = (hd,)
        if cfg.model_type == "mixtral":
            experts, names, f, block = cfg.num_local_experts, ("w1", "w3", "w2"), cfg.intermediate_size, "block_sparse_moe."
        elif cfg.model_type == "qwen3_moe" and i not in cfg.mlp_only_layers and (i + 1) % cfg.decoder_sparse_step == 0:
            experts, names, f, block = cfg.num_local_experts, ("gate_proj", "up_proj", "down_proj"), \
                cfg.moe_intermediate_size, "mlp."
        else:
            experts, f = 0, cfg.intermediate_size
            t[p + "mlp.gate_proj.weight"] = t[p + "mlp.up_proj.weight"] = (f, h)
            t[p + "mlp.down_proj.weight"] = (h, f)
        if experts:
            t[p + block + "gate.weight"] = (experts, h)
            for e in range(experts):
                q = p + block + "experts.%d." % e
                t[q + names[0] + ".weight"] = t[q + names[1] + ".weight"] = (f, h)
                t[q + names[2] + ".weight"] = (h, f)
    t["model.norm.weight"] = (h,)
    if not cfg.tie_word_embeddings:
        t["lm_head.weight"] = (cfg.vocab_size, h)
    return t


def deepseek_shapes(cfg):
    """DeepseekV3ForCausalLM's tensors (modeling_deepseek_v3.py), plus the num_nextn_predict_layers MTP layers
    as DeepSeek's checkpoints store them after the decoder layers (model.layers.{num_hidden_layers + k}: the
    decoder layer's tensors, enorm, hnorm, eh_proj [h, 2h], shared_head.norm, shared_head.head and embed_tokens)."""
    t = {}
    h, nh, v = cfg.hidden_size, cfg.num_attention_heads, cfg.vocab_size
    qk = cfg.qk_nope_head_dim + cfg.qk_rope_head_dim
    t["model.embed_tokens.weight"] = (v, h)
    for i in range(cfg.num_hidden_layers + cfg.num_nextn_predict_layers):
        p = "model.layers.%d." % i
        t[p + "input_layernorm.weight"] = t[p + "post_attention_layernorm.weight"] = (h,)
        a = p + "self_attn."
        if cfg.q_lora_rank is None:
            t[a + "q_proj.weight"] = (nh * qk, h)
        else:
            t[a + "q_a_proj.weight"], t[a + "q_a_layernorm.weight"] = (cfg.q_lora_rank, h), (cfg.q_lora_rank,)
            t[a + "q_b_proj.weight"] = (nh * qk, cfg.q_lora_rank)
        t[a + "kv_a_proj_with_mqa.weight"] = (cfg.kv_lora_rank + cfg.qk_rope_head_dim, h)
        t[a + "kv_a_layernorm.weight"] = (cfg.kv_lora_rank,)
        t[a + "kv_b_proj.weight"] = (nh * (cfg.qk_nope_head_dim + cfg.v_head_dim), cfg.kv_lora_rank)
        t[a + "o_proj.weight"] = (h, nh * cfg.v_head_dim)
        mlps = []
        if i >= cfg.first_k_dense_replace:
            t[p + "mlp.gate.weight"], t[p + "mlp.gate.e_score_correction_bias"] = (cfg.n_routed_experts, h), \
                (cfg.n_routed_experts,)
            mlps = [(p + "mlp.experts.%d." % e, cfg.moe_intermediate_size) for e in range(cfg.n_routed_experts)]
            mlps.append((p + "mlp.shared_experts.", cfg.moe_intermediate_size * cfg.n_shared_experts))
        else:
            mlps = [(p + "mlp.", cfg.intermediate_size)]
        for q, f in mlps:
            t[q + "gate_proj.weight"] = t[q + "up_proj.weight"] = (f, h)
            t[q + "down_proj.weight"] = (h, f)
        if i >= cfg.num_hidden_layers:
            t[p + "enorm.weight"] = t[p + "hnorm.weight"] = t[p + "shared_head.norm.weight"] = (h,)
            t[p + "eh_proj.weight"] = (h, 2 * h)
            t[p + "shared_head.head.weight"] = t[p + "embed_tokens.weight"] = (v, h)
    t["model.norm.weight"] = (h,)
    if not cfg.tie_word_embeddings:
        t["lm_head.weight"] = (v, h)
    return t


def nemotron_h_shapes(cfg):
    """NemotronHForCausalLM's tensors as the Hub stores them (Megatron-Bridge's names: "backbone.", one tensor
    per expert; transformers 5 renames them on load, conversion_mapping.py "nemotron_h")."""
    t = {}
    h, v = cfg.hidden_size, cfg.vocab_size
    di = cfg.mamba_num_heads * cfg.mamba_head_dim
    conv_dim = di + 2 * cfg.n_groups * cfg.ssm_state_size
    nh, nkv, hd = cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_dim
    t["backbone.embeddings.weight"] = (v, h)
    for i, kind in enumerate(cfg.layers_block_type):
        p = "backbone.layers.%d." % i
        t[p + "norm.weight"] = (h,)
        m = p + "mixer."
        if kind == "linear_attention":
            t[m + "in_proj.weight"] = (di + conv_dim + cfg.mamba_num_heads, h)
            t[m + "conv1d.weight"], t[m + "conv1d.bias"] = (conv_dim, 1, cfg.conv_kernel), (conv_dim,)
            t[m + "dt_bias"] = t[m + "A_log"] = t[m + "D"] = (cfg.mamba_num_heads,)
            t[m + "norm.weight"], t[m + "out_proj.weight"] = (di,), (h, di)
        elif kind == "full_attention":
            t[m + "q_proj.weight"], t[m + "o_proj.weight"] = (nh * hd, h), (h, nh * hd)
            t[m + "k_proj.weight"] = t[m + "v_proj.weight"] = (nkv * hd, h)
        elif kind == "mlp":
            t[m + "up_proj.weight"], t[m + "down_proj.weight"] = (cfg.intermediate_size, h), (h, cfg.intermediate_size)
        else:
            e, f, s = cfg.n_routed_experts, cfg.moe_intermediate_size, cfg.moe_shared_expert_intermediate_size
            inner = cfg.moe_latent_size or h
            t[m + "gate.weight"], t[m + "gate.e_score_correction_bias"] = (e, h), (e,)
            for x in range(e):
                t[m + "experts.%d.up_proj.weight" % x], t[m + "experts.%d.down_proj.weight" % x] = (f, inner), (inner, f)
            t[m + "shared_experts.up_proj.weight"], t[m + "shared_experts.down_proj.weight"] = (s, h), (h, s)
            if cfg.moe_latent_size is not None:
                t[m + "fc1_latent_proj.weight"] = (cfg.moe_latent_size, h)
                t[m + "fc2_latent_proj.weight"] = (h, cfg.moe_latent_size)
    t["backbone.norm_f.weight"] = (h,)
    if not cfg.tie_word_embeddings:
        t["lm_head.weight"] = (v, h)
    return t


def gpt_oss_shapes(cfg):
    """GptOssForCausalLM's tensors (modeling_gpt_oss.py; the experts fused, as transformers and the Hub's bf16
    checkpoints store them)."""
    t = {}
    h, v, hd = cfg.hidden_size, cfg.vocab_size, head_dim(cfg)
    nh, nkv, e, f = cfg.num_attention_heads, cfg.num_key_value_heads, cfg.num_local_experts, cfg.intermediate_size
    t["model.embed_tokens.weight"] = (v, h)
    for i in range(cfg.num_hidden_layers):
        p = "model.layers.%d." % i
        t[p + "input_layernorm.weight"] = t[p + "post_attention_layernorm.weight"] = (h,)
        t[p + "self_attn.q_proj.weight"], t[p + "self_attn.q_proj.bias"] = (nh * hd, h), (nh * hd,)
        for n in ("k_proj", "v_proj"):
            t[p + "self_attn.%s.weight" % n], t[p + "self_attn.%s.bias" % n] = (nkv * hd, h), (nkv * hd,)
        t[p + "self_attn.o_proj.weight"], t[p + "self_attn.o_proj.bias"] = (h, nh * hd), (h,)
        t[p + "self_attn.sinks"] = (nh,)
        t[p + "mlp.router.weight"], t[p + "mlp.router.bias"] = (e, h), (e,)
        t[p + "mlp.experts.gate_up_proj"], t[p + "mlp.experts.gate_up_proj_bias"] = (e, h, 2 * f), (e, 2 * f)
        t[p + "mlp.experts.down_proj"], t[p + "mlp.experts.down_proj_bias"] = (e, f, h), (e, h)
    t["model.norm.weight"] = (h,)
    if not cfg.tie_word_embeddings:
        t["lm_head.weight"] = (v, h)
    return t


def reading(d):
    """What the family's modeling code takes from AutoConfig.from_pretrained(d)."""
    cfg = transformers.AutoConfig.from_pretrained(d)
    r = {"model_type": cfg.model_type, "vocab_size": cfg.vocab_size, "tie_word_embeddings": cfg.tie_word_embeddings}
    if cfg.model_type == "gpt2":
        r.update(hidden_size=cfg.n_embd, layers=cfg.n_layer, heads=cfg.n_head, ffn=cfg.n_inner or 4 * cfg.n_embd,
                 max_positions=cfg.n_positions, activation=cfg.activation_function, eps=cfg.layer_norm_epsilon)
        return r
    if cfg.model_type == "nemotron_h":
        r.update(layers_block_type=cfg.layers_block_type, time_step_limit=[str(v) for v in cfg.time_step_limit],
                 hidden_size=cfg.hidden_size, heads=cfg.num_attention_heads, kv_heads=cfg.num_key_value_heads,
                 head_dim=cfg.head_dim, ffn=cfg.intermediate_size, mlp_act=cfg.mlp_hidden_act,
                 eps=cfg.layer_norm_epsilon, mamba_heads=cfg.mamba_num_heads, mamba_head_dim=cfg.mamba_head_dim,
                 n_groups=cfg.n_groups, state=cfg.ssm_state_size, conv_kernel=cfg.conv_kernel,
                 chunk_size=cfg.chunk_size, experts=cfg.n_routed_experts, topk=cfg.num_experts_per_tok,
                 moe_ffn=cfg.moe_intermediate_size, shared_ffn=cfg.moe_shared_expert_intermediate_size,
                 latent=cfg.moe_latent_size, n_group=cfg.n_group, topk_group=cfg.topk_group,
                 routed_scaling_factor=cfg.routed_scaling_factor, norm_topk_prob=cfg.norm_topk_prob)
        return r
    rope = dict(cfg.rope_parameters)
    if cfg.model_type == "deepseek_v3":
        qk = cfg.qk_nope_head_dim + cfg.qk_rope_head_dim
        r.update(hidden_size=cfg.hidden_size, layers=cfg.num_hidden_layers, heads=cfg.num_attention_heads,
                 kv_heads=cfg.num_key_value_heads, ffn=cfg.intermediate_size, moe_ffn=cfg.moe_intermediate_size,
                 max_positions=cfg.max_position_embeddings, eps=cfg.rms_norm_eps, q_lora_rank=cfg.q_lora_rank,
                 kv_lora_rank=cfg.kv_lora_rank, qk_nope_head_dim=cfg.qk_nope_head_dim,
                 qk_rope_head_dim=cfg.qk_rope_head_dim, v_head_dim=cfg.v_head_dim, experts=cfg.n_routed_experts,
                 shared_experts=cfg.n_shared_experts, topk=cfg.num_experts_per_tok, n_group=cfg.n_group,
                 topk_group=cfg.topk_group, routed_scaling_factor=cfg.routed_scaling_factor,
                 norm_topk_prob=cfg.norm_topk_prob, first_k_dense_replace=cfg.first_k_dense_replace,
                 moe_layers=[i for i in range(cfg.num_hidden_layers) if i >= cfg.first_k_dense_replace],
                 mtp_layers=cfg.num_nextn_predict_layers, rope_interleave=cfg.rope_interleave,
                 attention_bias=cfg.attention_bias, rope=rope,
                 # DeepseekV3Attention.scaling, transformers' own function
                 softmax_scale=transformers.modeling_rope_utils.yarn_apply_mscale(rope, qk ** (-0.5)))
        return r
    if cfg.model_type == "gpt_oss":
        r.update(layer_types=cfg.layer_types, sliding_window=cfg.sliding_window, swiglu_alpha=cfg.swiglu_alpha,
                 swiglu_limit=str(cfg.swiglu_limit), attention_bias=cfg.attention_bias, experts=cfg.num_local_experts,
                 topk=cfg.num_experts_per_tok)
    r.update(hidden_size=cfg.hidden_size, layers=cfg.num_hidden_layers, heads=cfg.num_attention_heads,
             kv_heads=cfg.num_key_value_heads, head_dim=head_dim(cfg), ffn=cfg.intermediate_size,
             max_positions=cfg.max_position_embeddings, eps=cfg.rms_norm_eps, rope_theta=rope["rope_theta"],
             rope_type=rope["rope_type"], rope_factor=rope.get("factor"))
    if rope["rope_type"] == "yarn":  # the keys _compute_yarn_parameters reads, after standardisation
        r.update(yarn={k: rope.get(k) for k in ("original_max_position_embeddings", "beta_fast", "beta_slow",
                                                 "truncate", "mscale", "mscale_all_dim", "attention_factor")})
    if cfg.model_type in ("mixtral", "qwen3_moe"):
        r.update(experts=cfg.num_local_experts, topk=cfg.num_experts_per_tok,
                 renormalise=cfg.model_type == "mixtral" or cfg.norm_topk_prob)
    if cfg.model_type == "qwen3_moe":
        r.update(moe_ffn=cfg.moe_intermediate_size,
                 moe_layers=[i for i in range(cfg.num_hidden_layers)
                             if i not in cfg.mlp_only_layers and (i + 1) % cfg.decoder_sparse_step == 0])
    return r


def old_spelling(j):
    """config.json as the Hub's configs spelled it before transformers 5."""
    rope = j.pop("rope_parameters", None) or {}
    if "rope_theta" in rope:
        j["rope_theta"] = rope.pop("rope_theta")
    if rope.get("rope_type", "default") != "default":
        j["rope_scaling"] = rope
    if "dtype" in j:
        j["torch_dtype"] = j.pop("dtype")
    if j.get("model_type") == "qwen3_moe":
        j["num_experts"] = j.pop("num_local_experts")
    if j.get("model_type") == "deepseek_v3" and "rope_scaling" in j:  # DeepSeek's: "type", not "rope_type"
        j["rope_scaling"]["type"] = j["rope_scaling"].pop("rope_type")
    if j.get("model_type") == "gpt_oss":  # openai/gpt-oss's config.json: alpha fixed in the modeling code then
        j.pop("swiglu_alpha", None)
    if j.get("model_type") == "nemotron_h":  # Nemotron-H's configs on the Hub
        letters = {"mamba": "M", "linear_attention": "M", "attention": "*", "full_attention": "*", "mlp": "-", "moe": "E"}
        j["hybrid_override_pattern"] = "".join(letters[b] for b in j.pop("layers_block_type"))
        j["time_step_limit"] = [0.0, float("inf")]
    j["transformers_version"] = "4.51.0"
    return j


def make(family, out, old):
    cfg = getattr(transformers, CLASSES[family])(architectures=[ARCHS[family]], dtype="float32",
                                                 **family_kwargs(family))
    cfg.save_pretrained(out)
    rng = np.random.default_rng(sum(map(ord, family)))
    tensors = {}
    for name, shape in sorted(tensor_shapes(cfg).items()):
        if len(shape) == 1:  # norms around 1 (and biases around 0) so that a mixed-up name shows
            v = rng.uniform(-0.3, 0.3, shape) + (0.0 if name.endswith("bias") else 1.0)
        else:
            v = rng.normal(0.0, 0.3, shape)
        tensors[name] = v.astype(np.float32)
    for name in [n for n in tensors if n.endswith((".shared_head.head.weight", ".embed_tokens.weight"))]:
        # DeepSeek's MTP layers hold copies of the model's embedding and output head.
        main = "model.embed_tokens.weight" if name.endswith("embed_tokens.weight") or cfg.tie_word_embeddings \
            else "lm_head.weight"
        tensors[name] = tensors[main]
    if tensors:
        safetensors.numpy.save_file(tensors, os.path.join(out, "model.safetensors"), metadata={"format": "pt"})
    if old:
        path = os.path.join(out, "config.json")
        with open(path) as f:
            j = json.load(f)
        with open(path, "w") as f:
            json.dump(old_spelling(j), f, indent=2)  # Python's json: a bare Infinity, as the Hub's files
    print(json.dumps({"transformers_version": transformers.__version__, "reading": reading(out)}))


def safetensors_header(path):
    with open(path, "rb") as f:
        n = int.from_bytes(f.read(8), "little")
        return json.loads(f.read(n))


def check(d):
    with open(os.path.join(d, "config.json")) as f:
        ours = json.load(f)
    cfg = transformers.AutoConfig.from_pretrained(d)
    errors = []
    known = set(type(cfg)().to_dict()) | set(type(cfg).attribute_map.values())
    extra = {"strata"} | ({"head_dim"} if cfg.model_type == "qwen3_moe" else set())  # Qwen3MoeAttention's getattr
    errors += ["config.json key %r is not one %s knows" % (k, type(cfg).__name__)
               for k in sorted(set(ours) - known - extra)]
    with tempfile.TemporaryDirectory() as tmp:
        cfg.save_pretrained(tmp)
        with open(os.path.join(tmp, "config.json")) as f:
            again = json.load(f)
    for k, v in sorted(ours.items()):
        if k != "transformers_version" and again.get(k, "<absent>") != v:
            errors.append("config.json %s = %s, transformers %s saves it back as %s"
                          % (k, json.dumps(v), transformers.__version__, json.dumps(again.get(k, "<absent>"))))
    want = tensor_shapes(cfg)
    header = safetensors_header(os.path.join(d, "model.safetensors"))  # numpy has no bfloat16: the header only
    have = {k: tuple(v["shape"]) for k, v in header.items() if k != "__metadata__"}
    dtypes = {"float32": "F32", "bfloat16": "BF16", "float16": "F16"}
    # DeepseekV3PreTrainedModel._keep_in_fp32_modules_strict: transformers keeps (and saves) the router's
    # e_score_correction_bias (and gate) in f32 whatever the model's dtype.
    kept_f32 = (".e_score_correction_bias", ".mlp.gate.weight") if cfg.model_type == "deepseek_v3" else ()
    # NemotronH: the same (NemotronHPreTrainedModel), and A_log and D, which Megatron (and Strata) keep in f32.
    if cfg.model_type == "nemotron_h":
        kept_f32 = (".e_score_correction_bias", ".mixer.gate.weight", ".mixer.A_log", ".mixer.D")
    errors += ["tensor %s is %s, config.json's dtype %s" % (k, v["dtype"], ours.get("dtype"))
               for k, v in sorted(header.items()) if k != "__metadata__" and v["dtype"] != dtypes.get(ours.get("dtype"))
               and not (k.endswith(kept_f32) and v["dtype"] == "F32")]
    errors += ["tensor %s: %s in the file, %s for %s" % (k, have.get(k), want.get(k), cfg.architectures)
               for k in sorted(set(want) | set(have)) if want.get(k) != have.get(k)]
    if errors:
        print("\n".join(errors))
        sys.exit(1)
    print(json.dumps({"transformers_version": transformers.__version__, "reading": reading(d)}))


def main():
    a = sys.argv[1:]
    if len(a) >= 3 and a[0] == "make":
        make(a[1], a[2], "--old-spelling" in a[3:])
    elif len(a) == 2 and a[0] == "read":
        print(json.dumps({"transformers_version": transformers.__version__, "reading": reading(a[1])}))
    elif len(a) == 2 and a[0] == "check":
        check(a[1])
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main()
