// MtpBlock: DeepSeek-V3 multi-token prediction modules (Megatron-Core MultiTokenPredictionBlock),
// run by the language-model shell on the last pipeline stage after the decoder's final norm: depth
// k maps h^{k−1} and the input ids rolled left k times to h^k, the input of its own loss head.
// Reference: megatron/core/transformer/multi_token_prediction.py (MultiTokenPredictionLayer:
// __init__, _get_embeddings, _concat_embeddings, _proj_and_transformer_layer, _postprocess,
// _checkpointed_forward; MultiTokenPredictionBlock.forward, _build_layers, sharded_state_dict).
// Details (formulas, mHC variant, parameter names, recompute, tp/sp, MoE layers): docs/mtp.md.
#pragma once
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "models/blocks/block.h"
#include "models/blocks/recompute.h"
#include "models/layers/hyper_connection.h"
#include "models/layers/linear.h"
#include "models/layers/norm.h"
#include "models/config/model_config.h"
#include "parallel/process_group.h"

namespace strata {

// Builds the inner model layer of MTP module `module` (0-based; one module with the repeated
// layer): a LayerStack (models/config/model_stacks.h mtp_stack_specs) — GPT one layer of the decoder's
// last layer kind; hybrid the '/' pattern's symbols (post_layer_norm false). Its layers take global layer
// numbers after the decoder's, num_layers + (k−1)·P + j with P layers per depth. The factory builds
// a stack without full recompute of its own (LayerStack full_recompute false): the MTP block
// checkpoints the depth.
using MtpLayerFactory = std::function<std::unique_ptr<Block>(const ResolvedModelConfig& cfg, const layers::LayerEnv& env,
                                                             const ParallelGroups& groups, int64_t module)>;

// Depth k = 1..D (h^0: the decoder output after its final norm; rotary embeddings not rolled):
//   e   = dropout(embedding(ids rolled left k, last k positions id 0))   the shared word embeddings
//   h'  = eh_proj(cat([enorm(e), hnorm(h^{k−1})]))   order [embedding; hidden], 2C → C, no bias
//   h^k = final_layernorm(mtp_model_layer(h'))
// eh_proj [C, 2C] is column-parallel over tp (sequence parallel: input gathered, output scattered).
// mHC: h' = e_proj(enorm(e))[:, :, None, :] + h_proj(hnorm(h^{k−1} as [s, b, n, C])), the raw
// n-stream output x^k feeds depth k+1 and h^k = final_layernorm(contract(x^k)) (the depth's head).
// Full recompute (method uniform): each depth is one checkpoint keeping only e, h^{k−1} and the
// dropout keys (models/blocks/recompute.h); method block does not recompute the depths.
class MtpBlock {
 public:
  // One micro-batch's saved activations of every depth.
  struct State {
    virtual ~State() = default;
  };
  // cfg->mtp_num_layers set; make_layer: the model's inner layer of each module.
  MtpBlock(const ResolvedModelConfig& cfg, const layers::LayerEnv& env, const ParallelGroups& groups,
           const MtpLayerFactory& make_layer);
  ~MtpBlock();

  int64_t depths() const { return depths_; }
  bool detach_heads() const { return detach_; }
  // h0: the decoder output after its final norm [s(/tp), b, C] (mHC: before the contraction,
  // [s(/tp), b, n·C]); tokens: [b, s] i64 (host);
  // word_embeddings: the model's table (this rank's vocabulary rows from vocab_start).
  // Returns h^1 … h^D, each [s(/tp), b, C] (the loss heads' inputs).
  std::vector<Tensor> forward(const Tensor& h0, const Tensor& tokens, const Parameter& word_embeddings,
                              int64_t vocab_start, const BlockRun& run, std::unique_ptr<State>* saved);
  // dh: d(h^k) from the output heads, k = 1..D. Adds the modules' gradients (and, unless
  // detach_heads, the word-embedding gradients into word_embeddings.main_grad) -> d(h0) (like h0)
  // (undefined with detach_heads). Reports the modules' parameters through grads_ready.
  Tensor backward(State& saved, const std::vector<Tensor>& dh, Parameter& word_embeddings,
                  const GradsReadyFn* grads_ready);
  void collect(std::vector<Parameter*>& out);
  // The MoE routers of the inner layers (their global layer numbers), module by module.
  std::vector<MoeRouterRef> moe_routers();
  // After the optimizer step: the inner layers' per-step state restarts.
  void end_of_step();
  // Depth k's inner block (0-based; the one module with the repeated layer).
  Block& model_layer(int64_t k) { return *module(k).layer; }

 private:
  struct Module {
    std::unique_ptr<layers::Norm> enorm, hnorm, final_layernorm;
    std::unique_ptr<layers::Linear> eh_proj;          // without mHC
    std::unique_ptr<layers::Linear> e_proj, h_proj;   // mHC
    std::unique_ptr<layers::HyperConnectionHead> head;  // mHC: the depth's contraction
    std::unique_ptr<Block> layer;  // mtp_model_layer (GPT: transformer_layer)
  };
  struct DepthState;
  struct Saved;
  Module& module(int64_t k) { return modules_.at(repeated_ ? 0 : static_cast<size_t>(k)); }
  Tensor embed(const Tensor& ids, const Parameter& w, int64_t vocab_start, const layers::DropoutKeys& keys,
               int64_t s, int64_t b, DepthState* sv) const;
  Tensor project(Module& m, const Tensor& e, const Tensor& h, DepthState* sv) const;
  // d(eh_proj output) [s(/tp), b, C] -> (d e, d h) through eh_proj, enorm and hnorm.
  std::pair<Tensor, Tensor> project_backward(Module& m, DepthState& sv, const Tensor& dy);
  // mHC: e_proj/h_proj of one depth and its backward (d h' [s(/tp), b, n·C] -> (d e, d h^{k−1})).
  Tensor project_mhc(Module& m, const Tensor& e, const Tensor& h, DepthState* sv) const;
  std::pair<Tensor, Tensor> project_mhc_backward(Module& m, DepthState& sv, const Tensor& dy);
  // mHC: contraction + final norm of a depth's raw output, and its backward (-> d x^k).
  Tensor postprocess(Module& m, const Tensor& x, DepthState* sv) const;
  Tensor postprocess_backward(Module& m, DepthState& sv, const Tensor& dy);
  void collect_own(Module& m, std::vector<Parameter*>& out);
  void embed_backward(const DepthState& sv, const Tensor& de, Parameter& w) const;
  // eh_proj → inner block → final norm of one depth (saves into sv when not null).
  Tensor depth_forward(Module& m, const Tensor& e, const Tensor& h, const BlockRun& run, DepthState* sv);
  // Its backward: d(h^k) -> d(h^{k−1}); d(e) into sv.de. grads_ready: the inner block's layers.
  Tensor depth_backward(Module& m, DepthState& sv, const Tensor& dy, const GradsReadyFn* grads_ready);
  // The depth's checkpointed forward / replay (full recompute).
  RecomputeLayerForward depth_replay(Module& m, DepthState& sv, const BlockRun& run);

  int64_t depths_ = 0, hidden_ = 0;
  int64_t streams_ = 1;  // mHC: n (1 without)
  bool mhc_ = false;
  // repeated_: mtp_use_repeated_layer, one module mtp.layers.0 applied D times. detach_:
  // mtp_detach_heads, no gradient to h^0 nor to the word embeddings.
  bool repeated_ = false, detach_ = false, sequence_parallel_ = false;
  bool recompute_ = false;  // full recompute, method uniform: each depth is one checkpoint
  double hidden_dropout_ = 0.0;
  // model.fp32_residual_connection: the inner layer's residual stream is f32 (Megatron's
  // TransformerLayer keeps residual.float() there too); eh_proj and the norms stay in dtype_.
  bool fp32_residual_ = false;
  DType dtype_ = DType::F32;
  ProcessGroup tp_;
  std::vector<Module> modules_;
};

}  // namespace strata
