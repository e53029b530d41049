// Megatron's DDP buffer layout (see megatron_ddp_layout.h).
#include "training/checkpointing/megatron/megatron_ddp_layout.h"

#include <algorithm>
#include <cctype>
#include <tuple>

#include "core/error.h"

namespace strata {

namespace {

// The experts' order (after the router): SequentialMLP registers expert by expert (fc1 weight, fc1
// bias, fc2 weight, fc2 bias); TEGroupedMLP (grouped GEMM) fc1's weights of every expert, fc1's
// biases, then fc2's. Strata names expert e's tensors `mlp.experts.linear_fc<d>.<weight|bias><e>`.
int64_t expert_rank(const std::string& leaf, bool grouped) {
  const bool fc2 = leaf.rfind("linear_fc2.", 0) == 0;
  const std::string kind = leaf.substr(11);  // "weight3" / "bias3"
  const bool bias = kind.rfind("bias", 0) == 0;
  const std::string id = kind.substr(bias ? 4 : 6);
  if (id.empty() || id.find_first_not_of("0123456789") != std::string::npos) return -1;
  const int64_t e = std::stoll(id);
  return grouped ? (fc2 ? 2 : 0) * 100000 + (bias ? 100000 : 0) + e : e * 4 + (fc2 ? 2 : 0) + (bias ? 1 : 0);
}

// Module-registration rank of a name's part inside a transformer layer (after "layers.<n>."), or -1.
int64_t layer_part_rank(const std::string& rest, bool te, bool grouped) {
  if (rest.rfind("mlp.experts.linear_fc", 0) == 0) {
    const int64_t r = expert_rank(rest.substr(12), grouped);
    return r < 0 ? -1 : 90 * 1000000 + r;
  }
  // local spec: the norms are modules of their own, first in their half of the layer.
  const int in_norm = te ? 25 : 0, mlp_norm = te ? 65 : 50;
  static const std::vector<std::pair<const char*, int>> kParts = {
      {"input_layernorm.", 0},  // (placeholder: ranked through in_norm below)
      {"self_attention.linear_qkv.layer_norm_", -1},
      {"self_attention.core_attention.", 10},
      {"self_attention.linear_proj.", 20},
      {"self_attention.linear_qkv.", 30},
      {"self_attention.linear_q_proj.", 30},
      {"self_attention.linear_q_down_proj.", 31},
      {"self_attention.linear_q_up_proj.", 32},
      {"self_attention.linear_kv_down_proj.", 33},
      {"self_attention.linear_kv_up_proj.", 34},
      {"self_attention.q_layernorm.", 40},
      {"self_attention.k_layernorm.", 41},
      {"self_attention.kv_layernorm.", 42},
      {"pre_mlp_layernorm.", -2},
      {"mlp.linear_fc1.layer_norm_", -2},
      {"mlp.router.", 60},
      {"mlp.linear_fc1.", 70},
      {"mlp.linear_fc2.", 80},
      {"mlp.experts.", 90},
      {"mlp.shared_experts.linear_fc1.", 100},
      {"mlp.shared_experts.linear_fc2.", 101},
      {"mlp.shared_experts.gate_weight", 102},
  };
  for (const auto& [prefix, rank] : kParts)
    if (rest.rfind(prefix, 0) == 0) {
      if (rank == 0 || rank == -1) return int64_t{in_norm} * 1000000;
      if (rank == -2) return int64_t{mlp_norm} * 1000000;
      return int64_t{rank} * 1000000;
    }
  return -1;
}

// Within a module: layer_norm_weight, layer_norm_bias (TE), weight, bias.
int leaf_rank(const std::string& name) {
  const auto ends = [&](const char* s) {
    const std::string t(s);
    return name.size() >= t.size() && name.compare(name.size() - t.size(), t.size(), t) == 0;
  };
  if (ends("layer_norm_weight")) return 0;
  if (ends("layer_norm_bias")) return 1;
  if (ends(".weight")) return 2;
  if (ends(".bias")) return 3;
  return 4;
}

// The number after `marker` at the start of name (after prefix), or -1.
int64_t index_after(const std::string& name, const std::string& marker, std::string* rest) {
  if (name.rfind(marker, 0) != 0) return -1;
  size_t i = marker.size(), j = i;
  while (j < name.size() && std::isdigit(static_cast<unsigned char>(name[j]))) ++j;
  if (j == i || j >= name.size() || name[j] != '.') return -1;
  if (rest) *rest = name.substr(j + 1);
  return std::stoll(name.substr(i, j - i));
}

using Key = std::tuple<int, int64_t, int64_t, int>;

Key order_key(const std::string& name, bool te, bool grouped) {
  std::string rest;
  if (name.rfind("embedding.word_embeddings.", 0) == 0) return {0, 0, 0, leaf_rank(name)};
  if (name.rfind("embedding.position_embeddings.", 0) == 0) return {1, 0, 0, leaf_rank(name)};
  if (const int64_t layer = index_after(name, "decoder.layers.", &rest); layer >= 0) {
    const int64_t part = layer_part_rank(rest, te, grouped);
    STRATA_CHECK(part >= 0, "checkpoint: Megatron's buffer order of parameter '", name,
                 "' is not known to this build (a distributed optimizer saved as dp_reshardable cannot be "
                 "placed; save it with --dist-ckpt-optim-fully-reshardable)");
    return {2, layer, part, leaf_rank(name)};
  }
  if (name.rfind("decoder.final_layernorm.", 0) == 0) return {3, 0, 0, leaf_rank(name)};
  if (const int64_t k = index_after(name, "mtp.layers.", &rest); k >= 0) {
    int64_t part = -1;
    if (rest.rfind("enorm.", 0) == 0) part = 0;
    else if (rest.rfind("hnorm.", 0) == 0) part = 1;
    else if (rest.rfind("eh_proj.", 0) == 0) part = 2;
    else if (rest.rfind("transformer_layer.", 0) == 0) {
      const int64_t r = layer_part_rank(rest.substr(18), te, grouped);
      part = r < 0 ? -1 : 10 + r;
    } else if (rest.rfind("final_layernorm.", 0) == 0) part = int64_t{1} << 40;
    STRATA_CHECK(part >= 0, "checkpoint: Megatron's buffer order of parameter '", name,
                 "' is not known to this build");
    return {4, k, part, leaf_rank(name)};
  }
  if (name.rfind("output_layer.", 0) == 0) return {5, 0, 0, leaf_rank(name)};
  STRATA_THROW("checkpoint: Megatron's buffer order of parameter '", name, "' is not known to this build");
}

}  // namespace

std::vector<std::string> megatron_registration_order(std::vector<std::string> names, const MegatronModuleSpec& spec) {
  std::vector<std::pair<Key, std::string>> keyed;
  for (std::string& n : names) keyed.emplace_back(order_key(n, spec.transformer_engine, spec.grouped_experts), std::move(n));
  std::stable_sort(keyed.begin(), keyed.end(),
                   [](const auto& a, const auto& b) { return a.first < b.first; });
  std::vector<std::string> out;
  for (auto& [k, n] : keyed) out.push_back(std::move(n));
  return out;
}

std::vector<MegatronBucketSlot> megatron_bucket_layout(const std::vector<std::string>& ordered,
                                                       const std::vector<int64_t>& numels,
                                                       const std::vector<int64_t>& bucket_numel_unpadded) {
  STRATA_INTERNAL_ASSERT(ordered.size() == numels.size());
  std::vector<MegatronBucketSlot> out;
  int64_t bucket = 0, pos = 0;
  for (size_t k = ordered.size(); k-- > 0;) {  // params[::-1]
    STRATA_CHECK(bucket < static_cast<int64_t>(bucket_numel_unpadded.size()), "checkpoint: the distributed "
                 "optimizer's buckets (", bucket_numel_unpadded.size(), ") end before parameter '", ordered[k], "'");
    const int64_t start = (pos + 63) / 64 * 64;  // _pad_start_of_param_if_needed
    out.push_back({ordered[k], bucket, start, numels[k]});
    pos = start + numels[k];
    if (pos >= bucket_numel_unpadded[static_cast<size_t>(bucket)]) {
      STRATA_CHECK(pos == bucket_numel_unpadded[static_cast<size_t>(bucket)], "checkpoint: the distributed optimizer's ",
                   "bucket ", bucket, " holds ", bucket_numel_unpadded[static_cast<size_t>(bucket)],
                   " elements, but its parameters end at ", pos, " (another model, or another buffer order)");
      ++bucket;
      pos = 0;
    }
  }
  STRATA_CHECK(bucket == static_cast<int64_t>(bucket_numel_unpadded.size()) && pos == 0, "checkpoint: the ",
               "distributed optimizer's ", bucket_numel_unpadded.size(), " bucket(s) do not match the model's parameters");
  return out;
}

}  // namespace strata
