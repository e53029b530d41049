// The run state of Strata's Megatron writers (see megatron_save_state.h).
#include "training/checkpointing/megatron/megatron_save_state.h"

#include <yaml-cpp/yaml.h>

#include "core/config_table.h"
#include "core/megatron_flags.h"
#include "core/formats/pickle_object_writer.h"
#include "models/config/hybrid_pattern.h"
#include "training/checkpointing/checkpoint_scheduler.h"
#include "training/optimizer/lr_schedule.h"

namespace strata {

using formats::PyRef;
using formats::PyValue;

namespace {

// A YAML scalar or sequence of the config as the Python value argparse would hold.
PyRef py_from_yaml(const YAML::Node& n) {
  if (!n || n.IsNull()) return PyValue::none();
  if (n.IsSequence()) {
    std::vector<PyRef> items;
    for (const auto& x : n) items.push_back(py_from_yaml(x));
    return PyValue::list(std::move(items));
  }
  if (!n.IsScalar()) return PyValue::none();
  const std::string s = n.Scalar();
  if (n.Tag() != "!" ) {  // plain scalars: bool, int, float, else str
    if (s == "true" || s == "false") return PyValue::of_bool(s == "true");
    try {
      size_t used = 0;
      const long long i = std::stoll(s, &used);
      if (used == s.size()) return PyValue::of_int(i);
    } catch (const std::exception&) {
    }
    try {
      size_t used = 0;
      const double d = std::stod(s, &used);
      if (used == s.size()) return PyValue::of_float(d);
    } catch (const std::exception&) {
    }
  }
  return PyValue::of_str(s);
}

// "--num-layers" → "num_layers".
std::string dest_of(const std::string& flag) {
  std::string d = flag.substr(flag.find_first_not_of('-'));
  for (char& c : d)
    if (c == '-') c = '_';
  return d;
}

}  // namespace

// Megatron's args: every config field under its Megatron flag's name (the field's own flag or a
// rename), the data position, and no_save_rng (Strata's counter-based RNG has no Megatron form).
PyRef megatron_args(const ResolvedConfig& cfg, const CheckpointState& st, bool saved_optimizer, int64_t padded_vocab,
                    const std::string& ckpt_format) {
  const YAML::Node root = YAML::Load(cfg.to_yaml());
  const config::MegatronFlags flags(StrataConfig::table().untyped());
  PyRef dict = PyValue::empty_dict();
  for (const config::FlagEntry& e : flags.entries()) {
    if (e.kind != config::FlagEntry::Kind::Field || e.value == "false") continue;
    const std::string dest = dest_of(e.flag);
    if (dict->find(dest)) continue;
    dict->set(dest, py_from_yaml(root[e.section][e.field]));
  }
  dict->set("consumed_train_samples", PyValue::of_int(st.consumed_train_samples));
  dict->set("skipped_train_samples", PyValue::of_int(0));
  dict->set("consumed_valid_samples", PyValue::of_int(0));
  dict->set("iteration", PyValue::of_int(st.iteration));
  dict->set("no_save_rng", PyValue::of_bool(true));
  dict->set("no_save_optim", PyValue::of_bool(!saved_optimizer));
  dict->set("ckpt_format", PyValue::of_str(ckpt_format));
  dict->set("padded_vocab_size", PyValue::of_int(padded_vocab));
  return formats::py_newobj({"argparse", "Namespace"}, {}, dict);
}

// Megatron's OptimizerParamScheduler.state_dict().
PyRef megatron_scheduler_state(const CheckpointState& st) {
  PyRef d = PyValue::empty_dict();
  if (!st.lr_schedule) return d;
  const nlohmann::json j = lr_schedule_json(*st.lr_schedule);
  for (const char* k : {"max_lr", "lr_warmup_steps", "num_steps", "lr_decay_style", "lr_decay_steps", "min_lr",
                        "start_wd", "end_wd", "wd_incr_style", "wd_incr_steps"}) {
    if (std::string(k) == "num_steps") {
      d->set(k, PyValue::of_int(st.lr_scheduler_steps.value_or(0)));
      continue;
    }
    const nlohmann::json& v = j.at(k);
    if (v.is_string()) d->set(k, PyValue::of_str(v.get<std::string>()));
    else if (std::string(k) == "lr_warmup_steps" || v.is_number_integer()) d->set(k, PyValue::of_int(v.get<int64_t>()));
    else d->set(k, PyValue::of_float(v.get<double>()));
  }
  return d;
}

// One param group as Megatron's optimizer state_dict holds it (without 'params').
PyRef megatron_param_group(const ResolvedConfig& cfg, double wd_mult, double lr) {
  PyRef g = PyValue::empty_dict();
  g->set("is_expert_parallel", PyValue::of_bool(false));
  g->set("default_config", PyValue::of_bool(true));
  g->set("wd_mult", PyValue::of_float(wd_mult));
  g->set("lr_mult", PyValue::of_float(1.0));
  g->set("is_decoupled_lr", PyValue::of_bool(false));
  g->set("max_lr", PyValue::of_float(*cfg.optimizer->lr));
  g->set("min_lr", PyValue::of_float(cfg.optimizer->min_lr));
  g->set("lr", PyValue::of_float(lr));
  g->set("betas", PyValue::tuple({PyValue::of_float(cfg.optimizer->adam_beta1), PyValue::of_float(cfg.optimizer->adam_beta2)}));
  g->set("eps", PyValue::of_float(cfg.optimizer->adam_eps));
  g->set("weight_decay", PyValue::of_float(cfg.optimizer->weight_decay * wd_mult));
  for (const char* k : {"amsgrad", "maximize", "capturable", "differentiable"}) g->set(k, PyValue::of_bool(false));
  g->set("foreach", PyValue::none());
  g->set("fused", PyValue::none());
  g->set("decoupled_weight_decay", PyValue::of_bool(true));
  return g;
}

double megatron_saved_lr(const ResolvedConfig& cfg, const CheckpointState& st) {
  return LrSchedule(cfg.optimizer, cfg.training).lr(st.lr_scheduler_steps.value_or(0));
}

void validate_megatron_checkpoint_format(const ResolvedConfig& cfg) {
  const CkptFormat f = cfg.checkpoint->ckpt_format;
  // Only a run that saves writes the format (Megatron's launch scripts pass --ckpt-format torch_dist
  // whether they save or not).
  if (f == CkptFormat::Strata || !cfg.checkpoint->save) return;
  const ResolvedModelConfig& m = cfg.model;
  const bool mamba = m->is_hybrid() && (m.hybrid_pattern().layers.find(hybrid::kMamba) != std::string::npos ||
                                        m.hybrid_pattern().mtp.find(hybrid::kMamba) != std::string::npos);
  std::string why;
  if (f == CkptFormat::TorchDist) {
    if (mamba) why = "models with Mamba layers (model.hybrid_layer_pattern has 'M')";
  } else if (cfg.training->precision == Precision::Fp16) {
    why = "fp16's loss scaler (training.precision fp16)";
  } else if (m->moe_router_enable_expert_bias) {
    why = "the router's expert bias (model.moe_router_enable_expert_bias)";
  } else if (m->multi_latent_attention) {
    why = "multi-latent attention's fused norms (model.multi_latent_attention)";
  } else if (m->is_hybrid()) {
    why = "hybrid layers (model.hybrid_layer_pattern)";
  } else if (m->num_experts && cfg.parallel->use_distributed_optimizer) {
    why = "experts with parallel.use_distributed_optimizer (Megatron keeps them in a gradient buffer of their own)";
  }
  if (!why.empty())
    throw config::ConfigError("checkpoint.ckpt_format",
                              std::string(config::enum_to_string<CkptFormat>(kCkptFormatNames, f)) +
                                  " (Megatron's format) is not written for " + why + ": save with " +
                                  (f == CkptFormat::Torch ? "torch_dist or strata" : "strata"));
}

}  // namespace strata
