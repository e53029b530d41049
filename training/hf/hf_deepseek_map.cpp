// DeepseekV3ForCausalLM's tensor maps (training/hf/hf_deepseek_map.h).
// Reference: transformers models/deepseek_v3/modeling_deepseek_v3.py (DeepseekV3Attention,
// DeepseekV3MoE, DeepseekV3TopkRouter.e_score_correction_bias), modeling_layers.py (MtpLayer);
// Megatron-LM megatron/core/transformer/multi_latent_attention.py, multi_token_prediction.py.
#include "training/hf/hf_deepseek_map.h"

#include <functional>
#include <sstream>

#include "core/error.h"
#include "training/hf/hf_deepseek_format.h"
#include "training/hf/hf_moe_map.h"
#include "training/hf/hf_tensor_ops.h"

namespace strata::hf::detail {

namespace {

using Get = std::function<const Tensor&(const std::string&)>;

// One decoder layer (or MTP depth's inner layer): its canonical and HF prefixes, MoE or dense.
struct Layer {
  std::string mp, hp;
  bool moe = false;
  int64_t mtp = -1;  // the MTP depth k, or -1 for a decoder layer
};

std::string hf_layer(int64_t n) { return "model.layers." + std::to_string(n) + "."; }

// The decoder layers then the MTP depths' inner layers (the decoder's last layer kind, MoE).
std::vector<Layer> layers_of(const ResolvedModelConfig& m, int64_t mtp_layers) {
  std::vector<Layer> out;
  for (int64_t i = 0; i < m->num_layers; ++i)
    out.push_back({"decoder.layers." + std::to_string(i) + ".", hf_layer(i), m.is_moe_layer(i), -1});
  for (int64_t k = 0; k < mtp_layers; ++k)
    out.push_back({"mtp.layers." + std::to_string(k) + ".mtp_model_layer.", hf_layer(m->num_layers + k), true, k});
  return out;
}

// (HF suffix, canonical suffix, a norm weight) of the attention half and the two norms.
struct Pair {
  std::string hf, mg;
  bool norm;
};
std::vector<Pair> attention_pairs(const MlaDims& d) {
  std::vector<Pair> p;
  if (d.q_lora_rank > 0) {
    p.push_back({"self_attn.q_a_proj.weight", "self_attention.linear_q_down_proj.weight", false});
    p.push_back({"self_attn.q_a_layernorm.weight", "self_attention.linear_q_up_proj.layer_norm_weight", true});
    p.push_back({"self_attn.q_b_proj.weight", "self_attention.linear_q_up_proj.weight", false});
  } else {
    p.push_back({"self_attn.q_proj.weight", "self_attention.linear_q_proj.weight", false});
  }
  p.push_back({"self_attn.kv_a_proj_with_mqa.weight", "self_attention.linear_kv_down_proj.weight", false});
  p.push_back({"self_attn.kv_a_layernorm.weight", "self_attention.linear_kv_up_proj.layer_norm_weight", true});
  p.push_back({"self_attn.kv_b_proj.weight", "self_attention.linear_kv_up_proj.weight", false});
  p.push_back({"self_attn.o_proj.weight", "self_attention.linear_proj.weight", false});
  p.push_back({"input_layernorm.weight", "input_layernorm.weight", true});
  p.push_back({"post_attention_layernorm.weight", "mlp.linear_fc1.layer_norm_weight", true});
  return p;
}
// MTP depth k's own tensors: (HF suffix of layer L + k, canonical suffix of mtp.layers.k., a norm).
const std::vector<Pair>& mtp_pairs() {
  static const std::vector<Pair> p = {{"enorm.weight", "enorm.weight", true},
                                      {"hnorm.weight", "hnorm.weight", true},
                                      {"eh_proj.weight", "eh_proj.weight", false},
                                      {"shared_head.norm.weight", "final_layernorm.weight", true}};
  return p;
}

MlpDims mlp_dims(const ResolvedModelConfig& m, bool moe) {
  return moe ? MlpDims{m->hidden_size, m.moe_ffn(), *m->num_experts} : MlpDims{m->hidden_size, m.ffn(), 0};
}
int64_t shared_ffn(const ResolvedModelConfig& m) { return m->moe_shared_expert_intermediate_size.value_or(0); }

// Every HF tensor of the config with its shape (vocab: the embedding rows).
std::map<std::string, Shape> hf_shapes(const ResolvedModelConfig& m, int64_t vocab, int64_t mtp_layers) {
  const MlaDims d = mla_dims(*m);
  const int64_t h = m->hidden_size;
  const std::map<std::string, Shape> attention = {
      {"self_attn.q_a_proj.weight", {d.q_lora_rank, h}},  {"self_attn.q_a_layernorm.weight", {d.q_lora_rank}},
      {"self_attn.q_b_proj.weight", {d.q_out(), d.q_lora_rank}}, {"self_attn.q_proj.weight", {d.q_out(), h}},
      {"self_attn.kv_a_proj_with_mqa.weight", {d.kv_down_out(), h}},
      {"self_attn.kv_a_layernorm.weight", {d.kv_lora_rank}}, {"self_attn.kv_b_proj.weight", {d.kv_up_out(), d.kv_lora_rank}},
      {"self_attn.o_proj.weight", {h, d.heads * d.v_head_dim}}, {"input_layernorm.weight", {h}},
      {"post_attention_layernorm.weight", {h}}};
  std::map<std::string, Shape> s = {{"model.embed_tokens.weight", {vocab, h}}, {"model.norm.weight", {h}}};
  if (m->untie_embeddings_and_output_weights) s["lm_head.weight"] = {vocab, h};
  for (const Layer& l : layers_of(m, mtp_layers)) {
    for (const Pair& p : attention_pairs(d)) s[l.hp + p.hf] = attention.at(p.hf);
    mlp_hf_shapes(Family::DeepseekV3, l.hp, mlp_dims(m, l.moe), s);
    if (l.moe) {
      s[l.hp + "mlp.gate.e_score_correction_bias"] = {*m->num_experts};
      s[l.hp + "mlp.shared_experts.gate_proj.weight"] = s[l.hp + "mlp.shared_experts.up_proj.weight"] = {shared_ffn(m), h};
      s[l.hp + "mlp.shared_experts.down_proj.weight"] = {h, shared_ffn(m)};
    }
    if (l.mtp < 0) continue;
    for (const Pair& p : mtp_pairs()) s[l.hp + p.hf] = p.hf == "eh_proj.weight" ? Shape{h, 2 * h} : Shape{h};
    s[l.hp + "shared_head.head.weight"] = s[l.hp + "embed_tokens.weight"] = {vocab, h};
  }
  return s;
}

// Layer l's canonical tensors → HF (the MoE extras: bias, shared experts).
void layer_to_hf(const ResolvedModelConfig& m, const Layer& l, const Get& get,
                 const std::function<Tensor(const std::string&)>& norm_w, std::map<std::string, Tensor>& out) {
  for (const Pair& p : attention_pairs(mla_dims(*m))) out[l.hp + p.hf] = p.norm ? norm_w(l.mp + p.mg) : get(l.mp + p.mg);
  mlp_to_hf(Family::DeepseekV3, l.mp, l.hp, mlp_dims(m, l.moe), get, out);
  if (!l.moe) return;
  out[l.hp + "mlp.gate.e_score_correction_bias"] = m->moe_router_enable_expert_bias
                                                       ? get(l.mp + "mlp.router.expert_bias")
                                                       : Tensor::zeros({*m->num_experts}, DType::F32);
  const Tensor& fc1 = get(l.mp + "mlp.shared_experts.linear_fc1.weight");  // [2S, h] = [gate; up]
  out[l.hp + "mlp.shared_experts.gate_proj.weight"] = fc1.narrow(0, 0, shared_ffn(m)).contiguous().clone();
  out[l.hp + "mlp.shared_experts.up_proj.weight"] = fc1.narrow(0, shared_ffn(m), shared_ffn(m)).contiguous().clone();
  out[l.hp + "mlp.shared_experts.down_proj.weight"] = get(l.mp + "mlp.shared_experts.linear_fc2.weight");
}

// Layer l's HF tensors → canonical (an expert bias the config turned off must be zero in the file).
void layer_from_hf(const ResolvedModelConfig& m, const Layer& l, const std::map<std::string, Tensor>& hf,
                   const std::string& file, std::map<std::string, Tensor>& out) {
  for (const Pair& p : attention_pairs(mla_dims(*m))) out[l.mp + p.mg] = hf.at(l.hp + p.hf);
  mlp_from_hf(Family::DeepseekV3, l.mp, l.hp, mlp_dims(m, l.moe), hf, out);
  if (!l.moe) return;
  const std::string bias = l.hp + "mlp.gate.e_score_correction_bias";
  if (m->moe_router_enable_expert_bias) {
    out[l.mp + "mlp.router.expert_bias"] = hf.at(bias);
  } else {
    for (double v : hf.at(bias).to_vector())
      STRATA_CHECK(v == 0.0, file, ": tensor '", bias, "' is not zero but model.moe_router_enable_expert_bias is false");
  }
  out[l.mp + "mlp.shared_experts.linear_fc1.weight"] =
      cat_rows({hf.at(l.hp + "mlp.shared_experts.gate_proj.weight"), hf.at(l.hp + "mlp.shared_experts.up_proj.weight")});
  out[l.mp + "mlp.shared_experts.linear_fc2.weight"] = hf.at(l.hp + "mlp.shared_experts.down_proj.weight");
}

// The layer index n of "model.layers.{n}.…", or -1.
int64_t layer_index(const std::string& name) {
  const std::string prefix = "model.layers.";
  if (name.rfind(prefix, 0) != 0) return -1;
  const size_t dot = name.find('.', prefix.size());
  if (dot == std::string::npos) return -1;
  try {
    return std::stoll(name.substr(prefix.size(), dot - prefix.size()));
  } catch (const std::exception&) {
    return -1;
  }
}

}  // namespace

std::map<std::string, Tensor> deepseek_to_hf(const ResolvedModelConfig& m, const std::map<std::string, Tensor>& mg) {
  const ExportTensors src{mg, *m->vocab_size};
  const Get get = [&](const std::string& name) -> const Tensor& { return src.get(name); };
  const auto norm_w = [&](const std::string& name) { return m->apply_layernorm_1p ? plus(get(name), 1.0) : get(name); };
  const int64_t vocab = *m->vocab_size, mtp_layers = deepseek_export_mtp_layers(m);
  const auto real_rows = [&](const Tensor& t) { return src.real_rows(t); };
  std::map<std::string, Tensor> out;
  out["model.embed_tokens.weight"] = real_rows(get("embedding.word_embeddings.weight"));
  out["model.norm.weight"] = norm_w("decoder.final_layernorm.weight");
  const Tensor head = m->untie_embeddings_and_output_weights ? real_rows(get("output_layer.weight"))
                                                             : out.at("model.embed_tokens.weight");
  if (m->untie_embeddings_and_output_weights) out["lm_head.weight"] = head;
  for (const Layer& l : layers_of(m, mtp_layers)) {
    layer_to_hf(m, l, get, norm_w, out);
    if (l.mtp < 0) continue;
    const std::string mp = "mtp.layers." + std::to_string(l.mtp) + ".";
    for (const Pair& p : mtp_pairs()) out[l.hp + p.hf] = p.norm ? norm_w(mp + p.mg) : get(mp + p.mg);
    out[l.hp + "embed_tokens.weight"] = out.at("model.embed_tokens.weight");  // DeepSeek stores copies
    out[l.hp + "shared_head.head.weight"] = head;
  }
  for (const auto& [name, shape] : hf_shapes(m, vocab, mtp_layers)) {
    STRATA_CHECK(out.count(name) && out.at(name).shape() == shape, "export --format hf: tensor '", name,
                 "' has shape ", out.count(name) ? out.at(name).shape().str() : "(none)", ", the config implies ",
                 shape.str());
  }
  return out;
}

std::map<std::string, Tensor> deepseek_from_hf(const ResolvedModelConfig& m, int64_t file_vocab, int64_t padded_vocab,
                                               std::map<std::string, Tensor> hf, const std::string& file,
                                               int64_t file_mtp_layers, std::vector<std::string>* notes) {
  const int64_t mtp_layers = m->mtp_depths(), L = m->num_layers;
  STRATA_CHECK(mtp_layers <= file_mtp_layers || mtp_layers == 0, "import --hf: model.mtp_num_layers ", mtp_layers,
               " exceeds the ", file_mtp_layers, " MTP layer(s) of ", file, " (config.json num_nextn_predict_layers)");
  STRATA_CHECK(!m->mtp_use_repeated_layer || mtp_layers == 0, "import --hf: model.mtp_use_repeated_layer=true: ",
               file, " holds one layer per MTP depth");
  const bool tied = !m->untie_embeddings_and_output_weights;
  if (tied && hf.count("lm_head.weight")) {
    STRATA_CHECK(same_bytes(hf.at("lm_head.weight"), hf.at("model.embed_tokens.weight")), file,
                 ": tensor 'lm_head.weight' differs from 'model.embed_tokens.weight' but tie_word_embeddings is true "
                 "(set it to false in config.json for an untied model)");
    hf.erase("lm_head.weight");
  }
  const std::map<std::string, Shape> want = hf_shapes(m, file_vocab, mtp_layers);
  for (const auto& [name, shape] : want) {
    auto it = hf.find(name);
    STRATA_CHECK(it != hf.end(), file, ": tensor '", name, "' is missing");
    STRATA_CHECK(it->second.shape() == shape, file, ": tensor '", name, "' has shape ", it->second.shape().str(),
                 ", config.json implies ", shape.str());
  }
  int64_t dropped = 0;
  for (const auto& [name, t] : hf) {
    if (want.count(name)) continue;
    const int64_t n = layer_index(name);
    const bool later_mtp = n >= L + mtp_layers && n < L + file_mtp_layers;
    STRATA_CHECK(later_mtp, file, ": unexpected tensor '", name, "' (shape ", t.shape().str(),
                 ") for a DeepseekV3ForCausalLM with this config.json");
    ++dropped;
  }
  if (dropped > 0 && notes)
    notes->push_back("the " + std::to_string(dropped) + " tensors of MTP layers model.layers." +
                     std::to_string(L + mtp_layers) + "-" + std::to_string(L + file_mtp_layers - 1) +
                     " are left out (model.mtp_num_layers " + std::to_string(mtp_layers) + ")");
  std::map<std::string, Tensor> out;
  const Tensor& embed = hf.at("model.embed_tokens.weight");
  const Tensor& head = tied ? embed : hf.at("lm_head.weight");
  out["embedding.word_embeddings.weight"] = pad_rows(embed, padded_vocab);
  if (!tied) out["output_layer.weight"] = pad_rows(head, padded_vocab);
  out["decoder.final_layernorm.weight"] = hf.at("model.norm.weight");
  for (const Layer& l : layers_of(m, mtp_layers)) {
    layer_from_hf(m, l, hf, file, out);
    if (l.mtp < 0) continue;
    const std::string mp = "mtp.layers." + std::to_string(l.mtp) + ".";
    for (const Pair& p : mtp_pairs()) out[mp + p.mg] = hf.at(l.hp + p.hf);
    // Strata's MTP depths use the model's embedding and output head: DeepSeek's copies must equal them.
    for (const auto& [copy, main] : {std::pair<std::string, const Tensor*>{"embed_tokens.weight", &embed},
                                     {"shared_head.head.weight", &head}})
      STRATA_CHECK(same_bytes(hf.at(l.hp + copy), *main), file, ": tensor '", l.hp + copy, "' differs from the "
                   "model's ", copy == "embed_tokens.weight" ? "embedding" : "output head",
                   " (Strata's MTP layers share them)");
  }
  return out;
}

int64_t deepseek_mtp_layers_in(const std::map<std::string, Tensor>& hf, int64_t num_layers, int64_t declared) {
  int64_t k = 0;
  while (k < declared) {
    const std::string name = "layers." + std::to_string(num_layers + k) + ".eh_proj.weight";
    if (!hf.count(name) && !hf.count("model." + name)) break;
    ++k;
  }
  return k;
}

}  // namespace strata::hf::detail
