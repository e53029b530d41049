// Megatron-Core torch_dist checkpoints written from a Strata iteration directory (see
// megatron_torch_dist_write.h).
#include "training/checkpointing/megatron/megatron_torch_dist_write.h"

#include <filesystem>
#include <map>
#include <set>

#include "core/error.h"
#include "core/formats/dcp_writer.h"
#include "core/formats/mapped_file.h"
#include "core/formats/pickle_object_writer.h"
#include "core/formats/torch_archive_writer.h"
#include "training/checkpointing/checkpoint.h"
#include "training/checkpointing/megatron/megatron_save_state.h"
#include "training/checkpointing/megatron/megatron_tensor_table.h"

namespace strata {

namespace fs = std::filesystem;
using formats::PyRef;
using formats::PyValue;

namespace {

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
    const std::string& tensor_name = name;  // clang before 16 cannot capture a structured binding (C++20 P1091)
    auto add = [&](const std::string& key, const Tensor& data) {
      auto [it, fresh] = tensors.try_emplace(key, formats::DcpWriteItem::tensor(key, global, data.dtype(), {}));
      STRATA_CHECK(it->second.global_shape == global, "checkpoint: ", tensor_name, " does not stack into Megatron's ",
                   key, " of shape ", Shape(it->second.global_shape).str());
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
  const double lr = megatron_saved_lr(cfg, st);
  PyRef common = PyValue::empty_dict();
  int64_t padded_vocab = 0;
  for (const auto& [name, shape] : in.tensors())
    if (name == "embedding.word_embeddings.weight") padded_vocab = shape.at(0);
  common->set("args", megatron_args(cfg, st, saved_optimizer, padded_vocab, "torch_dist"));
  common->set("checkpoint_version", PyValue::of_float(3.0));
  common->set("iteration", PyValue::of_int(st.iteration));
  std::map<std::string, Tensor> storages;
  if (saved_optimizer) {
    PyRef opt = PyValue::empty_dict(), state = PyValue::empty_dict(), groups = PyValue::list();
    storages["0"] = Tensor::full(Shape({}), static_cast<double>(st.optimizer_step_count), DType::F32);
    state->set("common_step", formats::py_tensor_of("0", storages["0"]));
    if (any_decay) groups->items.push_back(megatron_param_group(cfg, 1.0, lr));
    if (any_no_decay) groups->items.push_back(megatron_param_group(cfg, 0.0, lr));
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
  common->set("opt_param_scheduler", megatron_scheduler_state(st));
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
