// LanguageModelShell: the parts every decoder language model shares, written once (vocab-parallel
// embedding, one Block per pipeline stage / model chunk, final norm, output layer tied to the word
// embeddings unless untied, fused vocab-parallel cross entropy, MTP heads, the stage plumbing)
// behind the LanguageModel interface; a model (GPTModel, HybridModel) is this shell plus its block.
// Reference: Megatron-Core models/common/language_module/language_module.py (LanguageModule:
// setup_embeddings_and_output_layer, compute_language_model_loss), models/gpt/gpt_model.py
// (forward), tensor_parallel/cross_entropy.py; llm.c gpt2_forward/gpt2_backward.
// Details: docs/architecture.md ("models/"); tp, sp, cp: docs/parallelism.md; mHC: docs/mhc.md.
#pragma once
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/observe.h"
#include "models/blocks/block.h"
#include "models/blocks/mtp_block.h"
#include "models/language_model.h"
#include "models/layers/embedding.h"
#include "models/layers/hyper_connection.h"
#include "models/layers/norm.h"
#include "models/config/model_config.h"
#include "parallel/parallel_config.h"
#include "parallel/process_group.h"

namespace strata {

// Precision: f32, or bf16 (bf16 parameter values and activations, f32 main grads, f32 softmax
// statistics and loss); f64 for reference checks (f64 grads and losses).
struct LanguageModelOptions {
  DType dtype = DType::F32;  // F32 | BF16 (precision) | F64 (reference checks)
  Device device = Device::cpu();
  uint64_t seed = 1234;        // keys dropout masks (training.seed)
  int64_t global_batch_size = 0;  // samples per step; 0: the micro-batch is the whole global batch
  // Pipeline stage / model chunk (parallel/pipeline_layout.h): layers [first_layer, first_layer +
  // num_layers) of the global model (num_layers < 0: all of them), the embedding when
  // pre_process, final norm + output layer + loss when post_process. With tied embeddings a
  // post_process chunk without pre_process holds a copy of the word embeddings (Megatron
  // LanguageModule.setup_embeddings_and_output_layer), initialised equal to them.
  int64_t first_layer = 0;
  int64_t num_layers = -1;
  bool pre_process = true;
  bool post_process = true;
  bool sequence_parallel = false;  // parallel.sequence_parallel (needs groups.tp.size() > 1)
  CpCommType cp_comm_type = CpCommType::P2P;  // parallel.cp_comm_type (groups.cp.size() > 1)
};

// What the shell asks the concrete model for: its block for layers [first, first + count), the
// canonical name prefix of the final norm ("decoder.final_layernorm" for GPT), and the names of
// the auxiliary losses its layers add through the loss channel (the whole model's, from the
// config: e.g. MoE's load_balancing_loss), logged after "lm loss".
struct LanguageModelParts {
  std::function<std::unique_ptr<Block>(const ResolvedModelConfig& cfg, const layers::LayerEnv& env,
                                       const ParallelGroups& groups, int64_t first, int64_t count)>
      make_block;
  std::string final_norm_prefix = "decoder.final_layernorm";
  std::string hc_head_prefix = "decoder";  // mHC: the owner of hc_head_* (the block's name)
  std::vector<std::string> aux_loss_names;
  // The inner model layer of each MTP module (model.mtp_num_layers; GPT: a one-layer block with
  // the decoder's last layer kind, hybrid: a LayerStack of the '/' pattern). Unset: the model has
  // no MTP variant.
  MtpLayerFactory make_mtp_layer;
};

class LanguageModelShell : public LanguageModel {
 public:
  // cfg: a resolved model section (vocab_size must be set).
  LanguageModelShell(const ResolvedModelConfig& cfg, const LanguageModelOptions& options, const ParallelGroups& groups,
                     const LanguageModelParts& parts);
  ~LanguageModelShell() override;

  std::vector<Parameter*> parameters() override;
  void init_parameters(uint64_t seed) override;
  std::unique_ptr<ForwardContext> make_context(int64_t step, int64_t micro_batch, bool training) override;
  // batch.tokens, batch.labels: [b, s] i64 -> "lm loss" per-token losses [b, s] (f32; f64 for an
  // f64 model) and the layers' auxiliary losses; a stage before the last: its output [s, b, h].
  // Under cp the batch is this rank's part (chunks r and 2cp−1−r of every sequence) and the losses
  // are those tokens'; positions, dropout masks and attention use global positions.
  ForwardOutput forward_pass(ForwardContext& ctx, const Batch& batch) override;
  void backward_pass(ForwardContext& ctx, const BackwardInput& grads) override;
  std::vector<std::string> loss_names() const override;
  bool is_first_stage() const override { return opt_.pre_process; }
  bool is_last_stage() const override { return opt_.post_process; }
  std::vector<Parameter*> embedding_group_parameters() override;
  ResidualStreamShape residual_stream() const override;
  // The residual stream's dtype: f32 under model.fp32_residual_connection, else the model's.
  DType residual_dtype() const;
  // The embedding output [s, b, h] as the residual stream: f32 under fp32_residual_connection,
  // n copies under mHC (mhc_expand: [s, b, n·h]; pipeline stages then exchange [s/sp, b, n·h]),
  // else itself.
  Tensor residual_from_embedding(const Tensor& x) const;
  void end_of_step() override;
  // The block's routers, then the MTP inner layers' (global layer numbers after the decoder's).
  std::vector<MoeRouterRef> moe_routers() override;

  InferenceCache make_inference_cache(int64_t batch, int64_t max_seq) const override;
  Tensor logits_for(const Tensor& tokens, InferenceCache* cache, int64_t position_offset) override;
  int64_t vocab_size() const override { return *cfg_->vocab_size; }
  int64_t max_positions() const override { return cfg_.max_positions(); }
  Device device() const override { return opt_.device; }
  DType dtype() const override { return opt_.dtype; }

  // A KV cache for generation (make_inference_cache under the name generation used first).
  InferenceCache make_kv_cache(int64_t batch, int64_t max_seq) const { return make_inference_cache(batch, max_seq); }

  const ResolvedModelConfig& config() const { return cfg_; }
  const LanguageModelOptions& options() const { return opt_; }
  int64_t padded_vocab() const { return padded_vocab_; }
  // First global vocabulary row of this rank's output-layer / embedding shard (0 without TP).
  int64_t vocab_start() const { return padded_vocab_ / groups_.tp.size() * groups_.tp.rank(); }
  bool tied() const { return !cfg_->untie_embeddings_and_output_weights; }
  // The output projection weight [padded_vocab, h]: the word embeddings when tied (their copy on
  // a last pipeline stage). post_process only.
  Parameter& output_weight();

  layers::VocabEmbedding& embedding() { return *embedding_; }
  Block& block() { return *block_; }
  int64_t first_layer() const { return opt_.first_layer; }
  layers::Norm& final_layernorm() { return *final_norm_; }
  // mHC: the residual streams n (1 without hyper-connections) and the stack-exit contraction
  // (null before the last stage or without mHC): HyperConnectionHead
  // <hc_head_prefix>.hc_head_{fn,base,scale} before the final norm, or the streams' mean with
  // mhc_learned_output_contract false.
  int64_t residual_streams() const { return streams_; }
  layers::HyperConnectionHead* hc_head() { return hc_head_.get(); }
  // The MTP block of the last stage (null without model.mtp_num_layers or before the last stage).
  MtpBlock* mtp_block() { return mtp_.get(); }
  // The word-embedding table the MTP block looks up (last stage): the embedding's own on a stage
  // with the embedding, else the tied output layer's copy or, untied, a copy of its own.
  Parameter& mtp_word_embeddings();

 private:
  struct Context;
  struct Head;
  layers::DropoutKeys dropout_keys(const ForwardContext& ctx, const Batch& batch) const;
  // The batch's packed-sequence documents on the model's device (null when the batch has none).
  std::shared_ptr<const layers::PackedSequence> packed_sequence(const Batch& batch) const;
  // The stage's input stream: the embedding (first stage) or ctx.input_hidden.
  Tensor stage_input(Context& ctx, const Batch& batch, const layers::DropoutKeys& keys);
  // Output layer and vocab-parallel cross entropy of one head: hidden [s(/tp), b, h] (after its
  // final norm), targets [s·b] (row (t, b)) -> per-token losses [s·b]; observed as `site`.
  Tensor head_loss(Head& head, const Tensor& hidden, const Tensor& targets, bool reuse_buffer, SourceKind kind,
                   const std::string& site);
  // Cross-entropy and output layer backward of one head: dlosses [b, s] -> d(hidden) [s(/tp), b, h]
  // (weight_grad false: the output weight gets no gradient, MTP's detached heads).
  Tensor head_backward(Head& head, const Tensor& dlosses, bool weight_grad);
  // The MTP depths' losses after the decoder's final norm output h0 (mHC: its pre-contraction n-stream).
  void mtp_losses(Context& ctx, const Tensor& h0, const Batch& batch, const BlockRun& run, ForwardOutput& out);
  // d(h0) from the MTP heads and block (undefined with detached heads).
  Tensor mtp_backward(Context& ctx, const std::vector<Tensor>& dlosses);
  // hidden [s, b, h] -> logits [s·b, padded_vocab]; reuse_buffer: into logits_buffer_ when no
  // one else holds it (training forwards; generation returns its logits to the caller).
  Tensor output_logits(const Tensor& hidden, bool reuse_buffer = false);
  void report_grads(Context& ctx, std::vector<Parameter*> ps) const;

  ResolvedModelConfig cfg_;
  LanguageModelOptions opt_;
  ParallelGroups groups_;
  std::vector<std::string> aux_loss_names_;
  int64_t padded_vocab_ = 0;
  std::unique_ptr<layers::VocabEmbedding> embedding_;
  std::unique_ptr<Block> block_;
  std::unique_ptr<layers::Norm> final_norm_;
  int64_t streams_ = 1;                               // mHC residual streams
  std::unique_ptr<layers::HyperConnectionHead> hc_head_;  // mHC exit (post_process)
  Parameter output_layer_;  // untied, or the tied copy on a last stage without the embedding
  std::unique_ptr<MtpBlock> mtp_;   // last stage with model.mtp_num_layers
  Parameter mtp_embedding_copy_;    // MTP, untied, last stage without the embedding: its table copy
  Tensor logits_buffer_;    // the training forwards' logits (and then dlogits), kept across steps
};

}  // namespace strata
