#!/usr/bin/python3
"""Independent numerical reference for `strata export --format hf` (tests/unit/test_hf_export.cpp, test_hf_moe.cpp,
test_hf_deepseek.cpp, test_hf_nemotron_h.cpp, test_hf_gpt_oss.cpp).

Reads a Hugging Face model directory (config.json + model.safetensors, parsed here with the
standard library and numpy only) and runs the forward pass of transformers' GPT2LMHeadModel,
LlamaForCausalLM, Qwen3ForCausalLM, MixtralForCausalLM, Qwen3MoeForCausalLM, DeepseekV3ForCausalLM,
NemotronHForCausalLM or GptOssForCausalLM in float64, the way transformers computes it:
  Llama: RMSNorm (x * rsqrt(mean(x^2) + eps) * w), q/k/v/o_proj, RoPE with rotate_half
         (inv_freq = theta^(-arange(0, d, 2)/d), divided by the factor of rope_type "linear",
         scaled by rope_type "llama3", blended by rope_type "yarn" with cos/sin times its attention
         factor; cos/sin of cat(freqs, freqs)), GQA by repeat_kv,
         causal softmax(q k^T / sqrt(d)), SwiGLU MLP down(silu(gate(x)) * up(x)), lm_head or tied.
  Qwen3: Llama plus q_norm / k_norm (RMSNorm over the head dim of q and k, before RoPE).
  Mixtral: Llama whose every MLP is MixtralSparseMoeBlock: router logits = x gate^T, softmax over
         all experts, the top num_experts_per_tok kept and renormalised to sum 1; each chosen
         expert's w2(silu(w1 x) * w3 x) times its weight, summed.
  Qwen3-MoE: Qwen3 whose layer i is Qwen3MoeSparseMoeBlock iff i is not in mlp_only_layers and
         (i + 1) % decoder_sparse_step == 0 (else the dense MLP of intermediate_size): the same
         softmax top-k, renormalised only with norm_topk_prob, experts gate/up/down_proj of
         moe_intermediate_size.
  DeepSeek-V3: multi-latent attention (DeepseekV3Attention): q = q_b_proj(q_a_layernorm(q_a_proj(x)))
         (q_proj(x) with q_lora_rank null), per head [q_nope | q_rot]; [c_kv | k_rot] =
         kv_a_proj_with_mqa(x), kv_b_proj(kv_a_layernorm(c_kv)) per head [k_nope | v]; the latent
         norms are RMSNorms with eps 1e-6 whatever rms_norm_eps says (DeepseekV3RMSNorm's default);
         RoPE over qk_rope_head_dim channels with rope_interleave (pairs (2i, 2i+1) rotated by
         frequency i, apply_rotary_pos_emb_interleave; rotate_half without it), the RoPE key shared
         by every head; "default" or "yarn" frequencies and attention_factor as
         modeling_rope_utils._compute_yarn_parameters computes them, softmax scale
         qk_head_dim^-0.5 · yarn_get_mscale(factor, mscale_all_dim)^2 (yarn_apply_mscale). Layer i
         < first_k_dense_replace has the dense MLP of intermediate_size, the others DeepseekV3MoE:
         sigmoid scores of the f32 gate, + e_score_correction_bias for the choice only, groups
         ranked by the sum of their top-2 biased scores (n_group groups, topk_group kept), top
         num_experts_per_tok of the kept groups' biased scores, weights the unbiased scores
         (divided by their sum + 1e-20 with norm_topk_prob) times routed_scaling_factor; plus the
         shared experts (one MLP of moe_intermediate_size · n_shared_experts). Experts one tensor
         per expert (the Hub's layout) or transformers' fused gate_up_proj [E, 2F, H] /
         down_proj [E, H, F]. The MTP layers (model.layers.{num_hidden_layers + k}) are not run.
  NemotronH: blocks x + mixer(RMSNorm(x)) of the kinds layers_block_type lists (or hybrid_override_pattern's
         letters M * - E), then norm_f and lm_head (or the tied embedding). linear_attention is
         NemotronHMamba2Mixer: in_proj → [z | xBC | dt], causal depthwise conv1d (+ bias) and silu on xBC,
         split x | B | C, dt = softplus(dt + dt_bias) clamped to time_step_limit, A = -exp(A_log), the
         selective scan as its recurrence (h ← exp(dt·A)·h + dt·x⊗B, y = h·C + D·x; heads share B, C by
         group), then NemotronHRMSNormGated (y·silu(z) normalised in n_groups groups, eps
         layer_norm_epsilon) and out_proj. full_attention: q/k/v/o_proj without positions, GQA,
         causal softmax(q k^T · head_dim^-0.5). mlp: down(relu(up x)^2). moe: NemotronHTopkRouter
         (DeepSeek-V3's, above), experts relu2 MLPs (fc1_latent_proj before and fc2_latent_proj after
         them when moe_latent_size is set), plus the shared expert; experts one tensor each under
         "backbone." (the Hub) or fused under "model." (transformers 5).
  gpt-oss: Llama's layout with biased q/k/v/o_proj, RoPE as Llama's (GptOssConfig's default_theta
         150000 and, without a RoPE dict, its YaRN factor 32 over 4096 with truncate false), each head's
         self_attn.sinks logit joined to the softmax and dropped after it, the layers of layer_types
         "sliding_attention" (default: the even ones) keeping the keys kv > q - sliding_window; every
         MLP GptOssMLP: router m W^T + b, the top num_experts_per_tok logits softmaxed, experts fused
         gate_up_proj [E, h, 2F] (gate the even columns, up the odd ones) + bias, the clamped
         (up + 1) · gate · σ(swiglu_alpha · gate), down_proj [E, F, h] + bias.
  GPT-2: LayerNorm, Conv1D (x @ W + b with W [in, out]), c_attn split q | k | v, causal attention
         scaled by 1/sqrt(d), gelu_new (tanh) / gelu (erf) MLP, learned positions, tied lm_head.
config.json in the Hub's older spelling (top-level rope_theta / rope_scaling, Qwen3-MoE's num_experts)
or transformers 5's (rope_parameters, num_local_experts) is read as transformers 5 reads it
(modeling_rope_utils.py RotaryEmbeddingConfigMixin: the RoPE dict is `rope_scaling or
rope_parameters`, its rope_theta else the top-level one else the family's default_theta).
Reference: transformers models/llama/modeling_llama.py, models/qwen3/modeling_qwen3.py,
models/mixtral/modeling_mixtral.py, models/qwen3_moe/modeling_qwen3_moe.py, models/gpt2/modeling_gpt2.py,
models/deepseek_v3/modeling_deepseek_v3.py (DeepseekV3Attention, DeepseekV3TopkRouter, DeepseekV3MoE),
models/nemotron_h/modeling_nemotron_h.py (NemotronHMamba2Mixer.torch_forward, NemotronHRMSNormGated,
NemotronHAttention, NemotronHMLP, NemotronHMoE, NemotronHTopkRouter), models/gpt_oss/modeling_gpt_oss.py
(eager_attention_forward's sinks, GptOssTopKRouter, GptOssExperts._apply_gate), masking_utils.py
(sliding_window_overlay),
pytorch_utils.py (Conv1D), activations.py (NewGELUActivation), modeling_rope_utils.py
(_compute_llama3_parameters, _compute_yarn_parameters, yarn_get_mscale, yarn_apply_mscale,
standardize_rope_params).

Usage: hf_reference.py DIR 1,2,3           → prints {"logits": [[v0, v1, ...], ...]} (one row per id)
       hf_reference.py --score DIR 1,2,3   → prints {"logprobs": [null, lp1, ...], "vocab": V}: what
         transformers gives for each token given its prefix, log_softmax over every column of the
         logits (every row of lm_head / the tied embedding, as the exported file holds them).
"""
import json
import math
import os
import struct
import sys

import numpy as np


def read_safetensors(path):
    with open(path, "rb") as f:
        raw = f.read()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + n].decode("utf-8"))
    data = raw[8 + n:]
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        b, e = info["data_offsets"]
        buf = data[b:e]
        dt = info["dtype"]
        if dt == "F32":
            a = np.frombuffer(buf, dtype="<f4")
        elif dt == "F64":
            a = np.frombuffer(buf, dtype="<f8")
        elif dt == "F16":
            a = np.frombuffer(buf, dtype="<f2")
        elif dt == "BF16":
            a = (np.frombuffer(buf, dtype="<u2").astype(np.uint32) << 16).view(np.float32)
        else:
            raise ValueError("%s: dtype %s not handled" % (name, dt))
        out[name] = a.astype(np.float64).reshape(info["shape"])
    return out


def softmax_causal(scores):
    # scores [heads, s, s]
    s = scores.shape[-1]
    mask = np.triu(np.ones((s, s), dtype=bool), k=1)
    scores = np.where(mask[None], -np.inf, scores)
    scores = scores - scores.max(axis=-1, keepdims=True)
    p = np.exp(scores)
    return p / p.sum(axis=-1, keepdims=True)


def rmsnorm(x, w, eps):
    return x / np.sqrt((x * x).mean(axis=-1, keepdims=True) + eps) * w


def layernorm(x, w, b, eps):
    mu = x.mean(axis=-1, keepdims=True)
    var = ((x - mu) ** 2).mean(axis=-1, keepdims=True)
    return (x - mu) / np.sqrt(var + eps) * w + b


def rotate_half(x):
    d = x.shape[-1] // 2
    return np.concatenate([-x[..., d:], x[..., :d]], axis=-1)


def silu_mlp(x, w_gate, w_up, w_down):
    gate = x @ w_gate.T
    return ((gate / (1.0 + np.exp(-gate))) * (x @ w_up.T)) @ w_down.T


def sparse_moe(x, g, prefix, names, num_experts, top_k, renormalise):
    """MixtralSparseMoeBlock / Qwen3MoeSparseMoeBlock on x [s, h]; names: (gate, up, down) of an expert."""
    logits = x @ g(prefix + "gate.weight").T  # [s, E]
    w = np.exp(logits - logits.max(axis=-1, keepdims=True))
    w = w / w.sum(axis=-1, keepdims=True)  # softmax over every expert
    out = np.zeros_like(x)
    for t in range(x.shape[0]):
        chosen = np.argsort(-w[t], kind="stable")[:top_k]  # torch.topk: the k largest
        weights = w[t, chosen]
        if renormalise:
            weights = weights / weights.sum()
        for e, we in zip(chosen, weights):
            p = prefix + "experts.%d." % e
            out[t] += we * silu_mlp(x[t:t + 1], g(p + names[0] + ".weight"), g(p + names[1] + ".weight"),
                                    g(p + names[2] + ".weight"))[0]
    return out


def num_experts(cfg):
    """num_local_experts (Mixtral; Qwen3-MoE since transformers 5) or num_experts (older Qwen3-MoE)."""
    return cfg["num_local_experts"] if "num_local_experts" in cfg else cfg["num_experts"]


def rope_settings(cfg):
    """(rope_theta, the RoPE dict) as RotaryEmbeddingConfigMixin standardises them."""
    rope = dict(cfg.get("rope_scaling") or cfg.get("rope_parameters") or {})
    if not rope and cfg.get("model_type") == "gpt_oss":  # GptOssConfig.__post_init__'s default
        rope = {"rope_type": "yarn", "factor": 32.0, "beta_fast": 32.0, "beta_slow": 1.0, "truncate": False,
                "original_max_position_embeddings": 4096}
    default_theta = {"mixtral": 1e6, "gpt_oss": 150000.0}.get(cfg.get("model_type"), 1e4)
    theta = rope.get("rope_theta", cfg.get("rope_theta", default_theta))
    rope.setdefault("rope_type", rope.get("type", "default"))
    if rope["rope_type"] in ("llama3", "yarn"):
        if "original_max_position_embeddings" in cfg:  # a top-level key wins (standardize_rope_params)
            rope["original_max_position_embeddings"] = cfg["original_max_position_embeddings"]
        rope.setdefault("original_max_position_embeddings", cfg["max_position_embeddings"])
    return theta, rope


def mlp_block(cfg, g, i, m):
    """The MLP of decoder layer i on the normalised input m [s, h], as the family builds it."""
    kind = cfg.get("model_type")
    p = "model.layers.%d." % i
    if kind == "mixtral":
        return sparse_moe(m, g, p + "block_sparse_moe.", ("w1", "w3", "w2"), num_experts(cfg),
                          cfg.get("num_experts_per_tok", 2), True)
    if kind == "qwen3_moe":
        sparse = (i not in (cfg.get("mlp_only_layers") or []) and num_experts(cfg) > 0
                  and (i + 1) % cfg.get("decoder_sparse_step", 1) == 0)
        if sparse:
            return sparse_moe(m, g, p + "mlp.", ("gate_proj", "up_proj", "down_proj"), num_experts(cfg),
                              cfg.get("num_experts_per_tok", 8), cfg.get("norm_topk_prob", False))
    return silu_mlp(m, g(p + "mlp.gate_proj.weight"), g(p + "mlp.up_proj.weight"), g(p + "mlp.down_proj.weight"))


def llama3_scaled(inv_freq, rs):
    """transformers' _compute_llama3_parameters (rope_type "llama3"): the frequencies only."""
    factor = rs["factor"]
    low, high = rs["low_freq_factor"], rs["high_freq_factor"]
    old = rs["original_max_position_embeddings"]
    wavelen = 2 * math.pi / inv_freq
    scaled = np.where(wavelen > old / low, inv_freq / factor, inv_freq)
    smooth = (old / wavelen - low) / (high - low)
    smoothed = (1 - smooth) * scaled / factor + smooth * scaled
    medium = ~(wavelen < old / high) & ~(wavelen > old / low)
    return np.where(medium, smoothed, scaled)


def yarn_get_mscale(scale, mscale=1):
    return 1.0 if scale <= 1 else 0.1 * mscale * math.log(scale) + 1.0


def yarn_parameters(cfg, rs, theta, dim):
    """transformers' _compute_yarn_parameters (rope_type "yarn") in float64: (inv_freq, attention_factor)."""
    original = rs["original_max_position_embeddings"]
    factor = rs.get("factor")
    if factor is None:
        factor = cfg["max_position_embeddings"] / original
    attention_factor = rs.get("attention_factor")
    mscale, mscale_all_dim = rs.get("mscale"), rs.get("mscale_all_dim")
    if attention_factor is None:
        if mscale and mscale_all_dim:
            attention_factor = yarn_get_mscale(factor, mscale) / yarn_get_mscale(factor, mscale_all_dim)
        else:
            attention_factor = yarn_get_mscale(factor)
    beta_fast, beta_slow = rs.get("beta_fast") or 32, rs.get("beta_slow") or 1

    def correction_dim(rotations):
        return (dim * math.log(original / (rotations * 2 * math.pi))) / (2 * math.log(theta))

    low, high = correction_dim(beta_fast), correction_dim(beta_slow)
    if rs.get("truncate", True):
        low, high = math.floor(low), math.ceil(high)
    low, high = max(low, 0), min(high, dim - 1)
    if low == high:
        high += 0.001
    ramp = np.clip((np.arange(dim // 2, dtype=np.float64) - low) / (high - low), 0, 1)
    pos_freqs = theta ** (np.arange(0, dim, 2, dtype=np.float64) / dim)
    extrapolation = 1 - ramp
    inv_freq = 1.0 / (factor * pos_freqs) * (1 - extrapolation) + 1.0 / pos_freqs * extrapolation
    return inv_freq, attention_factor


def rope_cos_sin(cfg, hd, s):
    """cos, sin [1, s, hd] of rotate_half RoPE over the whole head (cat(freqs, freqs)), times the attention
    factor of rope_type "yarn": "default", "linear", "llama3" or "yarn" frequencies."""
    theta, rs = rope_settings(cfg)
    inv_freq = 1.0 / (theta ** (np.arange(0, hd, 2, dtype=np.float64) / hd))
    attention_factor = 1.0
    if rs["rope_type"] == "yarn":
        inv_freq, attention_factor = yarn_parameters(cfg, rs, theta, hd)
    elif rs["rope_type"] == "llama3":
        inv_freq = llama3_scaled(inv_freq, rs)
    elif rs["rope_type"] == "linear":  # _compute_linear_scaling_rope_parameters: inv_freq /= factor
        inv_freq = inv_freq / rs["factor"]
    elif rs["rope_type"] != "default":
        sys.exit("hf_reference.py: RoPE %r is not implemented here" % (rs,))
    freqs = np.arange(s, dtype=np.float64)[:, None] * inv_freq[None, :]
    emb = np.concatenate([freqs, freqs], axis=-1)  # [s, hd]
    return np.cos(emb)[None] * attention_factor, np.sin(emb)[None] * attention_factor


def llama_forward(cfg, t, ids):
    g = lambda n: t[n] if n in t else t[n[len("model."):]]
    h = cfg["hidden_size"]
    nh = cfg["num_attention_heads"]
    nkv = cfg.get("num_key_value_heads") or nh
    hd = cfg.get("head_dim", 128 if cfg.get("model_type") == "qwen3" else None) or h // nh  # Qwen3Config: 128
    eps = cfg.get("rms_norm_eps", 1e-6)
    s = len(ids)
    x = g("model.embed_tokens.weight")[ids]
    cos, sin = rope_cos_sin(cfg, hd, s)
    for i in range(cfg["num_hidden_layers"]):
        p = "model.layers.%d." % i
        a = rmsnorm(x, g(p + "input_layernorm.weight"), eps)
        q = (a @ g(p + "self_attn.q_proj.weight").T).reshape(s, nh, hd).transpose(1, 0, 2)
        k = (a @ g(p + "self_attn.k_proj.weight").T).reshape(s, nkv, hd).transpose(1, 0, 2)
        v = (a @ g(p + "self_attn.v_proj.weight").T).reshape(s, nkv, hd).transpose(1, 0, 2)
        if cfg.get("model_type") in ("qwen3", "qwen3_moe"):  # Qwen3Attention: per-head RMSNorm of q and k before RoPE
            q = rmsnorm(q, g(p + "self_attn.q_norm.weight"), eps)
            k = rmsnorm(k, g(p + "self_attn.k_norm.weight"), eps)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        k = np.repeat(k, nh // nkv, axis=0)  # repeat_kv
        v = np.repeat(v, nh // nkv, axis=0)
        pr = softmax_causal(q @ k.transpose(0, 2, 1) / math.sqrt(hd))
        o = (pr @ v).transpose(1, 0, 2).reshape(s, nh * hd)
        x = x + o @ g(p + "self_attn.o_proj.weight").T
        m = rmsnorm(x, g(p + "post_attention_layernorm.weight"), eps)
        x = x + mlp_block(cfg, g, i, m)
    x = rmsnorm(x, g("model.norm.weight"), eps)
    head = t.get("lm_head.weight")
    if head is None or cfg.get("tie_word_embeddings", False):
        head = g("model.embed_tokens.weight")
    return x @ head.T


def rope_interleave(x, cos, sin):
    """apply_rotary_pos_emb_interleave: pairs (x[2i], x[2i+1]) rotated by frequency i, written out as
    [first members | second members]; cos, sin [s, d/2]."""
    x1, x2 = x[..., 0::2], x[..., 1::2]
    return np.concatenate([x1 * cos - x2 * sin, x2 * cos + x1 * sin], axis=-1)


def deepseek_router(cfg, g, p, m):
    """DeepseekV3TopkRouter on m [s, h]: (expert ids [s, k], weights [s, k])."""
    experts, k = cfg["n_routed_experts"], cfg["num_experts_per_tok"]
    groups, keep = cfg.get("n_group") or 1, cfg.get("topk_group") or 1
    scores = 1.0 / (1.0 + np.exp(-(m @ g(p + "gate.weight").T)))  # [s, E]
    choice = scores + g(p + "gate.e_score_correction_bias")[None, :]
    ids = np.zeros((m.shape[0], k), dtype=np.int64)
    weights = np.zeros((m.shape[0], k))
    for t in range(m.shape[0]):
        per_group = choice[t].reshape(groups, experts // groups)
        group_score = np.sort(per_group, axis=-1)[:, ::-1][:, :2].sum(axis=-1)  # the top-2 sum
        kept = np.argsort(-group_score, kind="stable")[:keep]
        masked = np.full(experts, -np.inf)
        for gi in kept:
            sl = slice(gi * (experts // groups), (gi + 1) * (experts // groups))
            masked[sl] = choice[t, sl]
        ids[t] = np.argsort(-masked, kind="stable")[:k]
        w = scores[t, ids[t]]
        if cfg.get("norm_topk_prob", True):
            w = w / (w.sum() + 1e-20)
        weights[t] = w * cfg.get("routed_scaling_factor", 1.0)
    return ids, weights


def deepseek_moe(cfg, g, p, m):
    """DeepseekV3MoE on m [s, h]: the routed experts' weighted sum plus the shared experts."""
    ids, weights = deepseek_router(cfg, g, p + "mlp.", m)
    fused = (p + "mlp.experts.gate_up_proj") in g.names
    f = cfg["moe_intermediate_size"]
    out = np.zeros_like(m)
    for t in range(m.shape[0]):
        for e, w in zip(ids[t], weights[t]):
            if fused:
                gate_up = g(p + "mlp.experts.gate_up_proj")[e]
                gate, up, down = gate_up[:f], gate_up[f:], g(p + "mlp.experts.down_proj")[e]
            else:
                q = p + "mlp.experts.%d." % e
                gate, up, down = (g(q + n + ".weight") for n in ("gate_proj", "up_proj", "down_proj"))
            out[t] += w * silu_mlp(m[t:t + 1], gate, up, down)[0]
    q = p + "mlp.shared_experts."
    return out + silu_mlp(m, g(q + "gate_proj.weight"), g(q + "up_proj.weight"), g(q + "down_proj.weight"))


def deepseek_attention(cfg, g, p, a, cos, sin, scaling):
    """DeepseekV3Attention on a [s, h] (eager, causal)."""
    s = a.shape[0]
    nh = cfg["num_attention_heads"]
    nope, rope, dv = cfg["qk_nope_head_dim"], cfg["qk_rope_head_dim"], cfg["v_head_dim"]
    latent_eps = 1e-6  # DeepseekV3RMSNorm(q_lora_rank) / (kv_lora_rank): the class default
    if cfg.get("q_lora_rank") is None:
        q = a @ g(p + "self_attn.q_proj.weight").T
    else:
        ql = rmsnorm(a @ g(p + "self_attn.q_a_proj.weight").T, g(p + "self_attn.q_a_layernorm.weight"), latent_eps)
        q = ql @ g(p + "self_attn.q_b_proj.weight").T
    q = q.reshape(s, nh, nope + rope).transpose(1, 0, 2)  # [nh, s, nope + rope]
    q_pass, q_rot = q[..., :nope], q[..., nope:]
    kv = a @ g(p + "self_attn.kv_a_proj_with_mqa.weight").T  # [s, kv_lora + rope]
    lora = cfg["kv_lora_rank"]
    c_kv = rmsnorm(kv[:, :lora], g(p + "self_attn.kv_a_layernorm.weight"), latent_eps)
    k_rot = kv[None, :, lora:]  # [1, s, rope]
    if cfg.get("rope_interleave", True):
        q_rot, k_rot = rope_interleave(q_rot, cos, sin), rope_interleave(k_rot, cos, sin)
    else:
        c2, s2 = np.concatenate([cos, cos], axis=-1), np.concatenate([sin, sin], axis=-1)
        q_rot, k_rot = q_rot * c2 + rotate_half(q_rot) * s2, k_rot * c2 + rotate_half(k_rot) * s2
    up = (c_kv @ g(p + "self_attn.kv_b_proj.weight").T).reshape(s, nh, nope + dv).transpose(1, 0, 2)
    k = np.concatenate([up[..., :nope], np.repeat(k_rot, nh, axis=0)], axis=-1)
    v = up[..., nope:]
    qs = np.concatenate([q_pass, q_rot], axis=-1)
    pr = softmax_causal(qs @ k.transpose(0, 2, 1) * scaling)
    o = (pr @ v).transpose(1, 0, 2).reshape(s, nh * dv)
    return o @ g(p + "self_attn.o_proj.weight").T


class Tensors:
    """Name lookup that accepts files without the base-model prefix ("layers.0…")."""

    def __init__(self, t):
        self.t = t
        self.names = set(t) | {"model." + n for n in t if not n.startswith(("model.", "lm_head."))}

    def __call__(self, n):
        return self.t[n] if n in self.t else self.t[n[len("model."):]]


def deepseek_forward(cfg, t, ids):
    g = Tensors(t)
    eps = cfg.get("rms_norm_eps", 1e-6)
    theta, rs = rope_settings(cfg)
    dim = cfg["qk_rope_head_dim"]  # DeepseekV3Config: head_dim = qk_rope_head_dim
    if rs["rope_type"] == "yarn":
        inv_freq, attention_factor = yarn_parameters(cfg, rs, theta, dim)
    elif rs["rope_type"] == "default":
        inv_freq, attention_factor = 1.0 / (theta ** (np.arange(0, dim, 2, dtype=np.float64) / dim)), 1.0
    else:
        sys.exit("hf_reference.py: DeepSeek-V3 RoPE %r is not implemented here" % (rs,))
    scaling = (cfg["qk_nope_head_dim"] + dim) ** -0.5
    if rs["rope_type"] != "default" and rs.get("mscale_all_dim"):  # yarn_apply_mscale
        scaling *= yarn_get_mscale(rs["factor"], rs["mscale_all_dim"]) ** 2
    s = len(ids)
    freqs = np.arange(s, dtype=np.float64)[:, None] * inv_freq[None, :]
    cos, sin = np.cos(freqs) * attention_factor, np.sin(freqs) * attention_factor  # [s, dim/2]
    x = g("model.embed_tokens.weight")[ids]
    for i in range(cfg["num_hidden_layers"]):
        p = "model.layers.%d." % i
        x = x + deepseek_attention(cfg, g, p, rmsnorm(x, g(p + "input_layernorm.weight"), eps), cos, sin, scaling)
        m = rmsnorm(x, g(p + "post_attention_layernorm.weight"), eps)
        if i >= cfg.get("first_k_dense_replace", 3):
            x = x + deepseek_moe(cfg, g, p, m)
        else:
            x = x + silu_mlp(m, g(p + "mlp.gate_proj.weight"), g(p + "mlp.up_proj.weight"),
                             g(p + "mlp.down_proj.weight"))
    x = rmsnorm(x, g("model.norm.weight"), eps)
    head = t.get("lm_head.weight")
    if head is None or cfg.get("tie_word_embeddings", False):
        head = g("model.embed_tokens.weight")
    return x @ head.T


def relu2(z):
    """ACT2FN["relu2"] (ReLUSquaredActivation): relu(z)^2."""
    return np.maximum(z, 0.0) ** 2


class NemotronTensors:
    """NemotronH's names as the Hub stores them ("backbone.", one tensor per expert), transformers 5's
    ("model.", experts fused [E, out, in]) or without a prefix, looked up as "backbone.…"."""

    def __init__(self, t):
        self.t = {}
        for n, v in t.items():
            if n.startswith("mtp."):
                continue
            if n.startswith("model."):
                n = "backbone." + n[len("model."):]
            elif not n.startswith(("backbone.", "lm_head.")):
                n = "backbone." + n
            if n.endswith((".mixer.experts.up_proj", ".mixer.experts.down_proj")) and v.ndim == 3:
                stem, proj = n.rsplit(".", 1)
                for e in range(v.shape[0]):
                    self.t["%s.%d.%s.weight" % (stem, e, proj)] = v[e]
                continue
            self.t[n] = v

    def __call__(self, n):
        return self.t[n]


def nemotron_mamba(cfg, g, p, a):
    """NemotronHMamba2Mixer on a [s, h] (torch_forward without a cache; the SSD scan as its naive
    recurrence, the same numbers as the chunked form in float64)."""
    s = a.shape[0]
    heads, hd = cfg["mamba_num_heads"], cfg["mamba_head_dim"]
    groups = cfg.get("n_groups", cfg.get("mamba_n_groups", 8))
    n = cfg["ssm_state_size"]
    di = heads * hd
    conv_dim = di + 2 * groups * n
    eps = cfg.get("layer_norm_epsilon", 1e-5)
    zxbcdt = a @ g(p + "mixer.in_proj.weight").T  # [s, di + conv_dim + heads]
    z, xbc, dt = zxbcdt[:, :di], zxbcdt[:, di:di + conv_dim], zxbcdt[:, di + conv_dim:]
    w = g(p + "mixer.conv1d.weight")[:, 0, :]  # [conv_dim, K]: causal depthwise conv, left-padded by K - 1
    k = w.shape[1]
    padded = np.concatenate([np.zeros((k - 1, conv_dim)), xbc], axis=0)
    conv = np.stack([(padded[t:t + k] * w.T).sum(axis=0) for t in range(s)]) + g(p + "mixer.conv1d.bias")
    xbc = conv / (1.0 + np.exp(-conv))  # silu
    x = xbc[:, :di].reshape(s, heads, hd)
    B = xbc[:, di:di + groups * n].reshape(s, groups, n)
    C = xbc[:, di + groups * n:].reshape(s, groups, n)
    dt = np.logaddexp(0.0, dt + g(p + "mixer.dt_bias"))  # softplus
    lo, hi = cfg.get("time_step_limit", [0.0, float("inf")])
    dt = np.clip(dt, lo, hi)
    A = -np.exp(g(p + "mixer.A_log"))
    D = g(p + "mixer.D")
    per = heads // groups
    state = np.zeros((heads, hd, n))
    y = np.zeros((s, heads, hd))
    for t in range(s):
        for hh in range(heads):
            gi = hh // per
            state[hh] = state[hh] * math.exp(dt[t, hh] * A[hh]) + dt[t, hh] * np.outer(x[t, hh], B[t, gi])
            y[t, hh] = state[hh] @ C[t, gi] + D[hh] * x[t, hh]
    y = y.reshape(s, di) * (z / (1.0 + np.exp(-z)))  # NemotronHRMSNormGated: y * silu(z), then per group
    yg = y.reshape(s, groups, di // groups)
    yg = yg / np.sqrt((yg * yg).mean(axis=-1, keepdims=True) + eps)
    y = yg.reshape(s, di) * g(p + "mixer.norm.weight")
    return y @ g(p + "mixer.out_proj.weight").T


def nemotron_attention(cfg, g, p, a):
    """NemotronHAttention on a [s, h]: no positions, causal softmax(q k^T · head_dim^-0.5)."""
    s = a.shape[0]
    nh = cfg.get("num_attention_heads", 32)
    nkv = cfg.get("num_key_value_heads") or nh
    hd = cfg.get("head_dim") or 128
    q = (a @ g(p + "mixer.q_proj.weight").T).reshape(s, nh, hd).transpose(1, 0, 2)
    k = (a @ g(p + "mixer.k_proj.weight").T).reshape(s, nkv, hd).transpose(1, 0, 2)
    v = (a @ g(p + "mixer.v_proj.weight").T).reshape(s, nkv, hd).transpose(1, 0, 2)
    k, v = np.repeat(k, nh // nkv, axis=0), np.repeat(v, nh // nkv, axis=0)
    pr = softmax_causal(q @ k.transpose(0, 2, 1) * hd ** -0.5)
    return (pr @ v).transpose(1, 0, 2).reshape(s, nh * hd) @ g(p + "mixer.o_proj.weight").T


def nemotron_moe(cfg, g, p, a):
    """NemotronHMoE on a [s, h]: DeepSeek-V3's sigmoid router (gate, e_score_correction_bias, groups), the
    experts relu2 MLPs in the latent space between fc1_latent_proj and fc2_latent_proj when moe_latent_size
    is set, plus the shared expert on a."""
    router_cfg = dict(cfg, n_routed_experts=cfg.get("n_routed_experts", cfg.get("num_local_experts", 8)),
                      num_experts_per_tok=cfg.get("num_experts_per_tok", 2))
    ids, weights = deepseek_router(router_cfg, g, p + "mixer.", a)
    latent = cfg.get("moe_latent_size") is not None
    xl = a @ g(p + "mixer.fc1_latent_proj.weight").T if latent else a
    out = np.zeros_like(xl)
    for t in range(a.shape[0]):
        for e, w in zip(ids[t], weights[t]):
            q = p + "mixer.experts.%d." % e
            out[t] += w * (relu2(xl[t] @ g(q + "up_proj.weight").T) @ g(q + "down_proj.weight").T)
    if latent:
        out = out @ g(p + "mixer.fc2_latent_proj.weight").T
    q = p + "mixer.shared_experts."
    return out + relu2(a @ g(q + "up_proj.weight").T) @ g(q + "down_proj.weight").T


def nemotron_layer_types(cfg):
    """layers_block_type (legacy names remapped) or the older hybrid_override_pattern letters."""
    if cfg.get("layers_block_type") is not None:
        legacy = {"mamba": "linear_attention", "attention": "full_attention"}
        return [legacy.get(b, b) for b in cfg["layers_block_type"]]
    letters = {"M": "linear_attention", "*": "full_attention", "-": "mlp", "E": "moe"}
    return [letters[c] for c in cfg["hybrid_override_pattern"]]


def nemotron_h_forward(cfg, t, ids):
    g = NemotronTensors(t)
    eps = cfg.get("layer_norm_epsilon", 1e-5)
    x = g("backbone.embeddings.weight")[ids]
    for i, kind in enumerate(nemotron_layer_types(cfg)):
        p = "backbone.layers.%d." % i
        a = rmsnorm(x, g(p + "norm.weight"), eps)
        if kind == "linear_attention":
            x = x + nemotron_mamba(cfg, g, p, a)
        elif kind == "full_attention":
            x = x + nemotron_attention(cfg, g, p, a)
        elif kind == "mlp":
            x = x + relu2(a @ g(p + "mixer.up_proj.weight").T) @ g(p + "mixer.down_proj.weight").T
        elif kind == "moe":
            x = x + nemotron_moe(cfg, g, p, a)
        else:
            sys.exit("hf_reference.py: NemotronH block type %r" % kind)
    x = rmsnorm(x, g("backbone.norm_f.weight"), eps)
    head = g.t.get("lm_head.weight")
    if head is None or cfg.get("tie_word_embeddings", False):
        head = g("backbone.embeddings.weight")
    return x @ head.T


def gpt_oss_attention(cfg, g, p, a, cos, sin, window):
    """GptOssAttention on a [s, h] (eager_attention_forward): biased q/k/v/o_proj, rotate_half RoPE, GQA,
    causal (and with `window` W the keys kv > q - W, masking_utils.sliding_window_overlay) scores
    q k^T · head_dim^-0.5 with each head's sink logit as one more column of the softmax, dropped after it."""
    s = a.shape[0]
    nh = cfg["num_attention_heads"]
    nkv = cfg.get("num_key_value_heads") or nh
    hd = cfg.get("head_dim") or cfg["hidden_size"] // nh
    proj = lambda n, heads: (a @ g(p + "self_attn.%s.weight" % n).T + g(p + "self_attn.%s.bias" % n)) \
        .reshape(s, heads, hd).transpose(1, 0, 2)
    q, k, v = proj("q_proj", nh), proj("k_proj", nkv), proj("v_proj", nkv)
    q, k = q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin
    k, v = np.repeat(k, nh // nkv, axis=0), np.repeat(v, nh // nkv, axis=0)
    scores = q @ k.transpose(0, 2, 1) * hd ** -0.5  # [nh, s, s]
    qi, ki = np.arange(s)[:, None], np.arange(s)[None, :]
    keep = ki <= qi
    if window is not None:
        keep = keep & (ki > qi - window)
    scores = np.where(keep[None], scores, -np.inf)
    sinks = np.broadcast_to(g(p + "self_attn.sinks")[:, None, None], (nh, s, 1))
    combined = np.concatenate([scores, sinks], axis=-1)
    combined = combined - combined.max(axis=-1, keepdims=True)
    pr = np.exp(combined)
    pr = (pr / pr.sum(axis=-1, keepdims=True))[..., :-1]
    o = (pr @ v).transpose(1, 0, 2).reshape(s, nh * hd)
    return o @ g(p + "self_attn.o_proj.weight").T + g(p + "self_attn.o_proj.bias")


def gpt_oss_moe(cfg, g, p, m):
    """GptOssMLP on m [s, h]: router logits m W^T + b, the top num_experts_per_tok and a softmax over them;
    each chosen expert's GptOssExperts._apply_gate: gate_up = m @ gate_up_proj[e] + bias, gate = the even
    columns clamped above at swiglu_limit, up = the odd ones clamped to ±swiglu_limit, (up + 1) · gate ·
    σ(swiglu_alpha · gate), then @ down_proj[e] + down_proj_bias[e], times its weight."""
    k = cfg.get("num_experts_per_tok", 4)
    alpha, limit = cfg.get("swiglu_alpha", 1.702), cfg.get("swiglu_limit", 7.0)
    logits = m @ g(p + "mlp.router.weight").T + g(p + "mlp.router.bias")
    gu_w, gu_b = g(p + "mlp.experts.gate_up_proj"), g(p + "mlp.experts.gate_up_proj_bias")
    dn_w, dn_b = g(p + "mlp.experts.down_proj"), g(p + "mlp.experts.down_proj_bias")
    out = np.zeros_like(m)
    for t in range(m.shape[0]):
        chosen = np.argsort(-logits[t], kind="stable")[:k]
        w = np.exp(logits[t, chosen] - logits[t, chosen].max())
        w = w / w.sum()
        for e, we in zip(chosen, w):
            gate_up = m[t] @ gu_w[e] + gu_b[e]
            gate, up = np.minimum(gate_up[0::2], limit), np.clip(gate_up[1::2], -limit, limit)
            glu = gate / (1.0 + np.exp(-alpha * gate))
            out[t] += we * (((up + 1.0) * glu) @ dn_w[e] + dn_b[e])
    return out


def gpt_oss_forward(cfg, t, ids):
    g = Tensors(t)
    nh = cfg["num_attention_heads"]
    hd = cfg.get("head_dim", 64) or cfg["hidden_size"] // nh
    eps = cfg.get("rms_norm_eps", 1e-5)
    layers = cfg["num_hidden_layers"]
    types = cfg.get("layer_types") or ["sliding_attention" if (i + 1) % 2 else "full_attention" for i in range(layers)]
    s = len(ids)
    cos, sin = rope_cos_sin(cfg, hd, s)
    x = g("model.embed_tokens.weight")[ids]
    for i in range(layers):
        p = "model.layers.%d." % i
        window = cfg.get("sliding_window", 128) if types[i] == "sliding_attention" else None
        x = x + gpt_oss_attention(cfg, g, p, rmsnorm(x, g(p + "input_layernorm.weight"), eps), cos, sin, window)
        x = x + gpt_oss_moe(cfg, g, p, rmsnorm(x, g(p + "post_attention_layernorm.weight"), eps))
    x = rmsnorm(x, g("model.norm.weight"), eps)
    head = t.get("lm_head.weight")
    if head is None or cfg.get("tie_word_embeddings", False):
        head = g("model.embed_tokens.weight")
    return x @ head.T


def gpt2_forward(cfg, t, ids):
    g = lambda n: t[n] if n in t else t[n[len("transformer."):]]
    h = cfg["n_embd"]
    nh = cfg["n_head"]
    hd = h // nh
    eps = cfg.get("layer_norm_epsilon", 1e-5)
    act_name = cfg.get("activation_function", "gelu_new")
    if act_name in ("gelu_new", "gelu_pytorch_tanh"):
        act = lambda z: 0.5 * z * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (z + 0.044715 * z ** 3)))
    elif act_name == "gelu":
        erf = np.vectorize(math.erf)
        act = lambda z: 0.5 * z * (1.0 + erf(z / math.sqrt(2.0)))
    else:
        raise ValueError("activation_function " + act_name)
    s = len(ids)
    x = g("transformer.wte.weight")[ids] + g("transformer.wpe.weight")[np.arange(s)]
    for i in range(cfg["n_layer"]):
        p = "transformer.h.%d." % i
        a = layernorm(x, g(p + "ln_1.weight"), g(p + "ln_1.bias"), eps)
        qkv = a @ g(p + "attn.c_attn.weight") + g(p + "attn.c_attn.bias")  # Conv1D
        q, k, v = (z.reshape(s, nh, hd).transpose(1, 0, 2) for z in np.split(qkv, 3, axis=-1))
        pr = softmax_causal(q @ k.transpose(0, 2, 1) / math.sqrt(hd))
        o = (pr @ v).transpose(1, 0, 2).reshape(s, h)
        x = x + o @ g(p + "attn.c_proj.weight") + g(p + "attn.c_proj.bias")
        m = layernorm(x, g(p + "ln_2.weight"), g(p + "ln_2.bias"), eps)
        f = act(m @ g(p + "mlp.c_fc.weight") + g(p + "mlp.c_fc.bias"))
        x = x + f @ g(p + "mlp.c_proj.weight") + g(p + "mlp.c_proj.bias")
    x = layernorm(x, g("transformer.ln_f.weight"), g("transformer.ln_f.bias"), eps)
    head = t.get("lm_head.weight")
    if head is None or cfg.get("tie_word_embeddings", True):
        head = g("transformer.wte.weight")
    return x @ head.T


def log_softmax(x):
    m = x.max(axis=-1, keepdims=True)
    return x - m - np.log(np.exp(x - m).sum(axis=-1, keepdims=True))


def main():
    args = sys.argv[1:]
    score = bool(args) and args[0] == "--score"
    if score:
        args = args[1:]
    if len(args) != 2:
        sys.exit(__doc__)
    d = args[0]
    ids = [int(v) for v in args[1].split(",")]
    with open(os.path.join(d, "config.json")) as f:
        # transformers 5 writes inf / nan as {"__float__": "Infinity"} (configuration_utils.py _encode_special_floats)
        cfg = json.load(f, object_hook=lambda o: float(o["__float__"]) if set(o) == {"__float__"} else o)
    t = read_safetensors(os.path.join(d, "model.safetensors"))
    arch = (cfg.get("architectures") or [""])[0]
    llama_like = ("LlamaForCausalLM", "Qwen3ForCausalLM", "MixtralForCausalLM", "Qwen3MoeForCausalLM")
    if arch in llama_like or cfg.get("model_type") in ("llama", "qwen3", "mixtral", "qwen3_moe"):
        logits = llama_forward(cfg, t, ids)
    elif arch == "DeepseekV3ForCausalLM" or cfg.get("model_type") == "deepseek_v3":
        logits = deepseek_forward(cfg, t, ids)
    elif arch == "GptOssForCausalLM" or cfg.get("model_type") == "gpt_oss":
        logits = gpt_oss_forward(cfg, t, ids)
    elif arch == "NemotronHForCausalLM" or cfg.get("model_type") == "nemotron_h":
        logits = nemotron_h_forward(cfg, t, ids)
    elif arch == "GPT2LMHeadModel" or cfg.get("model_type") == "gpt2":
        logits = gpt2_forward(cfg, t, ids)
    else:
        sys.exit("unknown architecture " + arch)
    if score:
        lp = log_softmax(logits)
        out = {"logprobs": [None] + [float(lp[i - 1, ids[i]]) for i in range(1, len(ids))],
               "vocab": int(logits.shape[-1])}
        json.dump(out, sys.stdout)
        sys.stdout.write("\n")
        return
    json.dump({"logits": logits.tolist()}, sys.stdout)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
