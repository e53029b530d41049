// Probes the recompute, memory-plan and observation tests share: two micro-batches' losses and
// gradients with interleaved saved state (what recompute must reproduce bit for bit), the CPU
// allocator's peak bytes over one training forward + backward of one micro-batch (the number
// strata plan's activation estimates are checked against), and an observer that counts each
// site's observations (owner/name) to show that nothing fires twice under activation recompute.
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/allocator.h"
#include "core/observe.h"
#include "test_helpers.h"
#include "training/config/config.h"
#include "models/layers/moe/router.h"
#include "training/config/model_factory.h"

namespace strata::test {

// Every loss value of two micro-batches and every parameter's gradient, after forwards f0 f1 and
// backwards b0 b1 (each micro-batch's saved state lives across the other's passes); per-token
// loss gradients random in [0.5, 1.5], scalar ones 0.7.
struct TwoMicroBatchPass {
  std::vector<std::vector<double>> losses, grads;  // grads: then each MoE router's token counts
};

inline TwoMicroBatchPass two_micro_batch_pass(const ResolvedConfig& cfg, int64_t vocab) {
  auto model = make_model(cfg, Device::cpu());  // GPT, or the HybridModel of a hybrid pattern
  model->init_parameters(7);
  for (Parameter* p : model->parameters()) p->main_grad.zero_();
  TwoMicroBatchPass r;
  std::vector<std::unique_ptr<ForwardContext>> ctx;
  std::vector<ForwardOutput> outs;
  for (int64_t mb = 0; mb < 2; ++mb) {
    ctx.push_back(model->make_context(1, mb, true));
    outs.push_back(model->forward_pass(*ctx.back(), fixed_batch(2, cfg.model->seq_length, vocab)));
    for (const NamedLoss& l : outs.back().losses) r.losses.push_back(l.value.to_vector());
  }
  for (int64_t mb = 0; mb < 2; ++mb) {
    BackwardInput in;
    for (const NamedLoss& l : outs[static_cast<size_t>(mb)].losses)
      in.loss_grads.push_back(l.reduction == LossReduction::PerToken
                                  ? random_tensor(l.value.shape(), 11 + static_cast<uint64_t>(mb), 0.5, 1.5)
                                  : Tensor::full({1}, 0.7, DType::F64));
    model->backward_pass(*ctx[static_cast<size_t>(mb)], in);
  }
  for (Parameter* p : model->parameters()) r.grads.push_back(p->main_grad.to_vector());
  // The routers' token counts (expert-bias update, load statistics): added once per forward.
  for (const MoeRouterRef& ref : model->moe_routers())
    r.grads.push_back(ref.router->local_tokens_per_expert().to_vector());
  return r;
}

// Peak allocated bytes above the starting point of one micro-batch's training forward and
// backward (every loss with gradient 1) of the config's model on the CPU, initialised with seed 7.
inline int64_t peak_training_bytes(const ResolvedConfig& cfg, int64_t vocab) {
  auto model = make_model(cfg, Device::cpu());
  model->init_parameters(7);
  Batch batch = fixed_batch(cfg.training->micro_batch_size, cfg.model->seq_length, vocab);
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

// owner/name → how often it was observed over two_micro_batch_pass(cfg, vocab) (every source kind).
inline std::map<std::string, int> two_micro_batch_observations(const ResolvedConfig& cfg, int64_t vocab) {
  CountingObserver obs;
  CaptureScope scope(obs, SourceKinds::all());
  two_micro_batch_pass(cfg, vocab);
  return obs.counts;
}

}  // namespace strata::test
