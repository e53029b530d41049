// Two probes the recompute, memory-plan and observation tests share: the CPU allocator's peak
// bytes over one training forward + backward of one micro-batch (the number strata plan's
// activation estimates are checked against), and an observer that counts each site's
// observations (owner/name) to show that nothing fires twice under activation recompute.
#pragma once
#include <cstdint>
#include <map>
#include <string>

#include "core/allocator.h"
#include "core/observe.h"
#include "test_helpers.h"
#include "training/config.h"
#include "training/model_factory.h"

namespace strata::test {

// Peak allocated bytes above the starting point of one micro-batch's training forward and
// backward (every loss with gradient 1) of the config's model on the CPU, initialised with seed 7.
inline int64_t peak_training_bytes(const StrataConfig& cfg, int64_t vocab) {
  auto model = make_model(cfg, Device::cpu());
  model->init_parameters(7);
  Batch batch = fixed_batch(cfg.training.micro_batch_size, cfg.model.seq_length, vocab);
  auto ctx = model->make_context(1, 0, true);
  reset_peak_memory_stats(Device::cpu());
  const int64_t base = memory_stats(Device::cpu()).allocated_bytes;
  ForwardOutput out = model->forward_pass(*ctx, batch);
  BackwardInput in;
  for (const NamedLoss& l : out.losses) in.loss_grads.push_back(Tensor::full(l.value.shape(), 1.0, l.value.dtype()));
  model->backward_pass(*ctx, in);
  return memory_stats(Device::cpu()).max_allocated_bytes - base;
}

// Counts observations per "owner/name".
class CountingObserver : public Observer {
 public:
  void on_tensor(const Observation& o) override { ++counts[std::string(o.owner) + "/" + std::string(o.name)]; }
  std::map<std::string, int> counts;
};

}  // namespace strata::test
