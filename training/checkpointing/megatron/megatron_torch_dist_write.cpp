// Megatron-Core torch_dist checkpoints written from a Strata iteration directory (see
// megatron_torch_dist_write.h).
#include "training/checkpointing/megatron/megatron_torch_dist_write.h"

#include <yaml-cpp/yaml.h>

#include <filesystem>
#include <map>
#include <set>

#include "core/config_table.h"
#include "core/error.h"
#include "core/formats/dcp_writer.h"
#include "core/formats/mapped_file.h"
#include "core/formats/pickle_object_writer.h"
#include "core/formats/torch_archive_writer.h"
#include "core/megatron_flags.h"
#include "models/config/hybrid_pattern.h"
#include "training/checkpointing/checkpoint.h"
#include "training/checkpointing/checkpoint_scheduler.h"
#include "training/checkpointing/megatron/megatron_tensor_table.h"
#include "training/optimizer/lr_schedule.h"

namespace strata {

namespace fs = std::filesystem;
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

// Megatron's args: every config field under its Megatron flag's name (the field's own flag or a
// rename), the data position, and no_save_rng (Strata's counter-based RNG has no Megatron form).
PyRef megatron_args(const ResolvedConfig& cfg, const CheckpointState& st, bool saved_optimizer, int64_t padded_vocab) {
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
  dict->set("ckpt_format", PyValue::of_str("torch_dist"));
  dict->set("padded_vocab_size", PyValue::of_int(padded_vocab));
  return formats::py_newobj({"argparse", "Namespace"}, {}, dict);
}

// Megatron's OptimizerParamScheduler.state_dict().
PyRef scheduler_state(const CheckpointState& st) {
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
PyRef param_group(const ResolvedConfig& cfg, double wd_mult, double lr) {
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

// A bytes item holding torch.save(value).
formats::DcpWriteItem saved_object(const std::string& fqn, const PyRef& value,
                                   const std::map<std::string, Tensor>& storages = {}) {
  return formats::DcpWriteItem::of_bytes(fqn, formats::torch_save_bytes(*value, storages));
}

// "<key>/shard_<offsets>_<shape>" (ShardedObject.unique_key): "0_2" for layer 0 of 2, "1.3_2.4" for
// layer 1 of 2 and expert 3 of 4, "0_1" when not stacked.
std::string shard_suffix(const MegatronKeyPlace& p, int64_t layers, int64_t experts) {
  std::string off, shape;
  if (p.layer >= 0) off = std::to_string(p.layer), shape = std::to_string(layers);
  if (p.expert >= 0) {
    off += (off.empty() ? "" : ".") + std::to_string(p.expert);
    shape += (shape.empty() ? "" : ".") + std::to_string(experts);
  }
  if (off.empty()) off = "0", shape = "1";
  return "/shard_" + off + "_" + shape;
}

// Megatron's linear modules carry an _extra_state (None without FP8); the output layer has none.
bool has_extra_state(const std::string& key) {
  const std::string w = ".weight";
  if (key.size() < w.size() || key.compare(key.size() - w.size(), w.size(), w) != 0) return false;
  const std::string module = key.substr(0, key.size() - w.size());
  const std::string leaf = module.substr(module.rfind('.') + 1);
  return module != "output_layer" && (leaf.rfind("linear_", 0) == 0 || leaf == "eh_proj");
}

}  // namespace

void validate_megatron_checkpoint_format(const ResolvedConfig& cfg) {
  if (cfg.checkpoint->ckpt_format == CkptFormat::Strata || !cfg.model->is_hybrid()) return;
  const hybrid::HybridPattern& p = cfg.model.hybrid_pattern();
  if (p.layers.find(hybrid::kMamba) != std::string::npos || p.mtp.find(hybrid::kMamba) != std::string::npos)
    throw config::ConfigError("checkpoint.ckpt_format",
                              std::string(config::enum_to_string<CkptFormat>(kCkptFormatNames, cfg.checkpoint->ckpt_format)) +
                                  " is not written for models with Mamba layers (model.hybrid_layer_pattern has "
                                  "'M'): save with strata (Megatron's Mamba checkpoint layout is not reproduced)");
}

void write_megatron_torch_dist(const std::string& strata_iteration_dir, const std::string& out_dir,
                               const ResolvedConfig& cfg, TensorFileIO& io) {
  CheckpointTensorReader in(strata_iteration_dir, io);
  const CheckpointState& st = in.state();
  const int64_t layers = cfg.model->num_layers, experts = cfg.model->num_experts.value_or(0);
  // Megatron key → its chunks (one per layer / expert) and its global shape.
  std::map<std::string, formats::DcpWriteItem> tensors;
  std::map<std::string, formats::DcpWriteItem> bytes;
  bool saved_optimizer = false;
  bool any_decay = false, any_no_decay = false;
  const bool distributed = cfg.parallel->use_distributed_optimizer;
  std::set<std::string> has_master;
  for (const auto& [name, shape] : in.tensors())
    if (name.rfind("optimizer.master.", 0) == 0) has_master.insert(name.substr(17));
  for (const auto& [name, shape] : in.tensors()) {
    std::string state_prefix, model_name = name;
    for (const auto& [strata, megatron] : std::vector<std::pair<std::string, std::string>>{
             {"optimizer.exp_avg.", "optimizer.state.exp_avg."},
             {"optimizer.exp_avg_sq.", "optimizer.state.exp_avg_sq."},
             {"optimizer.master.", "optimizer.state.fp32_param."}})
      if (name.rfind(strata, 0) == 0) state_prefix = megatron, model_name = name.substr(strata.size());
    if (!state_prefix.empty()) saved_optimizer = true;
    else if (name.find(".router.expert_bias") == std::string::npos)
      (shape.size() == 1 || name.size() > 5 && name.compare(name.size() - 5, 5, ".bias") == 0 ? any_no_decay : any_decay) = true;
    MegatronKeyPlace place = megatron_key_of(model_name);
    if (cfg.model->is_hybrid() && place.layer >= 0) {  // HybridStack keeps per-layer keys (no layer dimension)
      place.key = "decoder.layers." + std::to_string(place.layer) + place.key.substr(std::string("decoder.layers").size());
      place.layer = -1;
    }
    std::vector<int64_t> global, offsets, chunk_shape;
    if (place.layer >= 0) global.push_back(layers), offsets.push_back(place.layer), chunk_shape.push_back(1);
    if (place.expert >= 0) global.push_back(experts), offsets.push_back(place.expert), chunk_shape.push_back(1);
    global.insert(global.end(), shape.begin(), shape.end());
    offsets.resize(global.size(), 0);
    chunk_shape.insert(chunk_shape.end(), shape.begin(), shape.end());
    const Tensor t = in.read(name).reshape(Shape(chunk_shape));
    auto add = [&](const std::string& key, const Tensor& data) {
      auto [it, fresh] = tensors.try_emplace(key, formats::DcpWriteItem::tensor(key, global, data.dtype(), {}));
      STRATA_CHECK(it->second.global_shape == global, "checkpoint: ", name, " does not stack into Megatron's ", key,
                   " of shape ", Shape(it->second.global_shape).str());
      it->second.chunks.push_back({offsets, data});
    };
    if (state_prefix == "optimizer.state.fp32_param.") {
      if (distributed) add("optimizer.state.param." + place.key, t.to(DType::F32));  // the main parameter
      else add(state_prefix + place.key, t);
      continue;
    }
    add(state_prefix + place.key, t);
    // The distributed optimizer's fully_reshardable state holds every parameter's f32 main copy:
    // the value itself when the run keeps no separate master.
    if (distributed && state_prefix == "optimizer.state.exp_avg." && !has_master.count(model_name))
      add("optimizer.state.param." + place.key, in.read(model_name).reshape(Shape(chunk_shape)).to(DType::F32));
    if (state_prefix.empty() && has_extra_state(place.key)) {
      const std::string module = place.key.substr(0, place.key.size() - 7);
      const std::string fqn = module + "._extra_state" + shard_suffix(place, layers, experts);
      bytes.emplace(fqn, saved_object(fqn, PyValue::list({PyValue::none()})));
    }
  }
  // The common state.
  const double lr = LrSchedule(cfg.optimizer, cfg.training).lr(st.lr_scheduler_steps.value_or(0));
  PyRef common = PyValue::empty_dict();
  int64_t padded_vocab = 0;
  for (const auto& [name, shape] : in.tensors())
    if (name == "embedding.word_embeddings.weight") padded_vocab = shape.at(0);
  common->set("args", megatron_args(cfg, st, saved_optimizer, padded_vocab));
  common->set("checkpoint_version", PyValue::of_float(3.0));
  common->set("iteration", PyValue::of_int(st.iteration));
  std::map<std::string, Tensor> storages;
  if (saved_optimizer) {
    PyRef opt = PyValue::empty_dict(), state = PyValue::empty_dict(), groups = PyValue::list();
    storages["0"] = Tensor::full(Shape({}), static_cast<double>(st.optimizer_step_count), DType::F32);
    state->set("common_step", formats::py_tensor_of("0", storages["0"]));
    if (any_decay) groups->items.push_back(param_group(cfg, 1.0, lr));
    if (any_no_decay) groups->items.push_back(param_group(cfg, 0.0, lr));
    if (distributed) {  // DistributedOptimizer.state_dict(): the inner optimizer's groups carry the step
      for (PyRef& g : groups->items) g->set("step", PyValue::of_float(static_cast<double>(st.optimizer_step_count)));
      PyRef inner = PyValue::empty_dict();
      inner->set("param_groups", groups);
      opt->set("optimizer", inner);
      opt->set("param_state_sharding_type", PyValue::of_str("fully_reshardable"));
      storages.clear();
    } else {  // FP32Optimizer / MixedPrecisionOptimizer: torch_dist keeps one common_step
      opt->set("state", state);
      opt->set("param_groups", groups);
    }
    common->set("optimizer", opt);
  }
  common->set("opt_param_scheduler", scheduler_state(st));
  common->set("num_floating_point_operations_so_far", PyValue::of_float(0.0));
  PyRef content = PyValue::empty_dict();
  content->set("distrib_optim_sharding_type", PyValue::of_str("fully_reshardable"));
  content->set("distrib_optim_fully_reshardable_mem_efficient", PyValue::of_bool(false));
  content->set("singleton_local_shards", PyValue::of_bool(false));
  content->set("chained_optim_avoid_prefix", PyValue::of_bool(true));
  common->set("content_metadata", content);
  bytes.emplace("common_state/shard_0_1", saved_object("common_state/shard_0_1", PyValue::list({common}), storages));

  std::vector<formats::DcpWriteItem> items;
  for (auto& [k, v] : bytes) items.push_back(std::move(v));
  for (auto& [k, v] : tensors) items.push_back(std::move(v));
  STRATA_CHECK(!fs::exists(out_dir), "checkpoint: ", out_dir, " already exists");
  formats::write_dcp_checkpoint(out_dir, items);
  const std::string meta = R"({"sharded_backend": "torch_dist", "sharded_backend_version": 1})";
  formats::write_file_atomic((fs::path(out_dir) / "metadata.json").string(), meta.data(), meta.size());
}

}  // namespace strata
