// Tensor name and layout maps between Megatron-Core canonical names and Hugging Face Llama / Qwen3 /
// Mixtral / Qwen3-MoE / GPT-2 names (training/hf/hf_families.h: to_hf_tensors, from_hf_tensors); the
// MLP half of the Llama-like layers (dense or MoE) is training/hf/hf_moe_map.h, DeepseekV3's maps
// training/hf/hf_deepseek_map.h, NemotronH's training/hf/hf_nemotron_h_map.h, gpt-oss's
// training/hf/hf_gpt_oss_map.h.
// Reference: transformers modeling_llama.py (LlamaAttention q/k/v/o_proj, LlamaMLP gate/up/down,
// repeat_kv: KV head g serves query heads g·np/ng … (g+1)·np/ng - 1), modeling_gpt2.py (GPT2Attention
// c_attn split into q | k | v, Conv1D weight [nx, nf]); Megatron-Core attention.py
// (get_query_key_value_tensors: linear_qkv rows [ng, np/ng + 2, hn]), mlp.py (glu: [gate | up]).
#include <cstring>
#include <set>
#include <vector>

#include "core/error.h"
#include "training/hf/hf_deepseek_map.h"
#include "training/hf/hf_families.h"
#include "training/hf/hf_gpt_oss_map.h"
#include "training/hf/hf_moe_map.h"
#include "training/hf/hf_nemotron_h_map.h"

namespace strata::hf {

namespace detail {

const Tensor& ExportTensors::get(const std::string& name) const {
  auto it = tensors.find(name);
  STRATA_CHECK(it != tensors.end(), "export --format hf: the checkpoint has no tensor '", name, "'");
  return it->second;
}

Tensor ExportTensors::real_rows(const Tensor& t) const {
  STRATA_CHECK(t.size(0) >= vocab, "export --format hf: tensor with ", t.size(0), " rows is smaller than the vocabulary ",
               vocab);
  return t.narrow(0, 0, vocab).contiguous().clone();
}

Tensor cat_rows(const std::vector<Tensor>& parts) {
  Shape s = parts.at(0).shape();
  int64_t rows = 0;
  for (const Tensor& p : parts) rows += p.size(0);
  s[0] = rows;
  Tensor out = Tensor::empty(s, parts[0].dtype());
  int64_t at = 0;
  for (const Tensor& p : parts) {
    out.narrow(0, at, p.size(0)).copy_(p);
    at += p.size(0);
  }
  return out;
}

bool same_bytes(const Tensor& a, const Tensor& b) {
  if (a.shape() != b.shape() || a.dtype() != b.dtype()) return false;
  Tensor ca = a.contiguous(), cb = b.contiguous();
  return std::memcmp(ca.data_ptr(), cb.data_ptr(), ca.nbytes()) == 0;
}

// As Megatron's checkpoint saver pads a converted vocabulary (tools/checkpoint/saver_base.py
// pad_weight). The padding ids are never produced by the tokenizer and generation drops their logits.
Tensor pad_rows(const Tensor& t, int64_t rows) {
  if (t.size(0) == rows) return t;
  Tensor out = Tensor::empty({rows, t.size(1)}, t.dtype());
  out.narrow(0, 0, t.size(0)).copy_(t);
  const Tensor last = t.narrow(0, t.size(0) - 1, 1);
  for (int64_t r = t.size(0); r < rows; ++r) out.narrow(0, r, 1).copy_(last);
  return out;
}

Tensor plus(const Tensor& t, double d) {
  std::vector<double> v = t.to_vector();
  for (double& x : v) x += d;
  return Tensor::from_vector(v, t.shape(), t.dtype());
}

Qkv split_qkv(const Tensor& w, int64_t np, int64_t ng, int64_t hn) {
  const int64_t per = np / ng, rest = w.numel() / (ng * (per + 2) * hn);
  Tensor w3 = w.contiguous().reshape({ng, per + 2, hn * rest});
  auto part = [&](int64_t start, int64_t n, int64_t rows) {
    Shape s = w.dim() == 2 ? Shape{rows, rest} : Shape{rows};
    return w3.narrow(1, start, n).contiguous().clone().reshape(s);
  };
  return Qkv{part(0, per, np * hn), part(per, 1, ng * hn), part(per + 1, 1, ng * hn)};
}

Tensor merge_qkv(const Tensor& q, const Tensor& k, const Tensor& v, int64_t np, int64_t ng, int64_t hn) {
  const int64_t per = np / ng, rest = q.numel() / (np * hn);
  Tensor w3 = Tensor::empty({ng, per + 2, hn * rest}, q.dtype());
  w3.narrow(1, 0, per).copy_(q.contiguous().reshape({ng, per, hn * rest}));
  w3.narrow(1, per, 1).copy_(k.contiguous().reshape({ng, 1, hn * rest}));
  w3.narrow(1, per + 1, 1).copy_(v.contiguous().reshape({ng, 1, hn * rest}));
  Shape s = q.dim() == 2 ? Shape{ng * (per + 2) * hn, rest} : Shape{ng * (per + 2) * hn};
  return w3.reshape(s);
}

}  // namespace detail

namespace {

using detail::cat_rows;
using detail::ExportTensors;
using detail::MlpDims;
using detail::pad_rows;
using detail::plus;
using detail::Qkv;
using detail::same_bytes;

struct Dims {
  int64_t h, np, ng, hn, ffn, pv, max_pos, layers;
  bool tied, one_p, qk_norm;
  std::vector<MlpDims> mlp;  // per layer: dense (experts 0) or MoE
};

Dims dims_of(const ResolvedModelConfig& m, int64_t padded_vocab) {
  Dims d{m->hidden_size, m->num_attention_heads, m.query_groups(), m.head_dim(), m.ffn(), padded_vocab,
         m.max_positions(), m->num_layers, !m->untie_embeddings_and_output_weights, m->apply_layernorm_1p,
         m->qk_layernorm, {}};
  for (int64_t i = 0; i < m->num_layers; ++i) {
    if (m.is_moe_layer(i))
      d.mlp.push_back(MlpDims{m->hidden_size, m.moe_ffn(), *m->num_experts});
    else
      d.mlp.push_back(MlpDims{m->hidden_size, m.ffn(), 0});
  }
  return d;
}

std::string mlayer(int64_t i) { return "decoder.layers." + std::to_string(i) + "."; }
std::string llayer(int64_t i) { return "model.layers." + std::to_string(i) + "."; }
std::string glayer(int64_t i) { return "transformer.h." + std::to_string(i) + "."; }

Qkv split_qkv(const Tensor& w, const Dims& d) { return detail::split_qkv(w, d.np, d.ng, d.hn); }
Tensor merge_qkv(const Tensor& q, const Tensor& k, const Tensor& v, const Dims& d) {
  return detail::merge_qkv(q, k, v, d.np, d.ng, d.hn);
}

// The HF tensors a config implies, with their shapes.
std::map<std::string, Shape> hf_shapes(Family f, const Dims& d) {
  std::map<std::string, Shape> s;
  if (f != Family::GPT2) {
    s["model.embed_tokens.weight"] = {d.pv, d.h};
    for (int64_t i = 0; i < d.layers; ++i) {
      const std::string p = llayer(i);
      s[p + "input_layernorm.weight"] = {d.h};
      s[p + "self_attn.q_proj.weight"] = {d.np * d.hn, d.h};
      s[p + "self_attn.k_proj.weight"] = {d.ng * d.hn, d.h};
      s[p + "self_attn.v_proj.weight"] = {d.ng * d.hn, d.h};
      s[p + "self_attn.o_proj.weight"] = {d.h, d.np * d.hn};
      if (d.qk_norm) {
        s[p + "self_attn.q_norm.weight"] = {d.hn};
        s[p + "self_attn.k_norm.weight"] = {d.hn};
      }
      s[p + "post_attention_layernorm.weight"] = {d.h};
      detail::mlp_hf_shapes(f, p, d.mlp[static_cast<size_t>(i)], s);
    }
    s["model.norm.weight"] = {d.h};
  } else {
    s["transformer.wte.weight"] = {d.pv, d.h};
    s["transformer.wpe.weight"] = {d.max_pos, d.h};
    for (int64_t i = 0; i < d.layers; ++i) {
      const std::string p = glayer(i);
      for (const char* ln : {"ln_1.", "ln_2."}) {
        s[p + ln + "weight"] = {d.h};
        s[p + ln + "bias"] = {d.h};
      }
      s[p + "attn.c_attn.weight"] = {d.h, 3 * d.h};
      s[p + "attn.c_attn.bias"] = {3 * d.h};
      s[p + "attn.c_proj.weight"] = {d.h, d.h};
      s[p + "attn.c_proj.bias"] = {d.h};
      s[p + "mlp.c_fc.weight"] = {d.h, d.ffn};
      s[p + "mlp.c_fc.bias"] = {d.ffn};
      s[p + "mlp.c_proj.weight"] = {d.ffn, d.h};
      s[p + "mlp.c_proj.bias"] = {d.h};
    }
    s["transformer.ln_f.weight"] = {d.h};
    s["transformer.ln_f.bias"] = {d.h};
  }
  if (!d.tied) s["lm_head.weight"] = {d.pv, d.h};
  return s;
}

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// HF name as a *ForCausalLM state dict spells it; empty for buffers that carry no weights.
std::string canonical_hf_name(const std::string& name, Family f) {
  if (f == Family::GPT2 && (ends_with(name, ".attn.bias") || ends_with(name, ".attn.masked_bias"))) return "";
  if (f != Family::GPT2 && ends_with(name, ".rotary_emb.inv_freq")) return "";
  const std::string base = f != Family::GPT2 ? "model." : "transformer.";
  if (name.rfind(base, 0) == 0 || name.rfind("lm_head.", 0) == 0) return name;
  return base + name;  // a base-model (LlamaModel / GPT2Model) checkpoint
}

}  // namespace

std::map<std::string, Tensor> to_hf_tensors(const ResolvedModelConfig& m, Family f,
                                            const std::map<std::string, Tensor>& mg) {
  if (is_mla(f)) return detail::deepseek_to_hf(m, mg);
  if (is_hybrid(f)) return detail::nemotron_h_to_hf(m, mg);
  if (f == Family::GptOss) return detail::gpt_oss_to_hf(m, mg);
  const ExportTensors src{mg, *m->vocab_size};
  auto get = [&](const std::string& name) -> const Tensor& { return src.get(name); };
  const int64_t vocab = *m->vocab_size;
  const auto real_rows = [&](const Tensor& t) { return src.real_rows(t); };
  const Tensor emb = real_rows(get("embedding.word_embeddings.weight"));
  const Dims d = dims_of(m, vocab);
  auto norm_w = [&](const std::string& name) { return d.one_p ? plus(get(name), 1.0) : get(name); };
  std::map<std::string, Tensor> out;
  if (f != Family::GPT2) {
    out["model.embed_tokens.weight"] = emb;
    for (int64_t i = 0; i < d.layers; ++i) {
      const std::string mp = mlayer(i), hp = llayer(i);
      out[hp + "input_layernorm.weight"] = norm_w(mp + "self_attention.linear_qkv.layer_norm_weight");
      Qkv qkv = split_qkv(get(mp + "self_attention.linear_qkv.weight"), d);
      out[hp + "self_attn.q_proj.weight"] = qkv.q;
      out[hp + "self_attn.k_proj.weight"] = qkv.k;
      out[hp + "self_attn.v_proj.weight"] = qkv.v;
      out[hp + "self_attn.o_proj.weight"] = get(mp + "self_attention.linear_proj.weight");
      if (d.qk_norm) {
        out[hp + "self_attn.q_norm.weight"] = norm_w(mp + "self_attention.q_layernorm.weight");
        out[hp + "self_attn.k_norm.weight"] = norm_w(mp + "self_attention.k_layernorm.weight");
      }
      out[hp + "post_attention_layernorm.weight"] = norm_w(mp + "mlp.linear_fc1.layer_norm_weight");
      detail::mlp_to_hf(f, mp, hp, d.mlp[static_cast<size_t>(i)], get, out);
    }
    out["model.norm.weight"] = norm_w("decoder.final_layernorm.weight");
  } else {
    out["transformer.wte.weight"] = emb;
    out["transformer.wpe.weight"] = get("embedding.position_embeddings.weight");
    for (int64_t i = 0; i < d.layers; ++i) {
      const std::string mp = mlayer(i), hp = glayer(i);
      out[hp + "ln_1.weight"] = norm_w(mp + "self_attention.linear_qkv.layer_norm_weight");
      out[hp + "ln_1.bias"] = get(mp + "self_attention.linear_qkv.layer_norm_bias");
      Qkv w = split_qkv(get(mp + "self_attention.linear_qkv.weight"), d);
      Qkv b = split_qkv(get(mp + "self_attention.linear_qkv.bias"), d);
      out[hp + "attn.c_attn.weight"] = cat_rows({w.q, w.k, w.v}).transpose(0, 1);  // Conv1D: [in, out]
      out[hp + "attn.c_attn.bias"] = cat_rows({b.q, b.k, b.v});
      out[hp + "attn.c_proj.weight"] = get(mp + "self_attention.linear_proj.weight").transpose(0, 1);
      out[hp + "attn.c_proj.bias"] = get(mp + "self_attention.linear_proj.bias");
      out[hp + "ln_2.weight"] = norm_w(mp + "mlp.linear_fc1.layer_norm_weight");
      out[hp + "ln_2.bias"] = get(mp + "mlp.linear_fc1.layer_norm_bias");
      out[hp + "mlp.c_fc.weight"] = get(mp + "mlp.linear_fc1.weight").transpose(0, 1);
      out[hp + "mlp.c_fc.bias"] = get(mp + "mlp.linear_fc1.bias");
      out[hp + "mlp.c_proj.weight"] = get(mp + "mlp.linear_fc2.weight").transpose(0, 1);
      out[hp + "mlp.c_proj.bias"] = get(mp + "mlp.linear_fc2.bias");
    }
    out["transformer.ln_f.weight"] = norm_w("decoder.final_layernorm.weight");
    out["transformer.ln_f.bias"] = get("decoder.final_layernorm.bias");
  }
  if (!d.tied) out["lm_head.weight"] = real_rows(get("output_layer.weight"));
  // Every tensor must have the shape the config implies (a checkpoint/config mismatch is a bug
  // upstream, but say which tensor).
  for (const auto& [name, shape] : hf_shapes(f, d)) {
    STRATA_CHECK(out.at(name).shape() == shape, "export --format hf: tensor '", name, "' has shape ",
                 out.at(name).shape().str(), ", the config implies ", shape.str());
  }
  return out;
}

std::map<std::string, Tensor> from_hf_tensors(const ResolvedModelConfig& m, Family f, int64_t file_vocab,
                                              int64_t padded_vocab, const std::map<std::string, Tensor>& hf_in,
                                              const std::string& file, int64_t file_mtp_layers,
                                              std::vector<std::string>* notes) {
  STRATA_CHECK(file_vocab <= padded_vocab, file, ": vocab_size ", file_vocab,
               " is larger than the model's padded vocabulary ", padded_vocab, " (model.vocab_size ", *m->vocab_size,
               ", model.make_vocab_size_divisible_by ", m->make_vocab_size_divisible_by, ")");
  if (is_hybrid(f)) return detail::nemotron_h_from_hf(m, file_vocab, padded_vocab, hf_in, file, notes);
  std::map<std::string, Tensor> hf;
  for (const auto& [raw, t] : hf_in) {
    const std::string name = canonical_hf_name(raw, f);
    if (name.empty()) continue;
    STRATA_CHECK(!hf.count(name), file, ": tensor '", raw, "' appears twice (as '", name, "')");
    hf[name] = t;
  }
  if (is_mla(f)) return detail::deepseek_from_hf(m, file_vocab, padded_vocab, std::move(hf), file, file_mtp_layers, notes);
  if (f == Family::GptOss) return detail::gpt_oss_from_hf(m, file_vocab, padded_vocab, std::move(hf), file);
  const Dims d = dims_of(m, file_vocab);
  const std::map<std::string, Shape> want = hf_shapes(f, d);
  const std::string embed_name = f != Family::GPT2 ? "model.embed_tokens.weight" : "transformer.wte.weight";
  if (d.tied && hf.count("lm_head.weight")) {
    STRATA_CHECK(hf.count(embed_name) && same_bytes(hf.at("lm_head.weight"), hf.at(embed_name)), file,
                 ": tensor 'lm_head.weight' differs from '", embed_name,
                 "' but tie_word_embeddings is true (set it to false in config.json for an untied model)");
    hf.erase("lm_head.weight");
  }
  for (const auto& [name, shape] : want) {
    auto it = hf.find(name);
    STRATA_CHECK(it != hf.end(), file, ": tensor '", name, "' is missing");
    STRATA_CHECK(it->second.shape() == shape, file, ": tensor '", name, "' has shape ", it->second.shape().str(),
                 ", config.json implies ", shape.str());
  }
  for (const auto& [name, t] : hf)
    STRATA_CHECK(want.count(name), file, ": unexpected tensor '", name, "' (shape ", t.shape().str(), ") for a ",
                 architecture_name(f), " with this config.json");

  std::map<std::string, Tensor> out;
  out["embedding.word_embeddings.weight"] = pad_rows(hf.at(embed_name), padded_vocab);
  if (f != Family::GPT2) {
    for (int64_t i = 0; i < d.layers; ++i) {
      const std::string mp = mlayer(i), hp = llayer(i);
      out[mp + "self_attention.linear_qkv.layer_norm_weight"] = hf.at(hp + "input_layernorm.weight");
      out[mp + "self_attention.linear_qkv.weight"] = merge_qkv(
          hf.at(hp + "self_attn.q_proj.weight"), hf.at(hp + "self_attn.k_proj.weight"),
          hf.at(hp + "self_attn.v_proj.weight"), d);
      out[mp + "self_attention.linear_proj.weight"] = hf.at(hp + "self_attn.o_proj.weight");
      if (d.qk_norm) {
        out[mp + "self_attention.q_layernorm.weight"] = hf.at(hp + "self_attn.q_norm.weight");
        out[mp + "self_attention.k_layernorm.weight"] = hf.at(hp + "self_attn.k_norm.weight");
      }
      out[mp + "mlp.linear_fc1.layer_norm_weight"] = hf.at(hp + "post_attention_layernorm.weight");
      detail::mlp_from_hf(f, mp, hp, d.mlp[static_cast<size_t>(i)], hf, out);
    }
    out["decoder.final_layernorm.weight"] = hf.at("model.norm.weight");
  } else {
    out["embedding.position_embeddings.weight"] = hf.at("transformer.wpe.weight");
    for (int64_t i = 0; i < d.layers; ++i) {
      const std::string mp = mlayer(i), hp = glayer(i);
      out[mp + "self_attention.linear_qkv.layer_norm_weight"] = hf.at(hp + "ln_1.weight");
      out[mp + "self_attention.linear_qkv.layer_norm_bias"] = hf.at(hp + "ln_1.bias");
      const Tensor w = hf.at(hp + "attn.c_attn.weight").transpose(0, 1);  // [3h, h] = [q; k; v]
      const Tensor b = hf.at(hp + "attn.c_attn.bias");
      auto third = [&](const Tensor& t, int64_t j) { return t.narrow(0, j * d.h, d.h).contiguous(); };
      out[mp + "self_attention.linear_qkv.weight"] = merge_qkv(third(w, 0), third(w, 1), third(w, 2), d);
      out[mp + "self_attention.linear_qkv.bias"] = merge_qkv(third(b, 0), third(b, 1), third(b, 2), d);
      out[mp + "self_attention.linear_proj.weight"] = hf.at(hp + "attn.c_proj.weight").transpose(0, 1);
      out[mp + "self_attention.linear_proj.bias"] = hf.at(hp + "attn.c_proj.bias");
      out[mp + "mlp.linear_fc1.layer_norm_weight"] = hf.at(hp + "ln_2.weight");
      out[mp + "mlp.linear_fc1.layer_norm_bias"] = hf.at(hp + "ln_2.bias");
      out[mp + "mlp.linear_fc1.weight"] = hf.at(hp + "mlp.c_fc.weight").transpose(0, 1);
      out[mp + "mlp.linear_fc1.bias"] = hf.at(hp + "mlp.c_fc.bias");
      out[mp + "mlp.linear_fc2.weight"] = hf.at(hp + "mlp.c_proj.weight").transpose(0, 1);
      out[mp + "mlp.linear_fc2.bias"] = hf.at(hp + "mlp.c_proj.bias");
    }
    out["decoder.final_layernorm.weight"] = hf.at("transformer.ln_f.weight");
    out["decoder.final_layernorm.bias"] = hf.at("transformer.ln_f.bias");
  }
  if (!d.tied) out["output_layer.weight"] = pad_rows(hf.at("lm_head.weight"), padded_vocab);
  return out;
}

}  // namespace strata::hf
