// The dense and MoE MLP tensor maps of the Llama-like Hugging Face families (see hf_moe_map.h).
// Reference: transformers modeling_mixtral.py, modeling_qwen3_moe.py, modeling_llama.py (LlamaMLP).
#include "training/hf/hf_moe_map.h"

namespace strata::hf::detail {

namespace {

// The HF prefix of an MoE block and the names of an expert's gate / up / down projections.
struct MoeNames {
  std::string block, gate, up, down;
};
MoeNames moe_names(Family f) {
  if (f == Family::Mixtral) return {"block_sparse_moe.", "w1", "w3", "w2"};
  return {"mlp.", "gate_proj", "up_proj", "down_proj"};
}

std::string expert(const std::string& hp, const MoeNames& n, int64_t e, const std::string& proj) {
  return hp + n.block + "experts." + std::to_string(e) + "." + proj + ".weight";
}

// [gate | up] rows of a SwiGLU linear_fc1 [2F, H].
Tensor half(const Tensor& fc1, int64_t which, int64_t ffn) {
  return fc1.narrow(0, which * ffn, ffn).contiguous().clone();
}

}  // namespace

void mlp_hf_shapes(Family f, const std::string& hp, const MlpDims& d, std::map<std::string, Shape>& s) {
  if (d.experts == 0) {
    s[hp + "mlp.gate_proj.weight"] = {d.ffn, d.h};
    s[hp + "mlp.up_proj.weight"] = {d.ffn, d.h};
    s[hp + "mlp.down_proj.weight"] = {d.h, d.ffn};
    return;
  }
  const MoeNames n = moe_names(f);
  s[hp + n.block + "gate.weight"] = {d.experts, d.h};
  for (int64_t e = 0; e < d.experts; ++e) {
    s[expert(hp, n, e, n.gate)] = {d.ffn, d.h};
    s[expert(hp, n, e, n.up)] = {d.ffn, d.h};
    s[expert(hp, n, e, n.down)] = {d.h, d.ffn};
  }
}

void mlp_to_hf(Family f, const std::string& mp, const std::string& hp, const MlpDims& d,
               const std::function<const Tensor&(const std::string&)>& get, std::map<std::string, Tensor>& out) {
  if (d.experts == 0) {
    const Tensor& fc1 = get(mp + "mlp.linear_fc1.weight");
    out[hp + "mlp.gate_proj.weight"] = half(fc1, 0, d.ffn);
    out[hp + "mlp.up_proj.weight"] = half(fc1, 1, d.ffn);
    out[hp + "mlp.down_proj.weight"] = get(mp + "mlp.linear_fc2.weight");
    return;
  }
  const MoeNames n = moe_names(f);
  out[hp + n.block + "gate.weight"] = get(mp + "mlp.router.weight");
  for (int64_t e = 0; e < d.experts; ++e) {
    const std::string id = std::to_string(e);
    const Tensor& fc1 = get(mp + "mlp.experts.linear_fc1.weight" + id);
    out[expert(hp, n, e, n.gate)] = half(fc1, 0, d.ffn);
    out[expert(hp, n, e, n.up)] = half(fc1, 1, d.ffn);
    out[expert(hp, n, e, n.down)] = get(mp + "mlp.experts.linear_fc2.weight" + id);
  }
}

void mlp_from_hf(Family f, const std::string& mp, const std::string& hp, const MlpDims& d,
                 const std::map<std::string, Tensor>& hf, std::map<std::string, Tensor>& out) {
  if (d.experts == 0) {
    out[mp + "mlp.linear_fc1.weight"] = cat_rows({hf.at(hp + "mlp.gate_proj.weight"), hf.at(hp + "mlp.up_proj.weight")});
    out[mp + "mlp.linear_fc2.weight"] = hf.at(hp + "mlp.down_proj.weight");
    return;
  }
  const MoeNames n = moe_names(f);
  out[mp + "mlp.router.weight"] = hf.at(hp + n.block + "gate.weight");
  for (int64_t e = 0; e < d.experts; ++e) {
    const std::string id = std::to_string(e);
    out[mp + "mlp.experts.linear_fc1.weight" + id] =
        cat_rows({hf.at(expert(hp, n, e, n.gate)), hf.at(expert(hp, n, e, n.up))});
    out[mp + "mlp.experts.linear_fc2.weight" + id] = hf.at(expert(hp, n, e, n.down));
  }
}

}  // namespace strata::hf::detail
