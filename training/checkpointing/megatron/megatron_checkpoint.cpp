// Megatron-Core torch_dist checkpoints read into Strata's table of global tensors (see
// megatron_checkpoint.h).
// Reference: megatron/core/dist_checkpointing/serialization.py (load_common_state_dict: the
// "common_state" ShardedObject, a torch.save blob), megatron/training/checkpointing.py
// (generate_state_dict: args, iteration, opt_param_scheduler), megatron/core/optimizer/
// optimizer_param_scheduler.py (state_dict), megatron/core/transformer/transformer_block.py
// (sharded_state_dict: the layer dimension).
#include "training/checkpointing/megatron/megatron_checkpoint.h"

#include <cctype>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <set>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/error.h"
#include "core/formats/dcp_reader.h"
#include "core/formats/torch_archive.h"
#include "models/parameter_names.h"
#include "training/checkpointing/checkpoint_scheduler.h"
#include "training/checkpointing/megatron/megatron_names.h"
#include "training/checkpointing/megatron/megatron_optimizer_read.h"
#include "training/checkpointing/megatron/megatron_tensor_table.h"

namespace strata {

namespace fs = std::filesystem;
using formats::PyRef;
using formats::PyValue;

CheckpointFormat detect_checkpoint_format(const std::string& iteration_dir) {
  const fs::path d(iteration_dir);
  if (fs::exists(d / "manifest.json")) return CheckpointFormat::Strata;
  if (fs::exists(d / "metadata.json")) {
    std::ifstream in(d / "metadata.json");
    std::stringstream text;
    text << in.rdbuf();
    try {
      const auto j = nlohmann::json::parse(text.str());
      if (j.is_object() && j.value("sharded_backend", std::string()) == "torch_dist") return CheckpointFormat::MegatronTorchDist;
    } catch (const nlohmann::json::exception&) {
    }
    return CheckpointFormat::Unknown;
  }
  std::error_code ec;
  if (fs::is_directory(d, ec))
    for (const auto& e : fs::directory_iterator(d, ec))
      if (e.path().filename().string().rfind("mp_rank_", 0) == 0 && fs::exists(e.path() / "model_optim_rng.pt"))
        return CheckpointFormat::MegatronTorch;
  return CheckpointFormat::Unknown;
}

const char* checkpoint_format_name(CheckpointFormat f) {
  switch (f) {
    case CheckpointFormat::Strata: return "strata";
    case CheckpointFormat::MegatronTorchDist: return "torch_dist";
    case CheckpointFormat::MegatronTorch: return "torch";
    case CheckpointFormat::Unknown: return "unknown";
  }
  return "unknown";
}

namespace {

// One-element tensors of a common state (torch_dist's optimizer.state.common_step) become Floats:
// the archive holding their data does not outlive the read.
void scalar_tensors_to_floats(const formats::TorchArchive& a, PyValue& v) {
  if (v.kind == PyValue::Kind::Tensor) {
    const Tensor t = a.tensor(v.tensor);
    if (t.numel() == 1) {
      v.kind = PyValue::Kind::Float;
      v.real = t.to_vector()[0];
    }
    return;
  }
  for (PyRef& i : v.items) if (i) scalar_tensors_to_floats(a, *i);
  for (auto& [k, x] : v.dict) if (x) scalar_tensors_to_floats(a, *x);
  if (v.state) scalar_tensors_to_floats(a, *v.state);
}

// The common state: the "common_state" bytes item, a torch.save blob of a one-element list or the
// dict itself (older Megatron: common.pt). Its few tensors (the Adam step) are kept as Float values.
PyRef read_common_state(formats::DcpReader& dcp) {
  std::string key;
  for (const auto& [fqn, item] : dcp.items())
    if (!item.is_tensor && fqn.rfind("common_state/", 0) == 0) key = fqn;
  std::string blob, source;
  if (key.empty()) {
    const fs::path common = fs::path(dcp.dir()) / "common.pt";
    STRATA_IO_CHECK(fs::exists(common), dcp.dir(), "has neither a common_state item nor common.pt");
    formats::MappedFile mf(common.string());
    blob.assign(reinterpret_cast<const char*>(mf.data()), mf.size());
    source = common.string();
  } else {
    blob = dcp.read_bytes(key);
    source = dcp.dir() + "[" + key + "]";
  }
  formats::TorchArchive a(reinterpret_cast<const uint8_t*>(blob.data()), blob.size(), source);
  PyRef root = a.root;
  if (root->is_sequence() && !root->items.empty()) root = root->items[0];
  STRATA_IO_CHECK(root->kind == PyValue::Kind::Dict, source, "holds a ", root->kind_name(), ", not a dict");
  scalar_tensors_to_floats(a, *root);
  return root;
}

// A PyValue dict of numbers and strings as JSON (the scheduler's state_dict).
nlohmann::json to_json(const PyValue& v) {
  nlohmann::json j = nlohmann::json::object();
  for (const auto& [k, x] : v.dict) {
    if (!k->is_str()) continue;
    if (x->kind == PyValue::Kind::Int) j[k->text] = x->integer;
    else if (x->kind == PyValue::Kind::Float) j[k->text] = x->real;
    else if (x->kind == PyValue::Kind::Bool) j[k->text] = x->boolean;
    else if (x->is_str()) j[k->text] = x->text;
  }
  return j;
}

int64_t int_member(const PyValue* v, const std::string& what, const std::string& where) {
  STRATA_IO_CHECK(v && v->is_int(), where, what, " is missing or not an integer");
  return v->integer;
}

}  // namespace

formats::PyRef read_megatron_common_state(const std::string& iteration_dir) {
  formats::DcpReader dcp(iteration_dir);
  return read_common_state(dcp);
}

std::optional<LrScheduleState> megatron_lr_schedule(const PyValue& common, const std::string& iteration_dir) {
  const PyValue* sch = common.find("opt_param_scheduler");
  if (!sch || sch->kind != PyValue::Kind::Dict) return std::nullopt;
  return lr_schedule_from_json(to_json(*sch), fs::path(iteration_dir) / "common_state");
}

MegatronCheckpoint read_megatron_torch_dist(const std::string& iteration_dir, const std::vector<Parameter*>& params) {
  auto dcp = std::make_shared<formats::DcpReader>(iteration_dir);
  MegatronCheckpoint m;
  m.common = read_common_state(*dcp);
  const std::string where = iteration_dir + " (common state): ";
  const PyValue* args = m.common->find("args");
  STRATA_IO_CHECK(args && args->is_instance_of("argparse", "Namespace"), where, "no saved args");
  m.args = m.common->find("args") ? std::make_shared<PyValue>(*args) : nullptr;
  m.state.iteration = int_member(m.common->find("iteration"), "iteration", where);
  m.state.consumed_train_samples = int_member(args->attr("consumed_train_samples"), "args.consumed_train_samples", where);
  if (const PyValue* seed = args->attr("seed"); seed && seed->is_int()) m.state.seed = static_cast<uint64_t>(seed->integer);
  m.state.lr_schedule = megatron_lr_schedule(*m.common, iteration_dir);
  if (const PyValue* sch = m.common->find("opt_param_scheduler"); sch && sch->kind == PyValue::Kind::Dict)
    if (const PyValue* n = sch->find("num_steps"); n && n->is_int()) m.state.lr_scheduler_steps = n->integer;
  // Model tensors: stacked layers unstacked into per-layer tensors; optimizer keys are read below.
  auto chunk_cache = std::make_shared<std::map<std::pair<std::string, size_t>, Tensor>>();
  MegatronChunkFetch chunk = [dcp, chunk_cache](const std::string& fqn, size_t i) {
    auto key = std::make_pair(fqn, i);
    auto it = chunk_cache->find(key);
    if (it != chunk_cache->end()) return it->second;
    if (chunk_cache->size() > 8) chunk_cache->clear();  // a few recent chunks (a layer's pieces)
    return (*chunk_cache)[key] = dcp->read_chunk(fqn, i);
  };
  for (const auto& [fqn, item] : dcp->items()) {
    if (!item.is_tensor || fqn.rfind("optimizer.", 0) == 0 || fqn.find("_extra_state") != std::string::npos) continue;
    add_megatron_tensor(m.table, fqn, "", fqn, item, chunk);
  }
  m.has_optimizer = read_megatron_optimizer(*dcp, m.common, params, m.table, m.state, chunk);
  std::set<std::string> model_names;  // the norms under the spelling this model uses (megatron_names.h)
  for (const Parameter* p : params) model_names.insert(checkpoint_parameter_name(p->name));
  resolve_megatron_norm_aliases(m.table, model_names);
  return m;
}

}  // namespace strata
