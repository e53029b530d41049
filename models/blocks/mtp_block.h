// MtpBlock: DeepSeek-V3 multi-token prediction modules (Megatron-Core MultiTokenPredictionBlock,
// GPT variant, without mHC), run by the language-model shell on the last pipeline stage after the
// decoder's final norm. Depth k = 1..D takes h^{k−1} (h^0: the decoder output after its final norm)
// and the input ids rolled left k times (the last k positions filled with id 0):
//   e   = dropout(embedding(rolled ids))         the model's word-embedding table (shared)
//   h'  = eh_proj(cat([enorm(e), hnorm(h^{k−1})]))   order [embedding; hidden], 2C → C, no bias
//   h^k = final_layernorm(transformer_layer(h'))  a layer with the decoder's last layer spec
// h^k feeds the output head (the shell: logits with the shared output weight, per-token loss) and
// depth k+1. Rotary embeddings are not rolled (the layer sees positions 0..s−1 as the decoder).
// Parameters: mtp.layers.{k−1}.{enorm,hnorm,final_layernorm}.weight (+ .bias for LayerNorm),
// mtp.layers.{k−1}.eh_proj.weight [C, 2C] (column-parallel over tp), and
// mtp.layers.{k−1}.transformer_layer.…; with mtp_use_repeated_layer one module mtp.layers.0 is
// applied D times. mtp_detach_heads: the block neither sends a gradient to h^0 nor to the word
// embeddings (the shell also leaves the output weight out of the MTP heads' backward).
// Tensor/sequence parallelism: eh_proj is column-parallel (sequence parallel: the input gathered
// along the sequence), its output gathered over tp and, under sequence parallelism, scattered
// back to this rank's rows; the embedding is vocab-parallel as VocabEmbedding's.
// Reference: megatron/core/transformer/multi_token_prediction.py (MultiTokenPredictionLayer:
// _get_embeddings, _concat_embeddings, _proj_and_transformer_layer, _postprocess;
// MultiTokenPredictionBlock.forward, _build_layers, sharded_state_dict's transformer_layer names).
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "models/blocks/block.h"
#include "models/layers/layer_spec.h"
#include "models/layers/linear.h"
#include "models/layers/norm.h"
#include "models/layers/transformer_layer.h"
#include "models/model_config.h"
#include "parallel/process_group.h"

namespace strata {

class MtpBlock {
 public:
  // One micro-batch's saved activations of every depth.
  struct State {
    virtual ~State() = default;
  };
  // spec: the decoder's last layer spec (MoE slot if that layer is MoE). cfg.mtp_num_layers set.
  MtpBlock(const ModelConfig& cfg, const layers::LayerEnv& env, const ParallelGroups& groups,
           const layers::TransformerLayerSpec& spec);
  ~MtpBlock();

  int64_t depths() const { return depths_; }
  bool detach_heads() const { return detach_; }
  // h0: the decoder output after its final norm [s(/tp), b, C]; tokens: [b, s] i64 (host);
  // word_embeddings: the model's table (this rank's vocabulary rows from vocab_start).
  // Returns h^1 … h^D, each like h0.
  std::vector<Tensor> forward(const Tensor& h0, const Tensor& tokens, const Parameter& word_embeddings,
                              int64_t vocab_start, const BlockRun& run, std::unique_ptr<State>* saved);
  // dh: d(h^k) from the output heads, k = 1..D. Adds the modules' gradients (and, unless
  // detach_heads, the word-embedding gradients into word_embeddings.main_grad) -> d(h0)
  // (undefined with detach_heads). Reports the modules' parameters through grads_ready.
  Tensor backward(State& saved, const std::vector<Tensor>& dh, Parameter& word_embeddings,
                  const GradsReadyFn* grads_ready);
  void collect(std::vector<Parameter*>& out);

 private:
  struct Module {
    std::unique_ptr<layers::Norm> enorm, hnorm, final_layernorm;
    std::unique_ptr<layers::Linear> eh_proj;
    std::unique_ptr<layers::TransformerLayer> layer;
  };
  struct DepthState;
  struct Saved;
  Module& module(int64_t k) { return modules_.at(repeated_ ? 0 : static_cast<size_t>(k)); }
  Tensor embed(const Tensor& ids, const Parameter& w, int64_t vocab_start, const layers::DropoutKeys& keys,
               int64_t s, int64_t b, DepthState* sv) const;
  Tensor project(Module& m, const Tensor& e, const Tensor& h, DepthState* sv) const;
  // d(eh_proj output) [s(/tp), b, C] -> (d e, d h) through eh_proj, enorm and hnorm.
  std::pair<Tensor, Tensor> project_backward(Module& m, DepthState& sv, const Tensor& dy);
  void embed_backward(const DepthState& sv, const Tensor& de, Parameter& w) const;

  int64_t depths_ = 0, hidden_ = 0, first_index_ = 0;
  bool repeated_ = false, detach_ = false, sequence_parallel_ = false;
  double hidden_dropout_ = 0.0;
  ProcessGroup tp_;
  std::vector<Module> modules_;
};

}  // namespace strata
