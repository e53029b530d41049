// The pieces shared by the legacy (`--ckpt-format torch`) reader's model and optimizer halves
// (megatron_legacy_read.cpp, megatron_legacy_optimizer.cpp): an opened rank file, one local tensor
// of a rank (its Strata name and how its shard sits in the global tensor), and how a local
// tensor's data becomes pieces of Strata's table.
// Reference: megatron/core/tensor_parallel/layers.py (partition_dim of ColumnParallelLinear (0),
// RowParallelLinear (1), VocabParallelEmbedding (0)), megatron/core/transformer/mlp.py (a gated
// linear unit's fc1 shard: [gate_r; up_r]).
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/formats/mapped_file.h"
#include "core/formats/torch_archive.h"
#include "training/checkpointing/checkpoint.h"
#include "training/checkpointing/checkpoint_pieces.h"

namespace strata::megatron_legacy {

// A torch.save file, mapped and parsed; tensors are copied out on demand.
struct TorchFile {
  formats::MappedFile file;
  formats::TorchArchive archive;
  explicit TorchFile(const std::string& path);
};

// How a rank's local tensor sits in the global one: split along `dim` (-1: whole) into `parts`,
// this rank's being part `rank`; `gated`: the local rows are [gate part; up part] of a gated
// linear unit whose global rows are [gate; up].
struct ShardSpec {
  int dim = -1;
  int64_t parts = 1, rank = 0;
  bool gated = false;
};

// One tensor of a rank file's state dict.
struct LocalTensor {
  std::string key;    // Megatron's key in the state dict ("model" / "model<v>" entry)
  std::string name;   // Strata's checkpoint name (global layer and expert numbers)
  std::vector<int64_t> shape;  // local shape
  ShardSpec shard;
  bool contributes = true;     // false: a replica another rank file provides (tp/ep rank > 0)
  bool is_parameter = true;    // a parameter (in the optimizer), not a buffer
  formats::PyTensorRef ref;
};

// One rank file with its local tensors (model chunks concatenated, in state-dict order).
struct RankFile {
  std::string path;
  int64_t tp_rank = 0, pp_rank = 0, ep_rank = 0;
  std::shared_ptr<TorchFile> pt;
  formats::PyRef root;
  std::vector<LocalTensor> tensors;
};

// The global shape of a local tensor under its shard spec.
std::vector<int64_t> global_shape(const LocalTensor& t);

// Adds the data `ref` of `pt` (local tensor `t`'s shape) as the pieces of table[table_name].
// `where`: the file and key, for messages.
void add_local_tensor(StoredTensorTable& table, const std::string& table_name, const LocalTensor& t,
                      const std::shared_ptr<TorchFile>& pt, const formats::PyTensorRef& ref, const std::string& where);

// The optimizer states of every rank file (torch's Adam state_dict in `optimizer`, or the
// distributed optimizer's distrib_optim.pt) into table (`optimizer.exp_avg.<name>`, …) and the
// Adam step into state.optimizer_step_count; false when the files hold no optimizer state.
bool read_legacy_optimizer(const std::vector<RankFile>& files, const formats::PyValue& args, StoredTensorTable& table,
                           CheckpointState& state);

}  // namespace strata::megatron_legacy
