// The MoE router tracer (Megatron's RouterTracer, PR #5220; spec §5.1–§5.4): a StepObserver that
// writes one JSONL record per router forward — the tokens' top-k expert ids — with optional bf16
// sidecars of the router inputs and raw logits and a dump of the router weights, per rank, in
// Megatron's schema so Megatron's tools/moe_routing scripts (and scripts/moe_routing) read it.
// Files in the trace directory (truncated when the tracer starts):
//   router_trace_rank<R>.jsonl         one line per router forward, keys in Megatron's order:
//     step, stage "pre_dispatch", block, layer, rank, num_tokens, topk, [mtp_idx: MTP only],
//     [hs_offset, hs_bytes, hs_shape], [logit_offset, logit_bytes, logit_shape], top_indices [T][k]
//     (descending selection score), then Strata's micro_batch, phase ("train" | "eval"; absent in
//     generation) and dropped ([[t, e], …]: pairs capacity dropped; only when there are some —
//     top_indices keeps the pre-drop selection). Formatting as Python's json.dumps.
//   hidden_states_rank<R>.bin, logits_rank<R>.bin   raw little-endian bf16 [T, H] / [T, E] at the
//     recorded byte offsets, no header (capture_hidden_states / capture_logits).
//   router_state_rank<R>.safetensors   (dump_weights) "<block>.<mtp_idx or ''>.<layer>.weight"
//     [E, H] f32, ".expert_bias" [E] f32 when the router has one; metadata ".score_function",
//     ".topk" (and ".num_groups", ".group_topk" with group-limited routing); taken at each
//     layer's first traced forward, like Megatron.
// Differences from the reference: `layer` is the global 0-based layer (equal to Megatron's at
// PP = 1); step is the 0-based training iteration (evaluation: the current one; generation: the
// traced forward's counter); the limits count traced iterations / forwards, after which the
// tracer detaches (kinds_for returns nothing); records are buffered and written — sidecar bytes
// before the lines that point at them — at every end_step and finish(), only whole lines.
// Reference: megatron/core/transformer/moe/router_trace.py; megatron/training/training.py.
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/formats/mapped_file.h"
#include "models/language_model.h"
#include "training/config.h"
#include "training/run_observers.h"

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
  static RouterTracerOptions from_config(const StrataConfig& cfg, int rank);
};

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
std::unique_ptr<RouterTracer> make_router_tracer(const StrataConfig& cfg, const std::vector<LanguageModel*>& chunks,
                                                 int rank, int ep_rank = 0, int ep_size = 1);

}  // namespace strata
