// Megatron torch_dist optimizer state into Strata's tensor table (see megatron_optimizer_read.h).
// Reference: megatron/core/optimizer/distrib_optimizer.py (sharded_param_state_dp_reshardable,
// sharded_param_state_fs_model_space: `optimizer.state.<state>.<param key>`), optimizer.py
// (FP32Optimizer.sharded_state_dict, MixedPrecisionOptimizer: fp32_param).
#include "training/checkpointing/megatron/megatron_optimizer_read.h"

#include <cmath>
#include <map>
#include <set>

#include "core/error.h"
#include "core/formats/torch_archive.h"
#include "training/checkpointing/megatron/megatron_ddp_layout.h"

namespace strata {

using formats::PyRef;
using formats::PyValue;

namespace {

// Megatron's state names → Strata's table prefixes.
const std::map<std::string, std::string>& state_prefixes() {
  static const std::map<std::string, std::string> m = {
      {"exp_avg", "optimizer.exp_avg."}, {"exp_avg_sq", "optimizer.exp_avg_sq."},
      {"fp32_param", "optimizer.master."}, {"param", "optimizer.master."}};
  return m;
}

// A bytes item holding a torch.save blob, loaded (a one-element list unwrapped).
PyRef load_bytes_item(formats::DcpReader& dcp, const std::string& fqn) {
  const std::string blob = dcp.read_bytes(fqn);
  formats::TorchArchive a(reinterpret_cast<const uint8_t*>(blob.data()), blob.size(), dcp.dir() + "[" + fqn + "]");
  PyRef v = a.root;
  if (v->kind == PyValue::Kind::List && v->items.size() == 1) v = v->items[0];
  return v;
}

// The Adam step from param_groups ('step', the same in every group).
std::optional<int64_t> step_of_param_groups(const PyValue* opt) {
  const PyValue* groups = opt ? opt->find("param_groups") : nullptr;
  if (!groups || !groups->is_sequence()) return std::nullopt;
  for (const PyRef& g : groups->items)
    if (const PyValue* s = g->find("step"); s && s->is_number()) return static_cast<int64_t>(std::llround(s->as_double()));
  return std::nullopt;
}

// `optimizer.state.<state>.<param key>`: one tensor per parameter, stacked like the parameter.
bool read_per_parameter_states(formats::DcpReader& dcp, StoredTensorTable& table, const MegatronChunkFetch& chunk) {
  bool any = false;
  const std::string prefix = "optimizer.state.";
  for (const auto& [fqn, item] : dcp.items()) {
    if (!item.is_tensor || fqn.rfind(prefix, 0) != 0) continue;
    const std::string rest = fqn.substr(prefix.size());
    const size_t dot = rest.find('.');
    if (dot == std::string::npos) continue;
    auto it = state_prefixes().find(rest.substr(0, dot));
    if (it == state_prefixes().end()) continue;
    add_megatron_tensor(table, rest.substr(dot + 1), it->second, fqn, item, chunk);
    any = true;
  }
  return any;
}

// Flat buckets: `optimizer.distributed.dp_group_idx_<g>.gbuf_idx_<b>.dtype_<d>.bucket_idx_<k>.<state>`.
struct FlatBucket {
  std::string prefix;  // up to and including "bucket_idx_<k>."
  int64_t index = 0;
};

bool read_flat_buckets(formats::DcpReader& dcp, const StoredTensorTable& model, StoredTensorTable& table,
                       const MegatronModuleSpec& spec, const MegatronChunkFetch& chunk) {
  // Buffers: "...gbuf_idx_<b>.dtype_<d>." → its buckets in order.
  std::map<std::string, std::map<int64_t, std::string>> buffers;
  for (const auto& [fqn, item] : dcp.items()) {
    if (!item.is_tensor || fqn.rfind("optimizer.distributed.", 0) != 0) continue;
    const size_t b = fqn.find(".bucket_idx_");
    if (b == std::string::npos) continue;
    const size_t end = fqn.find('.', b + 12);
    STRATA_IO_CHECK(end != std::string::npos, dcp.dir(), "item ", fqn, " is not a bucket state");
    buffers[fqn.substr(0, b)][std::stoll(fqn.substr(b + 12, end - b - 12))] = fqn.substr(0, end + 1);
  }
  if (buffers.empty()) return false;
  STRATA_IO_CHECK(buffers.size() == 1, dcp.dir(), "holds ", buffers.size(), " distributed-optimizer buffers (expert or "
                  "mixed-dtype buffers); this build places a single dense buffer — save the Megatron checkpoint with "
                  "--dist-ckpt-optim-fully-reshardable");
  const auto& buckets = buffers.begin()->second;
  std::vector<int64_t> sizes;
  for (const auto& [k, prefix] : buckets) {
    const formats::DcpItem* it = dcp.find(prefix + "exp_avg");
    STRATA_IO_CHECK(it && it->shape.size() == 1, dcp.dir(), "has no flat ", prefix, "exp_avg");
    sizes.push_back(it->shape[0]);
  }
  std::vector<std::string> names;
  for (const auto& [name, e] : model)
    if (name.find(".router.expert_bias") == std::string::npos) names.push_back(name);
  const std::vector<std::string> ordered = megatron_registration_order(names, spec);
  std::vector<int64_t> numels;
  for (const std::string& n : ordered) {
    int64_t numel = 1;
    for (int64_t d : model.at(n).shape) numel *= d;
    numels.push_back(numel);
  }
  for (const MegatronBucketSlot& slot : megatron_bucket_layout(ordered, numels, sizes)) {
    const std::string& prefix = std::next(buckets.begin(), slot.bucket)->second;
    for (const auto& [state, table_prefix] : state_prefixes()) {
      const std::string fqn = prefix + state;
      const formats::DcpItem* item = dcp.find(fqn);
      if (!item) continue;
      // The slot must be one chunk of the flat tensor, as Megatron saves each parameter.
      size_t ci = item->chunks.size();
      for (size_t i = 0; i < item->chunks.size(); ++i)
        if (item->chunks[i].offsets[0] == slot.start && item->chunks[i].sizes[0] == slot.numel) ci = i;
      STRATA_IO_CHECK(ci < item->chunks.size(), dcp.dir(), "item ", fqn, " has no chunk at [", slot.start, ", ",
                      slot.start + slot.numel, ") for parameter '", slot.name, "' (another model or buffer order)");
      StoredTensor& e = table[table_prefix + slot.name];
      e.shape = model.at(slot.name).shape;
      std::vector<int64_t> shape = e.shape;
      e.pieces.push_back({fqn, "chunk " + std::to_string(ci), {std::vector<int64_t>(shape.size(), 0), shape},
                          [chunk, fqn, ci, shape] { return chunk(fqn, ci).reshape(Shape(shape)); }});
    }
  }
  return true;
}

}  // namespace

bool read_megatron_optimizer(formats::DcpReader& dcp, const PyRef& common, const std::vector<Parameter*>& params,
                             StoredTensorTable& table, CheckpointState& state, const MegatronChunkFetch& chunk) {
  (void)params;
  const PyValue* args = common->find("args");
  const PyValue* impl = args ? args->attr("transformer_impl") : nullptr;
  const PyValue* grouped = args ? args->attr("moe_grouped_gemm") : nullptr;
  MegatronModuleSpec spec;
  spec.transformer_engine = !impl || !impl->is_str() || impl->text != "local";
  spec.grouped_experts = grouped && grouped->kind == PyValue::Kind::Bool && grouped->boolean;
  const StoredTensorTable model = table;  // the model tensors only, so far
  const bool per_param = read_per_parameter_states(dcp, table, chunk);
  const bool flat = !per_param && read_flat_buckets(dcp, model, table, spec, chunk);
  if (!per_param && !flat) return false;
  // The step: the distributed optimizer's param_groups (a bytes item), else the common state's.
  std::optional<int64_t> step;
  for (const auto& [fqn, item] : dcp.items())
    if (!item.is_tensor && fqn.rfind("optimizer.distributed.", 0) == 0 && fqn.find(".optimizer/") != std::string::npos)
      step = step_of_param_groups(load_bytes_item(dcp, fqn).get());
  if (!step) {  // without the distributed optimizer: the common state's optimizer.state.common_step
    const PyValue* opt = common->find("optimizer");
    const PyValue* st = opt ? opt->find("state") : nullptr;
    if (const PyValue* s = st ? st->find("common_step") : nullptr; s && s->is_number())
      step = static_cast<int64_t>(std::llround(s->as_double()));
    if (!step && opt && opt->find("optimizer")) opt = opt->find("optimizer");
    if (!step) step = step_of_param_groups(opt);
  }
  if (!step)
    for (const auto& [fqn, item] : dcp.items())
      if (fqn.rfind("optimizer.state.common_step", 0) == 0 && item.is_tensor) {
        const Tensor t = chunk(fqn, 0);
        step = static_cast<int64_t>(std::llround(t.to_vector().at(0)));
      }
  STRATA_IO_CHECK(step.has_value(), dcp.dir(), "holds optimizer states but no Adam step (param_groups 'step')");
  state.optimizer_step_count = *step;
  return true;
}

}  // namespace strata
