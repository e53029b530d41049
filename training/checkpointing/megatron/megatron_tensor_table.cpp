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

void add_megatron_tensor(StoredTensorTable& table, const std::string& model_key, const std::string& table_prefix,
                         const std::string& dcp_fqn, const formats::DcpItem& item, const MegatronChunkFetch& chunk) {
  std::string stacked, rest;
  if (!split_stacked_layer_key(model_key, stacked, rest)) {
    StoredTensor& e = table[table_prefix + model_key];
    e.shape = item.shape;
    for (size_t i = 0; i < item.chunks.size(); ++i)
      e.pieces.push_back({dcp_fqn, "chunk " + std::to_string(i), {item.chunks[i].offsets, item.chunks[i].sizes},
                          [chunk, dcp_fqn, i] { return chunk(dcp_fqn, i); }});
    return;
  }
  STRATA_IO_CHECK(!item.shape.empty(), dcp_fqn, "a stacked layer tensor without a layer dimension");
  const std::vector<int64_t> layer_shape(item.shape.begin() + 1, item.shape.end());
  for (size_t i = 0; i < item.chunks.size(); ++i) {
    const formats::DcpChunk& c = item.chunks[i];
    for (int64_t j = 0; j < c.sizes[0]; ++j) {
      const int64_t layer = c.offsets[0] + j;
      StoredTensor& e = table[table_prefix + stacked + std::to_string(layer) + "." + rest];
      e.shape = layer_shape;
      e.pieces.push_back({dcp_fqn, "chunk " + std::to_string(i) + " layer " + std::to_string(layer),
                          {std::vector<int64_t>(c.offsets.begin() + 1, c.offsets.end()),
                           std::vector<int64_t>(c.sizes.begin() + 1, c.sizes.end())},
                          [chunk, dcp_fqn, i, j] { return chunk(dcp_fqn, i).select(0, j).contiguous(); }});
    }
  }
}

}  // namespace strata
