// Megatron torch_dist items into Strata's tensor table (see megatron_tensor_table.h).
#include "training/checkpointing/megatron/megatron_tensor_table.h"

#include <cctype>

#include "core/formats/mapped_file.h"

namespace strata {

bool split_stacked_layer_key(const std::string& key, std::string& prefix, std::string& rest) {
  const std::string marker = "decoder.layers.";
  if (key.rfind(marker, 0) != 0) return false;
  if (key.size() > marker.size() && std::isdigit(static_cast<unsigned char>(key[marker.size()]))) return false;
  prefix = marker;
  rest = key.substr(marker.size());
  return true;
}

namespace {

// Megatron's expert stacking (SequentialMLP and TEGroupedMLP share it): `…mlp.experts.experts.<leaf>`
// with an expert dimension; Strata names expert e `…mlp.experts.<leaf><e>` (TEGroupedMLP's names).
const std::string kExpertMarker = "mlp.experts.experts.";

}  // namespace

void add_megatron_tensor(StoredTensorTable& table, const std::string& model_key, const std::string& table_prefix,
                         const std::string& dcp_fqn, const formats::DcpItem& item, const MegatronChunkFetch& chunk) {
  // The stacked axes, outermost first: the decoder's layers, then the experts.
  std::string stacked, rest = model_key;
  const bool layers = split_stacked_layer_key(model_key, stacked, rest);
  const size_t ex = rest.find(kExpertMarker);
  const bool experts = ex != std::string::npos;
  const int axes = (layers ? 1 : 0) + (experts ? 1 : 0);
  STRATA_IO_CHECK(static_cast<int>(item.shape.size()) >= axes, dcp_fqn, " has ", item.shape.size(),
                  " dimensions, fewer than its stacked axes");
  auto name_of = [&](int64_t layer, int64_t expert) {
    std::string r = rest;
    if (experts) r = rest.substr(0, ex) + "mlp.experts." + rest.substr(ex + kExpertMarker.size()) + std::to_string(expert);
    return table_prefix + (layers ? stacked + std::to_string(layer) + "." : std::string()) + r;
  };
  const std::vector<int64_t> inner(item.shape.begin() + axes, item.shape.end());
  for (size_t i = 0; i < item.chunks.size(); ++i) {
    const formats::DcpChunk& c = item.chunks[i];
    const int64_t nl = layers ? c.sizes[0] : 1, ne = experts ? c.sizes[layers ? 1 : 0] : 1;
    for (int64_t j = 0; j < nl; ++j)
      for (int64_t k = 0; k < ne; ++k) {
        const int64_t layer = layers ? c.offsets[0] + j : 0, expert = experts ? c.offsets[layers ? 1 : 0] + k : 0;
        StoredTensor& e = table[name_of(layer, expert)];
        e.shape = inner;
        e.pieces.push_back({dcp_fqn, "chunk " + std::to_string(i),
                            {std::vector<int64_t>(c.offsets.begin() + axes, c.offsets.end()),
                             std::vector<int64_t>(c.sizes.begin() + axes, c.sizes.end())},
                            [chunk, dcp_fqn, i, j, k, layers, experts] {
                              Tensor t = chunk(dcp_fqn, i);
                              if (layers) t = t.select(0, j);
                              if (experts) t = t.select(0, k);
                              return t.contiguous();
                            }});
      }
  }
}

MegatronKeyPlace megatron_key_of(const std::string& strata_name) {
  MegatronKeyPlace out;
  std::string rest = strata_name, prefix;
  const std::string marker = "decoder.layers.";
  if (strata_name.rfind(marker, 0) == 0) {
    size_t j = marker.size();
    while (j < strata_name.size() && std::isdigit(static_cast<unsigned char>(strata_name[j]))) ++j;
    if (j > marker.size() && j < strata_name.size() && strata_name[j] == '.') {
      out.layer = std::stoll(strata_name.substr(marker.size(), j - marker.size()));
      prefix = marker;
      rest = strata_name.substr(j + 1);
    }
  }
  // Experts: `…mlp.experts.linear_fc<d>.<weight|bias><e>`.
  const std::string ex = "mlp.experts.linear_fc";
  const size_t at = rest.find(ex);
  if (at != std::string::npos) {
    size_t k = rest.size();
    while (k > 0 && std::isdigit(static_cast<unsigned char>(rest[k - 1]))) --k;
    const std::string leaf = rest.substr(at + 12, k - at - 12);  // "linear_fc1.weight"
    if (k < rest.size() && (leaf.size() > 7 && (leaf.compare(leaf.size() - 7, 7, ".weight") == 0 ||
                                                leaf.compare(leaf.size() - 5, 5, ".bias") == 0))) {
      out.expert = std::stoll(rest.substr(k));
      rest = rest.substr(0, at) + kExpertMarker + leaf;
    }
  }
  out.key = prefix + rest;
  return out;
}

}  // namespace strata
