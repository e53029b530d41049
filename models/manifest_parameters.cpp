// Each layer kind's parameters for the model manifest (see manifest_parameters.h). Tensor-parallel
// splits as the layers apply them: column-parallel linears (weight and bias) and the vocabulary
// rows split dimension 0, row-parallel weights dimension 1 (their bias replicated), norms and
// routers replicated; the Mamba mixer splits every tensor but its fused pre-norm; experts split
// over the expert tp group. mHC and Mamba's A_log and D stay f32.
#include "models/manifest_parameters.h"

#include <algorithm>

#include "core/error.h"

#include "models/hybrid/hybrid_pattern.h"
#include "models/layers/embedding.h"
#include "models/mamba_config.h"

namespace strata::manifest_detail {

namespace {

// Adds parameters of one owner (a layer, or -1 for the model-level parts).
class ParameterAdder {
 public:
  ParameterAdder(ModelManifest& out, const ResolvedModelConfig& m, int64_t layer) : out_(out), m_(m), layer_(layer) {}

  void add(const std::string& name, const Shape& shape, bool tp = false, bool f32 = false, int64_t expert = -1) {
    ManifestParameter p;
    p.name = name, p.shape = shape, p.tensor_parallel = tp, p.f32 = f32, p.expert = expert, p.layer = layer_;
    out_.parameters.push_back(std::move(p));
  }
  // A norm over n features: weight, and bias for LayerNorm (models/layers/norm.h).
  void norm(const std::string& weight, const std::string& bias, int64_t n) {
    add(weight, Shape{n});
    if (m_.normalization == Normalization::LayerNorm) add(bias, Shape{n});
  }
  void norm(const std::string& prefix, int64_t n) { norm(prefix + ".weight", prefix + ".bias", n); }
  // models/layers/linear.h: weight [out, in]; column-parallel splits the bias too.
  void linear(const std::string& prefix, int64_t in, int64_t out, bool bias, bool column) {
    add(prefix + ".weight", Shape{out, in}, true);
    if (bias) add(prefix + ".bias", Shape{out}, column);
  }
  const ResolvedModelConfig& m() const { return m_; }

 private:
  ModelManifest& out_;
  const ResolvedModelConfig& m_;
  int64_t layer_;
};

// input norm fused into linear_qkv, self_attention (models/layers/self_attention.h).
void attention(ParameterAdder& a, const std::string& layer) {
  const ResolvedModelConfig& m = a.m();
  const std::string p = layer + ".self_attention";
  a.norm(p + ".linear_qkv.layer_norm_weight", p + ".linear_qkv.layer_norm_bias", m.hidden_size);
  a.linear(p + ".linear_qkv", m.hidden_size, m.head_dim() * (m.num_attention_heads + 2 * m.query_groups()),
           m.add_bias_linear || m.add_qkv_bias, true);
  a.linear(p + ".linear_proj", m.head_dim() * m.num_attention_heads, m.hidden_size, m.add_bias_linear, false);
  if (m.qk_layernorm) {
    a.norm(p + ".q_layernorm", m.head_dim());
    a.norm(p + ".k_layernorm", m.head_dim());
  }
}

// linear_fc1 (gate and up with SwiGLU) and linear_fc2 of an MLP of width ffn (models/layers/mlp.h).
void mlp(ParameterAdder& a, const std::string& p, int64_t ffn) {
  const ResolvedModelConfig& m = a.m();
  a.linear(p + ".linear_fc1", m.hidden_size, m.swiglu ? 2 * ffn : ffn, m.add_bias_linear, true);
  a.linear(p + ".linear_fc2", ffn, m.hidden_size, m.add_bias_linear, false);
}

// Router, experts by global id, shared experts (models/layers/moe/moe_layer.h).
void moe(ParameterAdder& a, const std::string& p) {
  const ResolvedModelConfig& m = a.m();
  const int64_t E = *m.num_experts, C = m.hidden_size, F = m.moe_ffn();
  a.add(p + ".router.weight", Shape{E, C});  // (router.expert_bias is a buffer, not a parameter)
  for (int64_t e = 0; e < E; ++e)  // TEGroupedMLP names: the global expert id after "weight"
    a.add(p + ".experts.linear_fc1.weight" + std::to_string(e), Shape{m.swiglu ? 2 * F : F, C}, true, false, e);
  for (int64_t e = 0; e < E; ++e)
    a.add(p + ".experts.linear_fc2.weight" + std::to_string(e), Shape{C, F}, true, false, e);
  if (m.moe_shared_expert_intermediate_size) {
    mlp(a, p + ".shared_experts", *m.moe_shared_expert_intermediate_size);
    if (m.moe_shared_expert_gate) a.add(p + ".shared_experts.gate_weight", Shape{1, C});
  }
}

// The MLP slot with its pre-norm: fused into linear_fc1, or its own module (hybrid `E`).
void mlp_slot(ParameterAdder& a, const std::string& layer, bool is_moe, bool separate_norm) {
  const ResolvedModelConfig& m = a.m();
  const std::string norm = layer + (separate_norm ? ".pre_mlp_layernorm." : ".mlp.linear_fc1.layer_norm_");
  a.norm(norm + "weight", norm + "bias", m.hidden_size);
  if (is_moe)
    moe(a, layer + ".mlp");
  else
    mlp(a, layer + ".mlp", m.ffn());
}

// A Mamba2 mixer with its fused pre-norm (models/layers/mamba_mixer.h).
void mamba(ParameterAdder& a, const std::string& layer) {
  const ResolvedModelConfig& m = a.m();
  const MambaDims d = mamba_dims(m);
  const std::string p = layer + ".mixer";
  a.norm(p + ".in_proj.layer_norm_weight", p + ".in_proj.layer_norm_bias", m.hidden_size);
  a.add(p + ".in_proj.weight", Shape{d.in_proj_out(), m.hidden_size}, true);
  a.add(p + ".conv1d.weight", Shape{d.conv_dim(), 1, d.conv_kernel}, true);
  a.add(p + ".conv1d.bias", Shape{d.conv_dim()}, true);
  a.add(p + ".dt_bias", Shape{d.heads}, true);
  a.add(p + ".A_log", Shape{d.heads}, true, true);
  a.add(p + ".D", Shape{d.heads}, true, true);
  a.add(p + ".norm.weight", Shape{d.d_inner}, true);
  a.add(p + ".out_proj.weight", Shape{m.hidden_size, d.d_inner}, true);
}

// One hyper-connection site (models/layers/hyper_connection.h), f32 and replicated.
void mhc_site(ParameterAdder& a, const std::string& p) {
  const int64_t n = a.m().num_residual_streams, rows = n * n + 2 * n;
  a.add(p + ".mapping_proj.weight", Shape{rows, n * a.m().hidden_size}, false, true);
  for (const char* alpha : {".alpha_pre", ".alpha_post", ".alpha_res"}) a.add(p + alpha, Shape{1}, false, true);
  a.add(p + ".bias", Shape{rows}, false, true);
}

// The learned output contraction of a stack's exit (none with mhc_learned_output_contract false).
void mhc_head(ParameterAdder& a, const std::string& owner) {
  const ResolvedModelConfig& m = a.m();
  if (!m.enable_hyper_connections || !m.mhc_learned_output_contract) return;
  const int64_t n = m.num_residual_streams;
  a.add(owner + ".hc_head_fn", Shape{n, n * m.hidden_size}, false, true);
  a.add(owner + ".hc_head_base", Shape{n}, false, true);
  a.add(owner + ".hc_head_scale", Shape{1}, false, true);
}

void hybrid_layer(ParameterAdder& a, const std::string& layer, char symbol) {
  const bool mhc = a.m().enable_hyper_connections;
  if (mhc) mhc_site(a, layer + ".hyper_connection");
  const std::string inner = mhc ? layer + ".inner_layer" : layer;
  switch (symbol) {
    case hybrid::kMamba: mamba(a, inner); break;
    case hybrid::kAttention: attention(a, inner); break;
    case hybrid::kMlp: mlp_slot(a, inner, false, false); break;
    case hybrid::kMoe: mlp_slot(a, inner, true, true); break;
    default: STRATA_INTERNAL_ASSERT(false, "manifest: hybrid symbol ", symbol);
  }
}

}  // namespace

void add_layer_parameters(ModelManifest& out, const ResolvedModelConfig& m, int64_t layer, bool moe) {
  const ManifestLayer& l = out.layers[static_cast<size_t>(layer)];
  ParameterAdder a(out, m, layer);
  if (m.is_hybrid()) return hybrid_layer(a, l.name, l.symbol);
  attention(a, l.name);
  mlp_slot(a, l.name, moe, false);
  if (m.enable_hyper_connections) {
    mhc_site(a, l.name + ".self_attention_hyper_connection");
    mhc_site(a, l.name + ".mlp_hyper_connection");
  }
}

void add_model_parameters(ModelManifest& out, const ResolvedModelConfig& m, int64_t tp) {
  ParameterAdder a(out, m, -1);
  const int64_t C = m.hidden_size, vocab = m.padded_vocab(tp);
  a.add(layers::VocabEmbedding::kWordEmbeddingsName, Shape{vocab, C}, true);
  if (m.position_embedding_type == PositionEmbeddingType::LearnedAbsolute)
    a.add("embedding.position_embeddings.weight", Shape{m.max_positions(), C});
  mhc_head(a, "decoder");
  a.norm(m.is_hybrid() ? "decoder.final_norm" : "decoder.final_layernorm", C);
  if (m.untie_embeddings_and_output_weights) a.add("output_layer.weight", Shape{vocab, C}, true);
  const int64_t modules = m.mtp_use_repeated_layer ? std::min<int64_t>(m.mtp_depths(), 1) : m.mtp_depths();
  for (int64_t k = 0; k < modules; ++k) {  // models/blocks/mtp_block.h
    const std::string p = "mtp.layers." + std::to_string(k);
    a.norm(p + ".enorm", C);
    a.norm(p + ".hnorm", C);
    if (m.enable_hyper_connections) {
      a.add(p + ".e_proj.weight", Shape{C, C}, true);
      a.add(p + ".h_proj.weight", Shape{C, C}, true);
      mhc_head(a, p);
    } else {
      a.add(p + ".eh_proj.weight", Shape{C, 2 * C}, true);
    }
    a.norm(p + ".final_layernorm", C);
  }
}

}  // namespace strata::manifest_detail
