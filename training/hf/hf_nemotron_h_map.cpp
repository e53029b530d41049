// NemotronHForCausalLM's tensor maps (training/hf/hf_nemotron_h_map.h).
// Reference: transformers models/nemotron_h/modeling_nemotron_h.py (NemotronHModel: embeddings,
// layers.N.{norm, mixer}, norm_f; NemotronHForCausalLM.lm_head; NemotronHExperts),
// conversion_mapping.py ("nemotron_h"); Megatron-Bridge models/nemotronh/nemotron_h_bridge.py.
#include "training/hf/hf_nemotron_h_map.h"

#include <functional>

#include "core/error.h"
#include "models/config/hybrid_pattern.h"
#include "models/config/mamba_config.h"
#include "training/hf/hf_tensor_ops.h"

namespace strata::hf::detail {

namespace {

const std::string kBase = "backbone.";

// One tensor that maps one to one: HF name, canonical name, shape.
struct Entry {
  std::string hf, mg;
  Shape shape;
};

std::string hf_layer(int64_t i) { return kBase + "layers." + std::to_string(i) + "."; }
std::string mg_layer(int64_t i) { return "decoder.layers." + std::to_string(i) + "."; }

// The pre-norm of a block of kind `symbol`, as Megatron names it.
std::string norm_name(char symbol) {
  switch (symbol) {
    case hybrid::kMamba: return "mixer.in_proj.layer_norm_weight";
    case hybrid::kAttention: return "self_attention.linear_qkv.layer_norm_weight";
    case hybrid::kMlp: return "mlp.linear_fc1.layer_norm_weight";
    default: return "pre_mlp_layernorm.weight";
  }
}

void mamba_entries(const ResolvedModelConfig& m, const std::string& hp, const std::string& mp, std::vector<Entry>& e) {
  const MambaDims d = mamba_dims(*m);
  const int64_t h = m->hidden_size;
  for (const auto& [name, shape] : std::vector<std::pair<std::string, Shape>>{
           {"in_proj.weight", {d.in_proj_out(), h}},
           {"conv1d.weight", {d.conv_dim(), 1, d.conv_kernel}},
           {"conv1d.bias", {d.conv_dim()}},
           {"dt_bias", {d.heads}},
           {"A_log", {d.heads}},
           {"D", {d.heads}},
           {"norm.weight", {d.d_inner}},
           {"out_proj.weight", {h, d.d_inner}}})
    e.push_back({hp + "mixer." + name, mp + "mixer." + name, shape});
}

void moe_entries(const ResolvedModelConfig& m, const std::string& hp, const std::string& mp, std::vector<Entry>& e) {
  const int64_t h = m->hidden_size, f = m.moe_ffn(), s = *m->moe_shared_expert_intermediate_size;
  const std::optional<int64_t> latent = m->moe_latent_size;
  const int64_t in = latent.value_or(h);
  e.push_back({hp + "mixer.gate.weight", mp + "mlp.router.weight", {*m->num_experts, h}});
  for (int64_t x = 0; x < *m->num_experts; ++x) {
    const std::string ex = hp + "mixer.experts." + std::to_string(x) + ".", id = std::to_string(x);
    e.push_back({ex + "up_proj.weight", mp + "mlp.experts.linear_fc1.weight" + id, {f, in}});
    e.push_back({ex + "down_proj.weight", mp + "mlp.experts.linear_fc2.weight" + id, {in, f}});
  }
  e.push_back({hp + "mixer.shared_experts.up_proj.weight", mp + "mlp.shared_experts.linear_fc1.weight", {s, h}});
  e.push_back({hp + "mixer.shared_experts.down_proj.weight", mp + "mlp.shared_experts.linear_fc2.weight", {h, s}});
  if (latent) {
    e.push_back({hp + "mixer.fc1_latent_proj.weight", mp + "mlp.fc1_latent_proj.weight", {*latent, h}});
    e.push_back({hp + "mixer.fc2_latent_proj.weight", mp + "mlp.fc2_latent_proj.weight", {h, *latent}});
  }
}

// Every one-to-one tensor of the decoder layers and the final norm (not the embedding, head, the
// attention's q/k/v and the MoE expert bias, which the callers map).
std::vector<Entry> entries(const ResolvedModelConfig& m) {
  std::vector<Entry> e;
  const std::string& layers = m.hybrid_pattern().layers;
  const int64_t h = m->hidden_size;
  for (int64_t i = 0; i < static_cast<int64_t>(layers.size()); ++i) {
    const char c = layers[static_cast<size_t>(i)];
    const std::string hp = hf_layer(i), mp = mg_layer(i);
    e.push_back({hp + "norm.weight", mp + norm_name(c), {h}});
    if (c == hybrid::kMamba) {
      mamba_entries(m, hp, mp, e);
    } else if (c == hybrid::kAttention) {
      e.push_back({hp + "mixer.o_proj.weight", mp + "self_attention.linear_proj.weight",
                   {h, m->num_attention_heads * m.head_dim()}});
    } else if (c == hybrid::kMlp) {
      e.push_back({hp + "mixer.up_proj.weight", mp + "mlp.linear_fc1.weight", {m.ffn(), h}});
      e.push_back({hp + "mixer.down_proj.weight", mp + "mlp.linear_fc2.weight", {h, m.ffn()}});
    } else {
      moe_entries(m, hp, mp, e);
    }
  }
  e.push_back({kBase + "norm_f.weight", "decoder.final_norm.weight", {h}});
  return e;
}

// Every HF tensor with its shape (vocab: the embedding rows).
std::map<std::string, Shape> hf_shapes(const ResolvedModelConfig& m, int64_t vocab) {
  std::map<std::string, Shape> s;
  for (const Entry& e : entries(m)) s[e.hf] = e.shape;
  const std::string& layers = m.hybrid_pattern().layers;
  const int64_t h = m->hidden_size, hn = m.head_dim();
  for (int64_t i = 0; i < static_cast<int64_t>(layers.size()); ++i) {
    const std::string hp = hf_layer(i);
    if (layers[static_cast<size_t>(i)] == hybrid::kAttention) {
      s[hp + "mixer.q_proj.weight"] = {m->num_attention_heads * hn, h};
      s[hp + "mixer.k_proj.weight"] = s[hp + "mixer.v_proj.weight"] = {m.query_groups() * hn, h};
    } else if (layers[static_cast<size_t>(i)] == hybrid::kMoe) {
      s[hp + "mixer.gate.e_score_correction_bias"] = {*m->num_experts};
    }
  }
  s[kBase + "embeddings.weight"] = {vocab, h};
  if (m->untie_embeddings_and_output_weights) s["lm_head.weight"] = {vocab, h};
  return s;
}

bool starts_with(const std::string& s, const std::string& p) { return s.rfind(p, 0) == 0; }
bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// Adds `t` under `name`, refusing a second tensor of the same name.
void put(std::map<std::string, Tensor>& hf, const std::string& name, const Tensor& t, const std::string& raw,
         const std::string& file) {
  STRATA_CHECK(!hf.count(name), file, ": tensor '", raw, "' appears twice (as '", name, "')");
  hf[name] = t;
}

// The file's names in the Hub's spelling ("backbone.", one tensor per expert); returns how many
// MTP tensors were left out.
int64_t hub_names(const std::map<std::string, Tensor>& in, const std::string& file, std::map<std::string, Tensor>& hf) {
  int64_t mtp = 0;
  for (const auto& [raw, t] : in) {
    if (starts_with(raw, "mtp.")) {
      ++mtp;
      continue;
    }
    std::string name = raw;
    if (starts_with(name, "model.")) name = kBase + name.substr(6);
    else if (!starts_with(name, kBase) && name != "lm_head.weight") name = kBase + name;
    // transformers 5's fused experts: up_proj [E, F, in], down_proj [E, in, F].
    for (const char* proj : {"up_proj", "down_proj"}) {
      const std::string fused = std::string(".mixer.experts.") + proj;
      if (!ends_with(name, fused) || t.dim() != 3) continue;
      const std::string stem = name.substr(0, name.size() - std::string(proj).size());
      for (int64_t x = 0; x < t.size(0); ++x)
        put(hf, stem + std::to_string(x) + "." + proj + ".weight", t.narrow(0, x, 1).contiguous().reshape({t.size(1), t.size(2)}),
            raw, file);
      name.clear();
    }
    if (!name.empty()) put(hf, name, t, raw, file);
  }
  return mtp;
}

}  // namespace

std::map<std::string, Tensor> nemotron_h_to_hf(const ResolvedModelConfig& m, const std::map<std::string, Tensor>& mg) {
  const ExportTensors src{mg, *m->vocab_size};
  const auto get = [&](const std::string& name) -> const Tensor& { return src.get(name); };
  const int64_t vocab = *m->vocab_size;
  const auto real_rows = [&](const Tensor& t) { return src.real_rows(t); };
  std::map<std::string, Tensor> out;
  out[kBase + "embeddings.weight"] = real_rows(get("embedding.word_embeddings.weight"));
  if (m->untie_embeddings_and_output_weights) out["lm_head.weight"] = real_rows(get("output_layer.weight"));
  for (const Entry& e : entries(m)) out[e.hf] = get(e.mg);
  const std::string& layers = m.hybrid_pattern().layers;
  for (int64_t i = 0; i < static_cast<int64_t>(layers.size()); ++i) {
    const std::string hp = hf_layer(i), mp = mg_layer(i);
    if (layers[static_cast<size_t>(i)] == hybrid::kAttention) {
      const Qkv qkv = split_qkv(get(mp + "self_attention.linear_qkv.weight"), m->num_attention_heads, m.query_groups(),
                                m.head_dim());
      out[hp + "mixer.q_proj.weight"] = qkv.q;
      out[hp + "mixer.k_proj.weight"] = qkv.k;
      out[hp + "mixer.v_proj.weight"] = qkv.v;
    } else if (layers[static_cast<size_t>(i)] == hybrid::kMoe) {
      out[hp + "mixer.gate.e_score_correction_bias"] = m->moe_router_enable_expert_bias
                                                            ? get(mp + "mlp.router.expert_bias")
                                                            : Tensor::zeros({*m->num_experts}, DType::F32);
    }
  }
  for (const auto& [name, shape] : hf_shapes(m, vocab)) {
    STRATA_CHECK(out.count(name) && out.at(name).shape() == shape, "export --format hf: tensor '", name,
                 "' has shape ", out.count(name) ? out.at(name).shape().str() : "(none)", ", the config implies ",
                 shape.str());
  }
  return out;
}

std::map<std::string, Tensor> nemotron_h_from_hf(const ResolvedModelConfig& m, int64_t file_vocab, int64_t padded_vocab,
                                                 const std::map<std::string, Tensor>& in, const std::string& file,
                                                 std::vector<std::string>* notes) {
  std::map<std::string, Tensor> hf;
  const int64_t mtp = hub_names(in, file, hf);
  if (mtp > 0 && notes)
    notes->push_back("the " + std::to_string(mtp) + " multi-token-prediction tensors (mtp.*) are left out: "
                     "transformers' NemotronHForCausalLM does not load them, and Strata imports the decoder only");
  const std::string embed = kBase + "embeddings.weight";
  const bool tied = !m->untie_embeddings_and_output_weights;
  if (tied && hf.count("lm_head.weight")) {
    STRATA_CHECK(hf.count(embed) && same_bytes(hf.at("lm_head.weight"), hf.at(embed)), file,
                 ": tensor 'lm_head.weight' differs from '", embed,
                 "' but tie_word_embeddings is true (set it to false in config.json for an untied model)");
    hf.erase("lm_head.weight");
  }
  const std::map<std::string, Shape> want = hf_shapes(m, file_vocab);
  for (const auto& [name, shape] : want) {
    auto it = hf.find(name);
    STRATA_CHECK(it != hf.end(), file, ": tensor '", name, "' is missing");
    STRATA_CHECK(it->second.shape() == shape, file, ": tensor '", name, "' has shape ", it->second.shape().str(),
                 ", config.json implies ", shape.str());
  }
  for (const auto& [name, t] : hf)
    STRATA_CHECK(want.count(name), file, ": unexpected tensor '", name, "' (shape ", t.shape().str(),
                 ") for a NemotronHForCausalLM with this config.json");
  std::map<std::string, Tensor> out;
  out["embedding.word_embeddings.weight"] = pad_rows(hf.at(embed), padded_vocab);
  if (!tied) out["output_layer.weight"] = pad_rows(hf.at("lm_head.weight"), padded_vocab);
  for (const Entry& e : entries(m)) out[e.mg] = hf.at(e.hf);
  const std::string& layers = m.hybrid_pattern().layers;
  for (int64_t i = 0; i < static_cast<int64_t>(layers.size()); ++i) {
    const std::string hp = hf_layer(i), mp = mg_layer(i);
    if (layers[static_cast<size_t>(i)] == hybrid::kAttention) {
      out[mp + "self_attention.linear_qkv.weight"] =
          merge_qkv(hf.at(hp + "mixer.q_proj.weight"), hf.at(hp + "mixer.k_proj.weight"),
                    hf.at(hp + "mixer.v_proj.weight"), m->num_attention_heads, m.query_groups(), m.head_dim());
    } else if (layers[static_cast<size_t>(i)] == hybrid::kMoe) {
      const std::string bias = hp + "mixer.gate.e_score_correction_bias";
      if (m->moe_router_enable_expert_bias) {
        out[mp + "mlp.router.expert_bias"] = hf.at(bias);
      } else {
        for (double v : hf.at(bias).to_vector())
          STRATA_CHECK(v == 0.0, file, ": tensor '", bias, "' is not zero but model.moe_router_enable_expert_bias "
                       "is false");
      }
    }
  }
  return out;
}

}  // namespace strata::hf::detail
