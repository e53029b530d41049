// The MoE router tracer (Megatron's RouterTracer, PR #5220): a StepObserver that writes one JSONL
// record per router forward (the tokens' top-k expert ids) with optional bf16 sidecars of the
// router inputs and raw logits and a dump of the router weights, per rank, in Megatron's schema so
// Megatron's tools/moe_routing scripts (and scripts/moe_routing) read it.
// Reference: megatron/core/transformer/moe/router_trace.py; megatron/training/training.py.
// Details (files, record keys, sidecars, router state, differences from the reference):
// docs/router_trace.md.
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/formats/mapped_file.h"
#include "models/language_model.h"
#include "training/config/config.h"
#include "training/observability/run_observers.h"

namespace strata {

struct RouterTracerOptions {
  std::string dir;
  int rank = 0;                                 // global rank (file names, records)
  int64_t max_training_iters = 1;               // traced training iterations
  int64_t max_inference_steps = 1000000000;     // traced generation forwards
  bool capture_logits = false;
  bool capture_hidden_states = false;
  bool dump_weights = false;
  // From a validated config's logging section (moe_routing_trace_path must be set).
  static RouterTracerOptions from_config(const ResolvedConfig& cfg, int rank);
};

// Files (router_trace_rank<R>.jsonl, hidden_states_rank<R>.bin, logits_rank<R>.bin,
// router_state_rank<R>.safetensors) are truncated when the tracer starts; lines are formatted as
// Python's json.dumps. step is the 0-based training iteration (evaluation: the current one;
// generation: the traced forward's counter). The limits count traced iterations / forwards, after
// which the tracer detaches (kinds_for returns nothing). Records are buffered and written (sidecar
// bytes before the lines that point at them, only whole lines) at every end_step and finish().
class RouterTracer : public StepObserver {
 public:
  // routers: every local router, decoder and MTP (LanguageModel::moe_routers() of each chunk).
  // Creates the directory and this rank's files (empty).
  // weight_names: each router's weight by canonical parameter name (CanonicalParameterNameMap),
  // by router owner ("decoder.layers.3.mlp.router"), written to the router state's metadata;
  // empty: not written.
  RouterTracer(RouterTracerOptions options, std::vector<MoeRouterRef> routers,
               std::map<std::string, std::string> weight_names = {});
  ~RouterTracer() override;  // finish()

  SourceKinds kinds_for(const ObservationContext& c) override;
  void on_tensor(const Observation& o) override;
  void end_step(const ObservationContext& c) override;
  void finish() override;

  bool detached() const { return detached_; }
  int64_t traced_training_iters() const { return traced_train_; }
  int64_t traced_inference_steps() const { return traced_generate_; }
  const std::string& jsonl_path() const { return jsonl_path_; }

 private:
  struct Pending;  // one router forward being assembled (router_tracer.cpp)
  void emit(const Observation& kept);
  bool logits_from_input(const Observation& input, Pending& p);
  void snapshot_weights(const std::string& owner);
  void flush();
  void write_weights();

  RouterTracerOptions o_;
  std::map<std::string, layers::moe::TopKRouter*> routers_;  // by owner
  std::map<std::string, std::string> weight_names_;          // canonical names of their weights, by owner
  std::string jsonl_path_;
  std::unique_ptr<formats::AppendFile> jsonl_, hs_, logits_;
  std::string jsonl_buf_, hs_buf_, logits_buf_;
  int64_t hs_offset_ = 0, logits_offset_ = 0;  // bytes of each sidecar, written + buffered
  std::unique_ptr<Pending> pending_;
  std::map<std::string, Tensor> weights_;  // dump_weights: the safetensors tensors
  std::map<std::string, std::string> weight_meta_;
  bool weights_dirty_ = false;
  int64_t traced_train_ = 0, traced_generate_ = 0;
  bool detached_ = false;
};

// The tracer of a run when logging.moe_routing_trace_path is set (null otherwise), over the
// routers of every chunk; ep_rank / ep_size: this rank's expert-parallel position (the
// canonical parameter names).
std::unique_ptr<RouterTracer> make_router_tracer(const ResolvedConfig& cfg, const std::vector<LanguageModel*>& chunks,
                                                 int rank, int ep_rank = 0, int ep_size = 1);

}  // namespace strata
