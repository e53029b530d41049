// GptOssForCausalLM's tensor maps (training/hf/hf_gpt_oss_map.h).
// Reference: transformers models/gpt_oss/modeling_gpt_oss.py (GptOssDecoderLayer, GptOssAttention,
// GptOssTopKRouter, GptOssExperts); Megatron-Bridge models/gpt_oss/gpt_oss_bridge.py.
#include "training/hf/hf_gpt_oss_map.h"

#include <functional>
#include <vector>

#include "core/error.h"
#include "training/hf/hf_tensor_ops.h"

namespace strata::hf::detail {

namespace {

// One tensor that maps one to one: HF name, canonical name, shape.
struct Entry {
  std::string hf, mg;
  Shape shape;
};

std::string hf_layer(int64_t i) { return "model.layers." + std::to_string(i) + "."; }
std::string mg_layer(int64_t i) { return "decoder.layers." + std::to_string(i) + "."; }

struct Dims {
  int64_t h, np, ng, hn, experts, ffn;
};
Dims dims_of(const ResolvedModelConfig& m) {
  return {m->hidden_size, m->num_attention_heads, m.query_groups(), m.head_dim(), *m->num_experts, m.moe_ffn()};
}

// Every one-to-one tensor of the decoder layers and the final norm.
std::vector<Entry> entries(const ResolvedModelConfig& m) {
  const Dims d = dims_of(m);
  std::vector<Entry> e;
  for (int64_t i = 0; i < m->num_layers; ++i) {
    const std::string hp = hf_layer(i), mp = mg_layer(i);
    e.push_back({hp + "input_layernorm.weight", mp + "self_attention.linear_qkv.layer_norm_weight", {d.h}});
    e.push_back({hp + "self_attn.o_proj.weight", mp + "self_attention.linear_proj.weight", {d.h, d.np * d.hn}});
    e.push_back({hp + "self_attn.o_proj.bias", mp + "self_attention.linear_proj.bias", {d.h}});
    e.push_back({hp + "self_attn.sinks", mp + "self_attention.core_attention.softmax_offset", {d.np}});
    e.push_back({hp + "post_attention_layernorm.weight", mp + "mlp.linear_fc1.layer_norm_weight", {d.h}});
    e.push_back({hp + "mlp.router.weight", mp + "mlp.router.weight", {d.experts, d.h}});
    e.push_back({hp + "mlp.router.bias", mp + "mlp.router.bias", {d.experts}});
  }
  e.push_back({"model.norm.weight", "decoder.final_layernorm.weight", {d.h}});
  return e;
}

// Every HF tensor with its shape (vocab: the embedding rows).
std::map<std::string, Shape> hf_shapes(const ResolvedModelConfig& m, int64_t vocab) {
  const Dims d = dims_of(m);
  std::map<std::string, Shape> s;
  for (const Entry& e : entries(m)) s[e.hf] = e.shape;
  for (int64_t i = 0; i < m->num_layers; ++i) {
    const std::string hp = hf_layer(i);
    s[hp + "self_attn.q_proj.weight"] = {d.np * d.hn, d.h};
    s[hp + "self_attn.q_proj.bias"] = {d.np * d.hn};
    for (const char* kv : {"k_proj", "v_proj"}) {
      s[hp + "self_attn." + kv + ".weight"] = {d.ng * d.hn, d.h};
      s[hp + "self_attn." + kv + ".bias"] = {d.ng * d.hn};
    }
    s[hp + "mlp.experts.gate_up_proj"] = {d.experts, d.h, 2 * d.ffn};
    s[hp + "mlp.experts.gate_up_proj_bias"] = {d.experts, 2 * d.ffn};
    s[hp + "mlp.experts.down_proj"] = {d.experts, d.ffn, d.h};
    s[hp + "mlp.experts.down_proj_bias"] = {d.experts, d.h};
  }
  s["model.embed_tokens.weight"] = {vocab, d.h};
  if (m->untie_embeddings_and_output_weights) s["lm_head.weight"] = {vocab, d.h};
  return s;
}

// [gate; up] rows [2F, …] ⇄ interleaved rows (2r gate r, 2r + 1 up r).
Tensor interleave(const Tensor& t, int64_t f) {
  const int64_t rest = t.numel() / (2 * f);
  return t.contiguous().reshape({2, f, rest}).transpose(0, 1).reshape(t.shape());
}
Tensor deinterleave(const Tensor& t, int64_t f) {
  const int64_t rest = t.numel() / (2 * f);
  return t.contiguous().reshape({f, 2, rest}).transpose(0, 1).reshape(t.shape());
}

// The experts of layer i, canonical → HF (fused over the experts).
void experts_to_hf(const Dims& d, const std::string& mp, const std::string& hp,
                   const std::function<const Tensor&(const std::string&)>& get, std::map<std::string, Tensor>& out) {
  const std::string ex = mp + "mlp.experts.";
  const DType dt = get(ex + "linear_fc1.weight0").dtype();
  Tensor gate_up = Tensor::empty({d.experts, d.h, 2 * d.ffn}, dt), gate_up_bias = Tensor::empty({d.experts, 2 * d.ffn}, dt);
  Tensor down = Tensor::empty({d.experts, d.ffn, d.h}, dt), down_bias = Tensor::empty({d.experts, d.h}, dt);
  for (int64_t e = 0; e < d.experts; ++e) {
    const std::string id = std::to_string(e);
    const Tensor& fc1 = get(ex + "linear_fc1.weight" + id);  // [2F, h]
    const Tensor& fc2 = get(ex + "linear_fc2.weight" + id);  // [h, F]
    STRATA_CHECK(fc1.shape() == (Shape{2 * d.ffn, d.h}) && fc2.shape() == (Shape{d.h, d.ffn}),
                 "export --format hf: expert ", e, " of ", ex, " has shapes ", fc1.shape().str(), " / ",
                 fc2.shape().str(), ", the config implies [", 2 * d.ffn, ", ", d.h, "] / [", d.h, ", ", d.ffn, "]");
    gate_up.narrow(0, e, 1).copy_(interleave(fc1, d.ffn).transpose(0, 1).reshape({1, d.h, 2 * d.ffn}));
    gate_up_bias.narrow(0, e, 1).copy_(interleave(get(ex + "linear_fc1.bias" + id), d.ffn).reshape({1, 2 * d.ffn}));
    down.narrow(0, e, 1).copy_(fc2.transpose(0, 1).reshape({1, d.ffn, d.h}));
    down_bias.narrow(0, e, 1).copy_(get(ex + "linear_fc2.bias" + id).reshape({1, d.h}));
  }
  out[hp + "mlp.experts.gate_up_proj"] = gate_up;
  out[hp + "mlp.experts.gate_up_proj_bias"] = gate_up_bias;
  out[hp + "mlp.experts.down_proj"] = down;
  out[hp + "mlp.experts.down_proj_bias"] = down_bias;
}

// The experts of layer i, HF → canonical.
void experts_from_hf(const Dims& d, const std::string& mp, const std::string& hp,
                     const std::map<std::string, Tensor>& hf, std::map<std::string, Tensor>& out) {
  const std::string ex = mp + "mlp.experts.";
  const Tensor& gate_up = hf.at(hp + "mlp.experts.gate_up_proj");
  const Tensor& gate_up_bias = hf.at(hp + "mlp.experts.gate_up_proj_bias");
  const Tensor& down = hf.at(hp + "mlp.experts.down_proj");
  const Tensor& down_bias = hf.at(hp + "mlp.experts.down_proj_bias");
  for (int64_t e = 0; e < d.experts; ++e) {
    const std::string id = std::to_string(e);
    const Tensor w1 = gate_up.select(0, e).contiguous().transpose(0, 1);  // [2F, h], rows interleaved
    out[ex + "linear_fc1.weight" + id] = deinterleave(w1, d.ffn);
    out[ex + "linear_fc1.bias" + id] = deinterleave(gate_up_bias.select(0, e).contiguous(), d.ffn);
    out[ex + "linear_fc2.weight" + id] = down.select(0, e).contiguous().transpose(0, 1);
    out[ex + "linear_fc2.bias" + id] = down_bias.select(0, e).contiguous().clone();
  }
}

}  // namespace

std::map<std::string, Tensor> gpt_oss_to_hf(const ResolvedModelConfig& m, const std::map<std::string, Tensor>& mg) {
  const ExportTensors src{mg, *m->vocab_size};
  const std::function<const Tensor&(const std::string&)> get = [&](const std::string& name) -> const Tensor& {
    return src.get(name);
  };
  const int64_t vocab = *m->vocab_size;
  const auto real_rows = [&](const Tensor& t) { return src.real_rows(t); };
  const Dims d = dims_of(m);
  std::map<std::string, Tensor> out;
  out["model.embed_tokens.weight"] = real_rows(get("embedding.word_embeddings.weight"));
  if (m->untie_embeddings_and_output_weights) out["lm_head.weight"] = real_rows(get("output_layer.weight"));
  for (const Entry& e : entries(m)) out[e.hf] = get(e.mg);
  for (int64_t i = 0; i < m->num_layers; ++i) {
    const std::string hp = hf_layer(i), mp = mg_layer(i);
    for (const char* part : {"weight", "bias"}) {
      const Qkv qkv = split_qkv(get(mp + "self_attention.linear_qkv." + part), d.np, d.ng, d.hn);
      out[hp + "self_attn.q_proj." + part] = qkv.q;
      out[hp + "self_attn.k_proj." + part] = qkv.k;
      out[hp + "self_attn.v_proj." + part] = qkv.v;
    }
    experts_to_hf(d, mp, hp, get, out);
  }
  for (const auto& [name, shape] : hf_shapes(m, vocab)) {
    STRATA_CHECK(out.count(name) && out.at(name).shape() == shape, "export --format hf: tensor '", name,
                 "' has shape ", out.count(name) ? out.at(name).shape().str() : "(none)", ", the config implies ",
                 shape.str());
  }
  return out;
}

std::map<std::string, Tensor> gpt_oss_from_hf(const ResolvedModelConfig& m, int64_t file_vocab, int64_t padded_vocab,
                                              std::map<std::string, Tensor> hf, const std::string& file) {
  const bool tied = !m->untie_embeddings_and_output_weights;
  if (tied && hf.count("lm_head.weight")) {
    STRATA_CHECK(same_bytes(hf.at("lm_head.weight"), hf.at("model.embed_tokens.weight")), file,
                 ": tensor 'lm_head.weight' differs from 'model.embed_tokens.weight' but tie_word_embeddings is true "
                 "(set it to false in config.json for an untied model)");
    hf.erase("lm_head.weight");
  }
  const std::map<std::string, Shape> want = hf_shapes(m, file_vocab);
  for (const auto& [name, shape] : want) {
    auto it = hf.find(name);
    STRATA_CHECK(it != hf.end(), file, ": tensor '", name, "' is missing",
                 hf.count(name + "_blocks") ? " (the file holds its MXFP4 blocks: dequantize it to bf16 first)" : "");
    STRATA_CHECK(it->second.shape() == shape, file, ": tensor '", name, "' has shape ", it->second.shape().str(),
                 ", config.json implies ", shape.str());
  }
  for (const auto& [name, t] : hf)
    STRATA_CHECK(want.count(name), file, ": unexpected tensor '", name, "' (shape ", t.shape().str(),
                 ") for a GptOssForCausalLM with this config.json");
  const Dims d = dims_of(m);
  std::map<std::string, Tensor> out;
  out["embedding.word_embeddings.weight"] = pad_rows(hf.at("model.embed_tokens.weight"), padded_vocab);
  if (!tied) out["output_layer.weight"] = pad_rows(hf.at("lm_head.weight"), padded_vocab);
  for (const Entry& e : entries(m)) out[e.mg] = hf.at(e.hf);
  for (int64_t i = 0; i < m->num_layers; ++i) {
    const std::string hp = hf_layer(i), mp = mg_layer(i);
    for (const char* part : {"weight", "bias"}) {
      const std::string a = hp + "self_attn.";
      out[mp + "self_attention.linear_qkv." + part] =
          merge_qkv(hf.at(a + "q_proj." + part), hf.at(a + "k_proj." + part), hf.at(a + "v_proj." + part), d.np, d.ng,
                    d.hn);
    }
    experts_from_hf(d, mp, hp, hf, out);
  }
  return out;
}

}  // namespace strata::hf::detail
