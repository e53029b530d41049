// MtpBlock: DeepSeek-V3 multi-token prediction modules (Megatron-Core MultiTokenPredictionBlock,
// without mHC), run by the language-model shell on the last pipeline stage after the decoder's
// final norm. Depth k = 1..D takes h^{k−1} (h^0: the decoder output after its final norm) and the
// input ids rolled left k times (the last k positions filled with id 0):
//   e   = dropout(embedding(rolled ids))         the model's word-embedding table (shared)
//   h'  = eh_proj(cat([enorm(e), hnorm(h^{k−1})]))   order [embedding; hidden], 2C → C, no bias
//   h^k = final_layernorm(mtp_model_layer(h'))
// The inner model layer is a Block built by the model (MtpLayerFactory): GPT — a one-layer
// TransformerBlock with the decoder's last layer spec, named mtp.layers.{k−1}.transformer_layer;
// hybrid — a nested HybridStack of the '/' pattern's symbols (any of M * - E, no final norm of its
// own), its layers named mtp.layers.{k−1}.mtp_model_layer.layers.{j}. The inner layers take global
// layer numbers after the decoder's (num_layers + (k−1)·P + j, P layers per depth; dropout keys,
// router layer numbers); their residual sites fire once per application (the block loop).
// h^k feeds the output head (the shell: logits with the shared output weight, per-token loss) and
// depth k+1. Rotary embeddings are not rolled (the layer sees positions 0..s−1 as the decoder).
// Parameters: mtp.layers.{k−1}.{enorm,hnorm,final_layernorm}.weight (+ .bias for LayerNorm),
// mtp.layers.{k−1}.eh_proj.weight [C, 2C] (column-parallel over tp), and the inner block's; with
// mtp_use_repeated_layer one module mtp.layers.0 is applied D times. mtp_detach_heads: the block
// neither sends a gradient to h^0 nor to the word embeddings (the shell also leaves the output
// weight out of the MTP heads' backward).
// Full recompute (recompute_granularity full, method uniform; Megatron's
// MultiTokenPredictionLayer._checkpointed_forward): each depth's eh_proj → inner block → final
// norm is one checkpoint — its forward keeps only e, h^{k−1} and the keys, the backward replays it
// with the same dropout keys (observation suspended, router side effects skipped, the auxiliary
// losses' gradients routed back; models/blocks/recompute.h). Method block does not recompute the
// MTP depths (Megatron skips them). Selective recompute applies inside the inner layers as in the
// decoder.
// Tensor/sequence parallelism: eh_proj is column-parallel (sequence parallel: the input gathered
// along the sequence), its output gathered over tp and, under sequence parallelism, scattered
// back to this rank's rows; the embedding is vocab-parallel as VocabEmbedding's.
// mHC (model.enable_hyper_connections; Megatron dev's mHC MTP, spec §4.3): h^0 is the decoder's
// PRE-contraction n-stream [s(/tp), b, n·C] and each depth's raw n-stream output chains to the next;
//   h'  = e_proj(enorm(e))[:, :, None, :] + h_proj(hnorm(h^{k−1} as [s, b, n, C]))   → [s, b, n·C]
//         (e_proj, h_proj: column-parallel C → C, no bias; hnorm and h_proj shared across streams)
//   x^k = mtp_model_layer(h')                    mHC layers on the n-stream input (raw; feeds k+1)
//   h^k = final_layernorm(contract(x^k))         own head mtp.layers.{k−1}.hc_head_{fn,base,scale}
//                                                (or the mean with mhc_learned_output_contract false)
// Full recompute checkpoints e_proj/h_proj → inner block (the contraction and norm stay outside,
// as Megatron's _proj_and_transformer_layer).
// Reference: megatron/core/transformer/multi_token_prediction.py (MultiTokenPredictionLayer:
// __init__ (hybrid path: HybridStack with post_layer_norm false; GPT path: TransformerLayer),
// _get_embeddings, _concat_embeddings, _proj_and_transformer_layer, _postprocess,
// _checkpointed_forward; MultiTokenPredictionBlock.forward, _build_layers, sharded_state_dict).
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
#include "models/model_config.h"
#include "parallel/process_group.h"

namespace strata {

// Builds the inner model layer of MTP module `module` (0-based; one module with the repeated
// layer). cfg: the model section with full recompute removed (the MTP block checkpoints the depth).
using MtpLayerFactory = std::function<std::unique_ptr<Block>(const ModelConfig& cfg, const layers::LayerEnv& env,
                                                             const ParallelGroups& groups, int64_t module)>;

class MtpBlock {
 public:
  // One micro-batch's saved activations of every depth.
  struct State {
    virtual ~State() = default;
  };
  // cfg.mtp_num_layers set; make_layer: the model's inner layer of each module.
  MtpBlock(const ModelConfig& cfg, const layers::LayerEnv& env, const ParallelGroups& groups,
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
