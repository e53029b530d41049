// config.json keys of the Mixtral and Qwen3-MoE families (training/hf/hf_moe_format.h).
// Reference: transformers models/mixtral/configuration_mixtral.py (num_local_experts, and
// attribute_map num_experts → num_local_experts, as in configuration_qwen3_moe.py since transformers 5;
// num_experts_per_tok, router_aux_loss_coef, output_router_logits, router_jitter_noise),
// models/qwen3_moe/configuration_qwen3_moe.py and modeling_qwen3_moe.py (Qwen3MoeDecoderLayer: the
// layer rule), modeling_mixtral.py (load_balancing_loss_func, added only with output_router_logits).
#include "training/hf/hf_moe_format.h"

#include <set>
#include <sstream>

#include "core/error.h"
#include "training/hf/hf_json_read.h"

namespace strata::hf::detail {

using ojson = nlohmann::ordered_json;
using json = nlohmann::json;

namespace {

// The coefficient of the micro-batch switch loss (aux_loss), HF's router_aux_loss_coef; 0 when off.
double aux_loss_coef(const ResolvedModelConfig& m) {
  for (const MoeLoadBalancingLoss& l : m->moe_load_balancing_losses())
    if (l.type == "aux_loss") return l.coeff;
  return 0.0;
}

template <typename E, size_t N>
E enum_named(const config::EnumName<E> (&names)[N], const std::string& v, const std::string& where, const char* key) {
  std::string all;
  for (const auto& n : names) {
    if (v == n.name) return n.value;
    all += (all.empty() ? "" : ", ") + std::string(n.name);
  }
  STRATA_THROW(where, ": '", key, "' is '", v, "', not one of ", all);
}

ojson opt_number(const std::optional<double>& v) { return v ? ojson(*v) : ojson(nullptr); }

// Qwen3MoeDecoderLayer's rule as a moe_layer_freq value ({"1"} when every layer is MoE).
std::vector<std::string> qwen3_moe_layers(const json& j, const std::string& file, int64_t layers) {
  const int64_t step = opt_int(j, "decoder_sparse_step", file).value_or(1);
  STRATA_CHECK(step >= 1, file, ": decoder_sparse_step must be >= 1, got ", step);
  std::set<int64_t> dense;
  if (j.contains("mlp_only_layers") && !j.at("mlp_only_layers").is_null()) {
    const json& v = j.at("mlp_only_layers");
    STRATA_CHECK(v.is_array(), file, ": config key 'mlp_only_layers' must be a list of layer ids, got ", v.dump());
    for (const json& x : v) {
      STRATA_CHECK(x.is_number_integer() && x.get<int64_t>() >= 0 && x.get<int64_t>() < layers, file,
                   ": mlp_only_layers entry ", x.dump(), " is not a layer id in [0, ", layers, ")");
      dense.insert(x.get<int64_t>());
    }
  }
  std::vector<std::string> map;
  bool all = true, any = false;
  for (int64_t i = 0; i < layers; ++i) {
    const bool moe = !dense.count(i) && (i + 1) % step == 0;
    map.push_back(moe ? "1" : "0");
    all = all && moe;
    any = any || moe;
  }
  STRATA_CHECK(any, file, ": decoder_sparse_step ", step, " and mlp_only_layers leave no MoE layer "
               "(a dense model: import it as Qwen3ForCausalLM)");
  if (all || layers == 1) return {"1"};
  return map;
}

}  // namespace

void moe_config_json(const ResolvedModelConfig& m, Family f, ojson& j) {
  if (f == Family::Mixtral) {
    j["num_local_experts"] = *m->num_experts;
    j["num_experts_per_tok"] = m->moe_router_topk;
    j["router_jitter_noise"] = 0.0;
  } else {
    j["num_local_experts"] = *m->num_experts;  // transformers 5 (Qwen3MoeConfig.attribute_map)
    j["num_experts_per_tok"] = m->moe_router_topk;
    j["moe_intermediate_size"] = m.moe_ffn();
    j["norm_topk_prob"] = !m->moe_router_pre_softmax;
    j["decoder_sparse_step"] = 1;
    ojson dense = ojson::array();
    for (int64_t i = 0; i < m->num_layers; ++i)
      if (!m.is_moe_layer(i)) dense.push_back(i);
    j["mlp_only_layers"] = dense;
  }
  j["router_aux_loss_coef"] = aux_loss_coef(m);
  j["output_router_logits"] = false;
}

ojson moe_strata_json(const ResolvedModelConfig& m) {
  ojson s;
  s["moe_router_load_balancing_type"] = m->moe_router_load_balancing_type;
  s["moe_aux_loss_coeff"] = m->moe_aux_loss_coeff;
  s["moe_z_loss_coeff"] = opt_number(m->moe_z_loss_coeff);
  s["moe_input_jitter_eps"] = opt_number(m->moe_input_jitter_eps);
  s["moe_expert_capacity_factor"] = opt_number(m->moe_expert_capacity_factor);
  s["moe_token_drop_policy"] = to_string(m->moe_token_drop_policy);
  s["moe_pad_expert_input_to_capacity"] = m->moe_pad_expert_input_to_capacity;
  s["moe_router_dtype"] = m->moe_router_dtype ? ojson(to_string(*m->moe_router_dtype)) : ojson(nullptr);
  s["moe_token_dispatcher_type"] = to_string(m->moe_token_dispatcher_type);
  s["moe_grouped_gemm"] = m->moe_grouped_gemm;
  return s;
}

void moe_config_from_json(const json& j, Family f, const std::string& file, ModelConfig& m) {
  const bool mixtral = f == Family::Mixtral;
  // Both families map num_experts to num_local_experts (attribute_map); transformers 5 saves
  // Qwen3-MoE's as num_local_experts, the Hub's older Qwen3-MoE configs say num_experts.
  const std::optional<int64_t> local = opt_int(j, "num_local_experts", file), plain = opt_int(j, "num_experts", file);
  STRATA_CHECK(!local || !plain || *local == *plain, file, ": num_local_experts ", local.value_or(0),
               " and num_experts ", plain.value_or(0), " disagree");
  const char* experts_key = local || (mixtral && !plain) ? "num_local_experts" : "num_experts";
  const int64_t experts = get_int(j, experts_key, file);
  STRATA_CHECK(experts >= 1, file, ": ", experts_key, " must be >= 1, got ", experts);
  const int64_t k = opt_int(j, "num_experts_per_tok", file).value_or(mixtral ? 2 : 8);
  STRATA_CHECK(k >= 1 && k <= experts, file, ": num_experts_per_tok ", k, " is not in [1, ", experts_key, " ",
               experts, "]");
  const bool normalised = mixtral || opt_bool(j, "norm_topk_prob", false, file);
  STRATA_CHECK(!(normalised && k == 1), file, ": num_experts_per_tok 1 with ",
               mixtral ? "Mixtral's renormalised" : "norm_topk_prob=true and its",
               " top-k weights (every weight 1) has no Megatron equivalent (Megatron refuses post-softmax top-1 "
               "routing)");
  if (!mixtral) {
    const std::optional<int64_t> shared = opt_int(j, "shared_expert_intermediate_size", file);
    STRATA_CHECK(!shared || *shared == 0, file, ": shared_expert_intermediate_size ", shared.value_or(0),
                 " (shared experts) is not part of Qwen3MoeForCausalLM");
  }
  m.num_experts = experts;
  m.moe_router_topk = k;
  m.moe_router_score_function = MoeScoreFunction::Softmax;
  m.moe_router_pre_softmax = !normalised;
  m.moe_ffn_hidden_size = mixtral ? *m.ffn_hidden_size : get_int(j, "moe_intermediate_size", file);
  m.moe_layer_freq = mixtral ? std::vector<std::string>{"1"} : qwen3_moe_layers(j, file, m.num_layers);
  // transformers adds the aux loss only with output_router_logits (its training default is off).
  const double coef = opt_double(j, "router_aux_loss_coef", 0.001, file);
  m.moe_router_load_balancing_type = {"aux_loss"};
  m.moe_aux_loss_coeff = {opt_bool(j, "output_router_logits", false, file) ? coef : 0.0};
}

void moe_strata_from_json(const json& s, const std::string& where, ModelConfig& m) {
  STRATA_CHECK(s.is_object(), where, " is not an object");
  try {
    if (s.contains("moe_router_load_balancing_type"))
      m.moe_router_load_balancing_type = s.at("moe_router_load_balancing_type").get<std::vector<std::string>>();
    if (s.contains("moe_aux_loss_coeff")) m.moe_aux_loss_coeff = s.at("moe_aux_loss_coeff").get<std::vector<double>>();
    auto opt = [&](const char* key, std::optional<double>& out) {
      if (s.contains(key)) out = s.at(key).is_null() ? std::nullopt : std::optional<double>(s.at(key).get<double>());
    };
    opt("moe_z_loss_coeff", m.moe_z_loss_coeff);
    opt("moe_input_jitter_eps", m.moe_input_jitter_eps);
    opt("moe_expert_capacity_factor", m.moe_expert_capacity_factor);
    if (s.contains("moe_token_drop_policy"))
      m.moe_token_drop_policy = enum_named(kMoeTokenDropPolicyNames, s.at("moe_token_drop_policy").get<std::string>(),
                                           where, "moe_token_drop_policy");
    if (s.contains("moe_pad_expert_input_to_capacity"))
      m.moe_pad_expert_input_to_capacity = s.at("moe_pad_expert_input_to_capacity").get<bool>();
    if (s.contains("moe_router_dtype"))
      m.moe_router_dtype = s.at("moe_router_dtype").is_null()
                               ? std::nullopt
                               : std::optional<MoeRouterDtype>(enum_named(
                                     kMoeRouterDtypeNames, s.at("moe_router_dtype").get<std::string>(), where,
                                     "moe_router_dtype"));
    if (s.contains("moe_token_dispatcher_type"))
      m.moe_token_dispatcher_type = enum_named(kMoeTokenDispatcherTypeNames,
                                               s.at("moe_token_dispatcher_type").get<std::string>(), where,
                                               "moe_token_dispatcher_type");
    if (s.contains("moe_grouped_gemm")) m.moe_grouped_gemm = s.at("moe_grouped_gemm").get<bool>();
  } catch (const json::exception& e) {
    STRATA_THROW(where, ": ", e.what());
  }
}

std::vector<std::string> moe_export_notes(const ResolvedModelConfig& m) {
  std::vector<std::string> notes;
  if (m->moe_expert_capacity_factor) {
    std::ostringstream n;
    n << "model.moe_expert_capacity_factor=" << *m->moe_expert_capacity_factor
      << " is training-only and not exported: transformers routes every token to its top-k experts without "
         "dropping, as strata generate does (kept under \"strata\" for import)";
    notes.push_back(n.str());
  }
  if (m->moe_input_jitter_eps)
    notes.push_back("model.moe_input_jitter_eps is training-only and not exported (router_jitter_noise 0)");
  if (m->moe_router_dtype)
    notes.push_back(std::string("model.moe_router_dtype=") + to_string(*m->moe_router_dtype) +
                    " is not exported: transformers computes the gate in the model dtype and its softmax in f32");
  for (const MoeLoadBalancingLoss& l : m->moe_load_balancing_losses())
    if (l.type != "aux_loss")
      notes.push_back("model.moe_router_load_balancing_type " + l.type +
                      " is training-only with no transformers equivalent (kept under \"strata\" for import)");
  if (m->moe_z_loss_coeff)
    notes.push_back("model.moe_z_loss_coeff is training-only with no transformers equivalent (kept under \"strata\")");
  return notes;
}

}  // namespace strata::hf::detail
