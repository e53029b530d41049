// Megatron-Core legacy (`--ckpt-format torch`) checkpoints written from a Strata iteration
// directory (see megatron_legacy_write.h).
#include "training/checkpointing/megatron/megatron_legacy_write.h"

#include <cstring>
#include <filesystem>
#include <map>
#include <set>

#include "core/error.h"
#include "core/formats/pickle_object_writer.h"
#include "core/formats/torch_archive_writer.h"
#include "training/checkpointing/checkpoint.h"
#include "training/checkpointing/megatron/megatron_ddp_layout.h"
#include "training/checkpointing/megatron/megatron_names.h"
#include "training/checkpointing/megatron/megatron_save_state.h"

namespace strata {

namespace fs = std::filesystem;
using formats::PyRef;
using formats::PyValue;

namespace {

// The tensors of one torch.save file: each PyValue tensor references its own storage.
struct Storages {
  std::map<std::string, Tensor> map;
  PyRef add(const Tensor& t) {  // t: any shape, host
    const std::string key = std::to_string(map.size());
    map[key] = t.contiguous();
    return formats::py_tensor_of(key, map[key]);
  }
};

// One model parameter of the save: its Strata name, Megatron's local key, its shape.
struct LegacyParam {
  std::string name, key;
  std::vector<int64_t> shape;
  bool no_weight_decay() const { return shape.size() == 1 || key.ends_with(".bias"); }
};

// The model's parameters in Megatron's module-registration order (named_parameters()).
std::vector<LegacyParam> parameters_in_order(const CheckpointTensorReader& in) {
  std::map<std::string, std::vector<int64_t>> shapes;
  for (const auto& [name, shape] : in.tensors()) {
    if (name.rfind("optimizer.", 0) == 0) continue;
    STRATA_CHECK(name.find(".router.expert_bias") == std::string::npos, "checkpoint.ckpt_format: torch does not ",
                 "write the router's expert bias ('", name, "', model.moe_router_enable_expert_bias); save with ",
                 "torch_dist");
    shapes[name] = shape;
  }
  std::vector<std::string> names;
  for (const auto& [n, s] : shapes) names.push_back(n);
  std::vector<LegacyParam> out;
  for (const std::string& n : megatron_registration_order(names, MegatronModuleSpec{false, false}))
    out.push_back({n, strata_name_to_megatron_local_key(n), shapes.at(n)});
  return out;
}

// The module of a key ("decoder.layers.0.mlp.linear_fc1" of "….linear_fc1.weight").
std::string module_of(const std::string& key) { return key.substr(0, key.rfind('.')); }

// Megatron's linear layers (tensor_parallel.layers, MultiTokenPredictionLayer.eh_proj) have an
// _extra_state (None without FP8); norms, embeddings and the router have none.
bool has_extra_state(const std::string& module) {
  const std::string leaf = module.substr(module.rfind('.') + 1);
  return leaf.rfind("linear_", 0) == 0 || leaf == "eh_proj" || module == "output_layer";
}

// The local-spec GPTModel's state_dict: each module's parameters, then its _extra_state.
PyRef model_state_dict(CheckpointTensorReader& in, const std::vector<LegacyParam>& params, Storages& storages) {
  PyRef dict = PyValue::empty_dict();
  bool output_extra = false;
  for (size_t i = 0; i < params.size(); ++i) {
    dict->set(params[i].key, storages.add(in.read(params[i].name)));
    const std::string module = module_of(params[i].key);
    const bool last_of_module = i + 1 == params.size() || module_of(params[i + 1].key) != module;
    if (last_of_module && has_extra_state(module)) {
      dict->set(module + "._extra_state", PyValue::none());
      output_extra = output_extra || module == "output_layer";
    }
  }
  // Tied embeddings: the output layer has no weight of its own but still its extra state.
  if (!output_extra) dict->set("output_layer._extra_state", PyValue::none());
  return PyValue::instance({"collections", "OrderedDict"}, {}, dict);
}

// Megatron's param groups over `params`: indices of the decayed group, then of the other.
std::vector<std::vector<size_t>> group_members(const std::vector<LegacyParam>& params) {
  std::vector<std::vector<size_t>> groups(2);
  for (size_t i = 0; i < params.size(); ++i) groups[params[i].no_weight_decay() ? 1 : 0].push_back(i);
  if (groups[1].empty()) groups.pop_back();
  if (groups[0].empty()) groups.erase(groups.begin());
  return groups;
}

double group_wd_mult(const std::vector<LegacyParam>& params, const std::vector<size_t>& members) {
  return params[members.front()].no_weight_decay() ? 0.0 : 1.0;
}

// The plain optimizer: torch Adam's state_dict {state: {index: {step, exp_avg, exp_avg_sq}},
// param_groups: [{…, params: [index, …]}]}, wrapped as Float16OptimizerWithFloat16Params'
// {optimizer, fp32_from_fp16_params} when the run keeps master copies.
PyRef adam_state_dict(CheckpointTensorReader& in, const ResolvedConfig& cfg, const std::vector<LegacyParam>& params,
                      const std::set<std::string>& stored, Storages& storages) {
  const CheckpointState& st = in.state();
  const double lr = megatron_saved_lr(cfg, st);
  PyRef state = PyValue::empty_dict(), groups = PyValue::list(), masters = PyValue::list();
  bool any_master = false;
  int64_t index = 0;
  for (const std::vector<size_t>& members : group_members(params)) {
    PyRef group = megatron_param_group(cfg, group_wd_mult(params, members), lr);
    PyRef indices = PyValue::list(), group_masters = PyValue::list();
    for (size_t m : members) {
      const LegacyParam& p = params[m];
      PyRef s = PyValue::empty_dict();
      // A storage of its own per step: torch's Adam increments each state's step in place.
      s->set("step", storages.add(Tensor::full(Shape({}), static_cast<double>(st.optimizer_step_count), DType::F32)));
      for (const char* k : {"exp_avg", "exp_avg_sq"}) {
        const std::string name = std::string("optimizer.") + k + "." + p.name;
        STRATA_CHECK(stored.count(name), "checkpoint: parameter '", p.name, "' has no ", k,
                     " (Megatron's optimizer holds a state for every trained parameter)");
        s->set(k, storages.add(in.read(name)));
      }
      state->dict.emplace_back(PyValue::of_int(index), s);
      indices->items.push_back(PyValue::of_int(index++));
      const std::string master = "optimizer.master." + p.name;
      if (stored.count(master)) {
        any_master = true;
        group_masters->items.push_back(storages.add(in.read(master).to(DType::F32)));
      }
    }
    group->set("params", indices);
    groups->items.push_back(group);
    masters->items.push_back(group_masters);
  }
  PyRef adam = PyValue::empty_dict();
  adam->set("state", state);
  adam->set("param_groups", groups);
  if (!any_master) return adam;  // FP32Optimizer.state_dict()
  PyRef wrapped = PyValue::empty_dict();
  wrapped->set("optimizer", adam);
  wrapped->set("fp32_from_fp16_params", masters);
  return wrapped;
}

// DistributedOptimizer.state_dict() of the legacy format: the inner optimizer's param groups with
// their step (no 'params': Megatron matches them by their keys).
PyRef distributed_optimizer_state_dict(const ResolvedConfig& cfg, const CheckpointState& st,
                                       const std::vector<LegacyParam>& params) {
  PyRef groups = PyValue::list();
  for (const std::vector<size_t>& members : group_members(params)) {
    PyRef g = megatron_param_group(cfg, group_wd_mult(params, members), megatron_saved_lr(cfg, st));
    g->set("step", PyValue::of_float(static_cast<double>(st.optimizer_step_count)));
    groups->items.push_back(g);
  }
  PyRef inner = PyValue::empty_dict(), opt = PyValue::empty_dict();
  inner->set("param_groups", groups);
  opt->set("optimizer", inner);
  return opt;
}

// distrib_optim.pt: the buffer's states as flat f32 tensors in the DDP layout (one bucket).
void write_distrib_optim(CheckpointTensorReader& in, const ResolvedConfig& cfg, const std::vector<LegacyParam>& params,
                         const std::set<std::string>& stored, const std::string& path) {
  std::vector<std::string> names;
  std::vector<int64_t> numels;
  for (const LegacyParam& p : params) {
    STRATA_CHECK(p.name.find("mlp.experts.") == std::string::npos, "checkpoint.ckpt_format: torch with ",
                 "parallel.use_distributed_optimizer does not write experts ('", p.name, "': Megatron keeps them in ",
                 "a gradient buffer of their own); save with torch_dist or without the distributed optimizer");
    int64_t n = 1;
    for (int64_t d : p.shape) n *= d;
    names.push_back(p.name);
    numels.push_back(n);
  }
  int64_t total = 0;  // the bucket's unpadded size: parameters in reverse order, each 64-aligned
  for (size_t k = numels.size(); k-- > 0;) total = (total + 63) / 64 * 64 + numels[k];
  const std::vector<MegatronBucketSlot> slots = megatron_bucket_layout(names, numels, {total});
  PyRef states = PyValue::empty_dict();
  Storages storages;
  static const std::pair<const char*, const char*> kStates[] = {
      {"param", "optimizer.master."}, {"exp_avg", "optimizer.exp_avg."}, {"exp_avg_sq", "optimizer.exp_avg_sq."}};
  for (const auto& [state, prefix] : kStates) {
    Tensor flat = Tensor::zeros(Shape({total}), DType::F32);  // [numel_unpadded]
    for (const MegatronBucketSlot& s : slots) {
      std::string name = prefix + s.name;
      if (std::string(state) == "param" && !stored.count(name)) name = s.name;  // f32 runs: the value itself
      STRATA_CHECK(stored.count(name), "checkpoint: parameter '", s.name, "' has no ", state, " state");
      const Tensor t = in.read(name).to(DType::F32).contiguous();
      std::memcpy(flat.data<float>() + s.start, t.data<float>(), static_cast<size_t>(s.numel) * sizeof(float));
    }
    states->set(state, storages.add(flat));
  }
  states->set("numel_unpadded", PyValue::of_int(total));
  const DType param_dtype = in.read(params.front().name).dtype();
  const TrainingConfig& t = *cfg.training;
  const DType grad_dtype = t.grad_reduce_in_bf16 ? DType::BF16
                           : t.precision == Precision::Fp16 && !t.accumulate_allreduce_grads_in_fp32 ? DType::F16
                                                                                                     : DType::F32;
  PyRef by_dtype = PyValue::empty_dict();
  by_dtype->dict.emplace_back(PyValue::tuple({formats::py_torch_dtype(param_dtype), formats::py_torch_dtype(grad_dtype)}),
                              states);
  PyRef root = PyValue::empty_dict();
  root->set("buckets_coalesced", PyValue::of_bool(true));
  root->dict.emplace_back(PyValue::of_int(0), by_dtype);
  formats::torch_save_file(path, *root, storages.map);
}

// The args of the save: one model-parallel rank, the local spec's module names.
PyRef legacy_args(const ResolvedConfig& cfg, const CheckpointState& st, bool saved_optimizer, int64_t padded_vocab) {
  PyRef args = megatron_args(cfg, st, saved_optimizer, padded_vocab, "torch");
  PyValue& fields = *args->state;
  for (const char* k : {"tensor_model_parallel_size", "pipeline_model_parallel_size", "expert_model_parallel_size",
                        "expert_tensor_parallel_size", "context_parallel_size"})
    fields.set(k, PyValue::of_int(1));
  for (const char* k : {"virtual_pipeline_model_parallel_size", "num_layers_per_virtual_pipeline_stage"})
    fields.set(k, PyValue::none());
  fields.set("transformer_impl", PyValue::of_str("local"));
  fields.set("moe_grouped_gemm", PyValue::of_bool(false));
  return args;
}

}  // namespace

void write_megatron_legacy(const std::string& strata_iteration_dir, const std::string& out_dir,
                           const ResolvedConfig& cfg, TensorFileIO& io) {
  CheckpointTensorReader in(strata_iteration_dir, io);
  const CheckpointState& st = in.state();
  STRATA_CHECK(!st.loss_scaler, "checkpoint.ckpt_format: torch does not write fp16's loss scaler ",
               "(training.precision fp16); save with torch_dist or strata");
  const std::vector<LegacyParam> params = parameters_in_order(in);
  STRATA_CHECK(!params.empty(), "checkpoint: ", strata_iteration_dir, " holds no model tensors");
  std::set<std::string> stored;
  int64_t padded_vocab = 0;
  for (const auto& [name, shape] : in.tensors()) {
    stored.insert(name);
    if (name == "embedding.word_embeddings.weight") padded_vocab = shape.at(0);
  }
  bool saved_optimizer = false;
  for (const LegacyParam& p : params) saved_optimizer = saved_optimizer || stored.count("optimizer.exp_avg." + p.name);
  const bool distributed = cfg.parallel->use_distributed_optimizer;

  STRATA_CHECK(!fs::exists(out_dir), "checkpoint: ", out_dir, " already exists");
  const fs::path rank_dir = fs::path(out_dir) / "mp_rank_00";
  fs::create_directories(rank_dir);
  Storages storages;
  PyRef root = PyValue::empty_dict();
  root->set("args", legacy_args(cfg, st, saved_optimizer, padded_vocab));
  root->set("checkpoint_version", PyValue::of_float(3.0));
  root->set("iteration", PyValue::of_int(st.iteration));
  root->set("model", model_state_dict(in, params, storages));
  if (saved_optimizer) {
    if (distributed) {
      root->set("optimizer", distributed_optimizer_state_dict(cfg, st, params));
      write_distrib_optim(in, cfg, params, stored, (rank_dir / "distrib_optim.pt").string());
    } else {
      root->set("optimizer", adam_state_dict(in, cfg, params, stored, storages));
    }
  }
  root->set("opt_param_scheduler", megatron_scheduler_state(st));
  root->set("num_floating_point_operations_so_far", PyValue::of_float(0.0));
  formats::torch_save_file((rank_dir / "model_optim_rng.pt").string(), *root, storages.map);
}

}  // namespace strata
