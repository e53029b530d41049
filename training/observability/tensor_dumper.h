// The tensor dumper (issue 12; config logging.tensor_dump_sites / tensor_dump_iters /
// tensor_dump_dir): a StepObserver (training/observability/run_observers.h) that copies the observed tensors
// whose site name "<owner>.<name>" matches one of the glob patterns (training/observability/tensor_dump_sites.h)
// in the chosen 0-based iterations, and writes them at end_step to
//   <dir>/iter_<7 digits>/rank_<4 digits>.safetensors
// (core/formats/safetensors.h: atomic, tmp + rename; an existing file is replaced). An
// iteration's evaluation steps run before its training step: the file is rewritten after each of
// them with everything of that iteration so far, and freed after the training step. Keys:
//   "<site>/mb<micro_batch>" for training forwards, "eval/<site>/mb<n>" for the evaluation run
//   at that iteration (n counts its forwards over all eval_iters steps: step k's micro-batch m is
//   n = k × micro-batches + m); both + "/chunk<c>" under virtual pipelining.
// Tensors keep their observed dtype and shape (bf16 stays bf16), copied to the CPU during the
// callback. Metadata: per key a JSON object {"owner", "name", "kind", "tp_shard_dim",
// "sequence_dim", "batch_dim", "phase", "micro_batch", "model_chunk"} (dims null when absent), and
// "iteration", "rank", "format" = "strata.tensor_dump.v1". Only the kinds some pattern can match
// are requested, so a derived tensor (residual_contribution, router_scores) is computed only when
// a pattern asks for it, and only in the chosen iterations. Generation forwards are not dumped.
// Reference: megatron/core/tensor_observation.py (site names); a debugging aid of our own.
#pragma once
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "training/observability/run_observers.h"

namespace strata {

class ResolvedConfig;

struct TensorDumpOptions {
  std::vector<std::string> patterns;  // glob patterns over "<owner>.<name>"
  std::vector<int64_t> iterations;    // 0-based
  SourceKinds kinds;                  // what the patterns can match (site_kinds)
  std::string dir;
  int rank = 0;                       // the global rank (file name)
  bool chunk_keys = false;            // add "/chunk<c>" (virtual pipelining)
};

class TensorDumper : public StepObserver {
 public:
  explicit TensorDumper(TensorDumpOptions o);
  // From logging.tensor_dump_* (validated); null when tensor_dump_sites is empty. Creates the
  // directory (before training starts: an unwritable path fails first).
  static std::unique_ptr<TensorDumper> from_config(const ResolvedConfig& c, int rank);

  SourceKinds kinds_for(const ObservationContext& c) override;
  void on_tensor(const Observation& o) override;
  void end_step(const ObservationContext& c) override;
  void finish() override;

  const std::vector<std::string>& written() const { return written_; }  // files, in write order

 private:
  std::string key_for(const Observation& o, const ObservationContext& c) const;
  TensorDumpOptions opt_;
  std::set<int64_t> due_;
  int64_t current_ = -1;  // the iteration whose tensors are pending
  int64_t eval_offset_ = 0, eval_forwards_ = 0;
  std::map<std::string, Tensor> tensors_;
  std::map<std::string, std::string> metadata_;
  std::vector<std::string> written_;
};

}  // namespace strata
