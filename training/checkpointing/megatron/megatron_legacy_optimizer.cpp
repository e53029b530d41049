// The optimizer states of a Megatron legacy (`--ckpt-format torch`) checkpoint into Strata's table
// (see megatron_legacy_parts.h). Without the distributed optimizer a rank file's `optimizer` is
// torch's Adam state_dict (`state`: {index: {step, exp_avg, exp_avg_sq}}, `param_groups`:
// [{params: [index, …], wd_mult, is_expert_parallel, …}]), wrapped with `fp32_from_fp16_params` by
// the mixed-precision optimizer; the indices number the parameters group by group, each group
// holding its parameters in model.named_parameters() order (Megatron's module-registration order,
// megatron_ddp_layout.h), the no-weight-decay group being the 1-D parameters and biases. With the
// distributed optimizer, `distrib_optim.pt` beside it holds each buffer's states as flat tensors,
// its buckets concatenated without their end padding, the parameters laid out as in the DDP buffer.
// Reference: megatron/core/optimizer/__init__.py (_get_param_groups, the wd_mult=0 override for
// `len(param.shape) == 1 or name.endswith(".bias")`), megatron/core/optimizer/optimizer.py
// (FP32Optimizer.state_dict, Float16OptimizerWithFloat16Params.state_dict), torch/optim/
// optimizer.py (Optimizer.state_dict: packed indices), megatron/core/optimizer/distrib_optimizer.py
// (get_parameter_state_dp_zero: buckets_coalesced, numel_unpadded).
#include <cmath>
#include <filesystem>
#include <optional>

#include "core/error.h"
#include "training/checkpointing/megatron/megatron_ddp_layout.h"
#include "training/checkpointing/megatron/megatron_legacy_parts.h"

namespace strata::megatron_legacy {

namespace fs = std::filesystem;
using formats::PyRef;
using formats::PyValue;

namespace {

// The parameters of a rank file in named_parameters() order (model chunks in order).
std::vector<const LocalTensor*> parameters_in_order(const RankFile& f, const PyValue& args) {
  std::map<std::string, const LocalTensor*> by_name;
  MegatronModuleSpec spec;
  const PyValue* impl = args.attr("transformer_impl");
  spec.transformer_engine = !impl || !impl->is_str() || impl->text != "local";
  for (const LocalTensor& t : f.tensors) {
    if (!t.is_parameter) continue;
    by_name[t.name] = &t;
    if (t.key.find("mlp.experts.linear_fc") != std::string::npos) spec.grouped_experts = true;  // TEGroupedMLP
  }
  std::vector<std::string> names;
  for (const auto& [n, t] : by_name) names.push_back(n);
  std::vector<const LocalTensor*> out;
  for (const std::string& n : megatron_registration_order(names, spec)) out.push_back(by_name.at(n));
  return out;
}

const PyValue& member(const PyValue& d, const std::string& key, const std::string& where) {
  const PyValue* v = d.find(key);
  STRATA_IO_CHECK(v, where, "has no '", key, "'");
  return *v;
}

// Megatron's param groups: the parameters of each saved group, in index order.
std::vector<std::vector<const LocalTensor*>> group_members(const RankFile& f, const PyValue& groups,
                                                           const std::vector<const LocalTensor*>& params) {
  const std::string where = f.path + " [optimizer.param_groups]";
  STRATA_IO_CHECK(groups.is_sequence(), where, "is a ", groups.kind_name(), ", not a list");
  std::vector<std::vector<const LocalTensor*>> members(groups.items.size());
  for (const LocalTensor* t : params) {
    const bool no_wd = t->shape.size() == 1 || t->key.ends_with(".bias");
    const bool expert = t->name.find("mlp.experts.") != std::string::npos;
    std::vector<size_t> fits;
    for (size_t g = 0; g < groups.items.size(); ++g) {
      const PyValue* wd = groups.items[g]->find("wd_mult");
      if (!wd || !wd->is_number() || (wd->as_double() == 0.0) != no_wd) continue;
      fits.push_back(g);
    }
    if (fits.size() > 1) {  // expert-parallel parameters have groups of their own
      std::vector<size_t> narrowed;
      for (size_t g : fits) {
        const PyValue* ep = groups.items[g]->find("is_expert_parallel");
        if ((ep && ep->kind == PyValue::Kind::Bool && ep->boolean) == expert) narrowed.push_back(g);
      }
      fits = narrowed;
    }
    STRATA_IO_CHECK(fits.size() == 1, where, "no single param group fits parameter '", t->key, "' (", fits.size(),
                    " do; groups with per-parameter lr_mult or decoupled lr are not read by this build)");
    members[fits[0]].push_back(t);
  }
  for (size_t g = 0; g < members.size(); ++g) {
    const PyValue& idx = member(*groups.items[g], "params", where);
    STRATA_IO_CHECK(idx.is_sequence() && idx.items.size() == members[g].size(), where, "group ", g, " lists ",
                    idx.is_sequence() ? idx.items.size() : 0, " parameters, but ", members[g].size(),
                    " of the rank file's parameters belong to it");
  }
  return members;
}

std::optional<double> scalar_of(const RankFile& f, const PyValue* v) {
  if (!v) return std::nullopt;
  if (v->is_number()) return v->as_double();
  if (v->kind == PyValue::Kind::Tensor) {
    const Tensor t = f.pt->archive.tensor(v->tensor);
    if (t.numel() == 1) return t.to_vector()[0];
  }
  return std::nullopt;
}

// torch's Adam state_dict (in Megatron's wrapper) of one rank file. Returns its step.
std::optional<double> read_adam_state_dict(const RankFile& f, const PyValue& opt, const PyValue& args,
                                           StoredTensorTable& table) {
  const PyValue* inner = &opt;
  const PyValue* masters = nullptr;
  if (!opt.find("state") && opt.find("optimizer")) {  // Float16OptimizerWithFloat16Params
    inner = opt.find("optimizer");
    masters = opt.find("fp32_from_fp16_params");
  }
  const std::string where = f.path + " [optimizer]";
  STRATA_IO_CHECK(inner->kind == PyValue::Kind::Dict, where, "is a ", inner->kind_name(),
                  " (several chained optimizers are not read by this build)");
  const PyValue& groups = member(*inner, "param_groups", where);
  const auto members = group_members(f, groups, parameters_in_order(f, args));
  std::map<int64_t, const LocalTensor*> by_index;
  for (size_t g = 0; g < members.size(); ++g) {
    const PyValue& idx = member(*groups.items[g], "params", where);
    for (size_t j = 0; j < idx.items.size(); ++j) {
      STRATA_IO_CHECK(idx.items[j]->is_int(), where, "param group ", g, " holds a ", idx.items[j]->kind_name());
      by_index[idx.items[j]->integer] = members[g][j];
    }
  }
  std::optional<double> step;
  const PyValue& states = member(*inner, "state", where);
  for (const auto& [k, s] : states.dict) {
    STRATA_IO_CHECK(k->is_int() && by_index.count(k->integer), where, "state of an unknown parameter index");
    const LocalTensor& t = *by_index.at(k->integer);
    const std::string at = where + "[state][" + std::to_string(k->integer) + "]";
    for (const char* name : {"exp_avg", "exp_avg_sq"}) {
      const PyValue& v = member(*s, name, at);
      STRATA_IO_CHECK(v.kind == PyValue::Kind::Tensor && v.tensor.size == t.shape, at, "'", name, "' is ",
                      v.kind == PyValue::Kind::Tensor ? TensorBox{{}, v.tensor.size}.str() : v.kind_name(),
                      ", but parameter index ", k->integer, " is '", t.key, "' ", TensorBox{{}, t.shape}.str(),
                      " (Megatron's parameter order differs from this build's)");
      if (t.contributes) add_local_tensor(table, std::string("optimizer.") + name + "." + t.name, t, f.pt, v.tensor, at);
    }
    if (!step) step = scalar_of(f, s->find("step"));
  }
  if (masters && masters->is_sequence())
    for (size_t g = 0; g < masters->items.size() && g < members.size(); ++g)
      for (size_t j = 0; j < masters->items[g]->items.size() && j < members[g].size(); ++j) {
        const PyValue& v = *masters->items[g]->items[j];
        const LocalTensor& t = *members[g][j];
        if (v.kind != PyValue::Kind::Tensor || !t.contributes) continue;
        STRATA_IO_CHECK(v.tensor.size == t.shape, where, "fp32_from_fp16_params[", g, "][", j, "] does not have the ",
                        "shape of '", t.key, "'");
        add_local_tensor(table, "optimizer.master." + t.name, t, f.pt, v.tensor, where + "[fp32_from_fp16_params]");
      }
  return step;
}

// distrib_optim.pt: one buffer's flat states, placed by the DDP buffer layout (one bucket).
void read_flat_states(const RankFile& f, const std::string& path, const PyValue& args, StoredTensorTable& table) {
  const auto pt = std::make_shared<TorchFile>(path);
  const PyValue& root = *pt->archive.root;
  STRATA_IO_CHECK(root.kind == PyValue::Kind::Dict, path, "holds a ", root.kind_name(), ", not a dict");
  std::vector<const PyValue*> buffers;
  for (const auto& [k, v] : root.dict) if (k->is_int()) buffers.push_back(v.get());
  STRATA_IO_CHECK(buffers.size() == 1 && buffers[0]->kind == PyValue::Kind::Dict && buffers[0]->dict.size() == 1, path,
                  "holds ", buffers.size(), " gradient buffers (expert-parallel, mixed-dtype or virtual-pipeline "
                  "buffers); this build reads one");
  const PyValue& states = *buffers[0]->dict[0].second;
  const PyValue* numel = states.find("numel_unpadded");
  STRATA_IO_CHECK(numel && numel->is_int(), path, "has no numel_unpadded");
  const std::vector<const LocalTensor*> params = parameters_in_order(f, args);
  std::vector<std::string> names;
  std::vector<int64_t> numels;
  std::map<std::string, const LocalTensor*> by_name;
  for (const LocalTensor* t : params) {
    int64_t n = 1;
    for (int64_t d : t->shape) n *= d;
    names.push_back(t->name);
    numels.push_back(n);
    by_name[t->name] = t;
  }
  std::vector<MegatronBucketSlot> slots;
  try {
    slots = megatron_bucket_layout(names, numels, {numel->integer});
  } catch (const std::exception& e) {
    STRATA_IO_THROW(path, "its ", numel->integer, " elements are not this model's parameters in one DDP bucket ",
                    "(several buckets are not read by this build): ", e.what());
  }
  static const std::pair<const char*, const char*> kStates[] = {
      {"param", "optimizer.master."}, {"exp_avg", "optimizer.exp_avg."}, {"exp_avg_sq", "optimizer.exp_avg_sq."}};
  for (const auto& [state, prefix] : kStates) {
    const PyValue* flat = states.find(state);
    STRATA_IO_CHECK(flat && flat->kind == PyValue::Kind::Tensor && flat->tensor.size.size() == 1 &&
                        flat->tensor.size[0] == numel->integer && flat->tensor.stride == std::vector<int64_t>{1},
                    path, "'", state, "' is not a flat tensor of ", numel->integer, " elements");
    for (const MegatronBucketSlot& s : slots) {
      const LocalTensor& t = *by_name.at(s.name);
      if (!t.contributes) continue;
      formats::PyTensorRef ref = flat->tensor;
      ref.offset += s.start;
      ref.size = t.shape;
      ref.stride.assign(t.shape.size(), 1);
      for (size_t d = t.shape.size(); d-- > 1;) ref.stride[d - 1] = ref.stride[d] * t.shape[d];
      add_local_tensor(table, prefix + t.name, t, pt, ref, path + "[" + state + "][" + std::to_string(s.start) + "]");
    }
  }
}

// The distributed optimizer's step: its param_groups' 'step'.
std::optional<double> param_groups_step(const PyValue& opt) {
  const PyValue* inner = opt.find("optimizer");
  const PyValue* groups = inner ? inner->find("param_groups") : opt.find("param_groups");
  if (!groups || !groups->is_sequence()) return std::nullopt;
  for (const PyRef& g : groups->items)
    if (const PyValue* s = g->find("step"); s && s->is_number()) return s->as_double();
  return std::nullopt;
}

}  // namespace

bool read_legacy_optimizer(const std::vector<RankFile>& files, const PyValue& args, StoredTensorTable& table,
                           CheckpointState& state) {
  std::optional<double> step;
  size_t with_optimizer = 0;
  for (const RankFile& f : files) {
    const PyValue* opt = f.root->find("optimizer");
    if (!opt || opt->is_none()) continue;
    ++with_optimizer;
    const fs::path flat = fs::path(f.path).parent_path() / "distrib_optim.pt";
    std::optional<double> s;
    if (fs::exists(flat)) {
      read_flat_states(f, flat.string(), args, table);
      s = param_groups_step(*opt);
    } else {
      const PyValue* inner = opt->find("state") ? opt : opt->find("optimizer");
      STRATA_IO_CHECK(inner && inner->find("state"), f.path, "holds no per-parameter optimizer 'state' (a ",
                      "distributed optimizer's checkpoint: is ", flat.string(), " missing?)");
      s = read_adam_state_dict(f, *opt, args, table);
    }
    STRATA_IO_CHECK(s.has_value(), f.path, "holds optimizer states but no Adam step");
    STRATA_IO_CHECK(!step || *step == *s, f.path, "Adam step ", *s, " differs from another rank file's ", *step);
    step = s;
  }
  if (with_optimizer == 0) return false;
  STRATA_IO_CHECK(with_optimizer == files.size(), files.front().path, "only ", with_optimizer, " of ", files.size(),
                  " rank files hold optimizer states");
  state.optimizer_step_count = static_cast<int64_t>(std::llround(*step));
  return true;
}

}  // namespace strata::megatron_legacy
