// GPTModel: Megatron-Core's GPT (embedding → N pre-norm transformer layers → final norm → output
// layer tied to the word embeddings unless untie_embeddings_and_output_weights → fused
// cross-entropy) behind the LanguageModel interface, with explicit forward/backward through
// per-micro-batch saved activations, plus KV-cache generation (logits_for).
// Precision: f32, or bf16 (bf16 parameter values and activations, f32 main grads, f32
// softmax statistics and loss); f64 is accepted for reference checks (f64 grads and losses).
// Parameter names are Megatron-Core GPTModel state-dict names (TE-fused layer norms).
// Tensor parallelism (groups.tp): vocab-parallel embedding, column/row-parallel layers, the output
// layer column-parallel over the vocabulary (tied: the embedding shard), vocab-parallel cross
// entropy; with sequence_parallel the activations between TP regions are [s/tp, b, h] shards.
// Context parallelism (groups.cp): forward takes this cp rank's part of the batch
// (parallel/context_parallel.h split_batch: chunks r and 2cp−1−r of every sequence) and returns the
// per-token losses of those tokens; positions, dropout masks and attention use global positions.
// Losses and gradients equal the unsharded model's (see docs/parallelism.md).
// Reference: Megatron-Core models/gpt/gpt_model.py, transformer/transformer_block.py,
// tensor_parallel/cross_entropy.py; llm.c gpt2_forward/gpt2_backward.
#pragma once
#include <memory>
#include <vector>

#include "models/language_model.h"
#include "models/layers/embedding.h"
#include "models/layers/norm.h"
#include "models/layers/transformer_layer.h"
#include "models/model_config.h"
#include "parallel/process_group.h"
#include "training/config.h"

namespace strata {

// Generation KV cache: per layer K/V [max_s, b, ng, hn]; `length` positions filled (all layers).
struct KVCache {
  std::vector<layers::LayerKVCache> layers;
  int64_t length() const { return layers.empty() ? 0 : layers[0].length; }
};

struct GPTModelOptions {
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
  CpCommType cp_comm_type = CpCommType::AllGather;  // parallel.cp_comm_type (groups.cp.size() > 1)
};

class GPTModel : public LanguageModel {
 public:
  // From a validated config: model section, training.precision / seed / global_batch_size.
  // With groups.pp larger than 1: model chunk `chunk` of this rank's pipeline stage
  // (parallel.virtual_pipeline_model_parallel_size chunks per stage).
  GPTModel(const StrataConfig& cfg, Device device, const ParallelGroups& groups = ParallelGroups::single_process(),
           int64_t chunk = 0);
  // From a model section (finalized here; vocab_size must be set) and explicit options.
  GPTModel(const ModelConfig& cfg, const GPTModelOptions& options,
           const ParallelGroups& groups = ParallelGroups::single_process());
  ~GPTModel() override;

  std::vector<Parameter*> parameters() override;
  void init_parameters(uint64_t seed) override;
  std::unique_ptr<ForwardContext> make_context(int64_t step, int64_t micro_batch, bool training) override;
  // batch.tokens, batch.labels: [b, s] i64 -> per-token losses [b, s] (f32; f64 for an f64 model).
  Tensor forward(ForwardContext& ctx, const Batch& batch) override;
  // dlosses: [b, s] -> adds every parameter's gradient into main_grad.
  void backward(ForwardContext& ctx, const Tensor& dlosses) override;
  bool is_first_stage() const override { return opt_.pre_process; }
  bool is_last_stage() const override { return opt_.post_process; }
  std::vector<Parameter*> embedding_group_parameters() override;

  // A KV cache for generation with `batch` sequences of up to `max_seq` positions.
  KVCache make_kv_cache(int64_t batch, int64_t max_seq) const;
  // tokens: [b, s] i64 (new tokens at positions position_offset ..) -> logits [b, s, vocab_size]
  // (the real vocabulary, padding columns dropped; the model's dtype). With a cache its length
  // must equal position_offset and the new K/V are appended; without one, position_offset must be
  // 0 (plain causal forward). No dropout, nothing saved.
  Tensor logits_for(const Tensor& tokens, KVCache* cache, int64_t position_offset);

  const ModelConfig& config() const { return cfg_; }
  DType dtype() const { return opt_.dtype; }
  const GPTModelOptions& options() const { return opt_; }
  Device device() const { return opt_.device; }
  int64_t padded_vocab() const { return padded_vocab_; }
  // First global vocabulary row of this rank's output-layer / embedding shard (0 without TP).
  int64_t vocab_start() const { return padded_vocab_ / groups_.tp.size() * groups_.tp.rank(); }
  bool tied() const { return !cfg_.untie_embeddings_and_output_weights; }
  // The output projection weight [padded_vocab, h]: the word embeddings when tied (their copy on
  // a last pipeline stage). post_process only.
  Parameter& output_weight();

  layers::VocabEmbedding& embedding() { return *embedding_; }
  // Local layer i (global index first_layer() + i).
  layers::TransformerLayer& layer(size_t i) { return *layers_.at(i); }
  size_t num_local_layers() const { return layers_.size(); }
  int64_t first_layer() const { return opt_.first_layer; }
  layers::Norm& final_layernorm() { return *final_norm_; }

 private:
  struct Context;
  // tokens [b, s] -> final hidden [s, b, h] (after the final norm).
  Tensor run_decoder(const Tensor& tokens, int64_t position_offset, const layers::DropoutKeys& keys,
                     KVCache* cache, Context* ctx);
  // x [s, b, h] through this stage's layers.
  Tensor run_layers(Tensor x, int64_t position_offset, const layers::DropoutKeys& keys, KVCache* cache, Context* ctx);
  // Cross-entropy, output layer and final norm backward: dlosses [b, s] -> d(last layer output) [s, b, h].
  Tensor loss_backward(Context& ctx, const Tensor& dlosses);
  // hidden [s, b, h] -> logits [s·b, padded_vocab]; reuse_buffer: into logits_buffer_ when no
  // one else holds it (training forwards; generation returns its logits to the caller).
  Tensor output_logits(const Tensor& hidden, bool reuse_buffer = false);

  ModelConfig cfg_;
  GPTModelOptions opt_;
  ParallelGroups groups_;
  int64_t padded_vocab_ = 0;
  std::unique_ptr<layers::VocabEmbedding> embedding_;
  std::vector<std::unique_ptr<layers::TransformerLayer>> layers_;
  std::unique_ptr<layers::Norm> final_norm_;
  Parameter output_layer_;  // untied, or the tied copy on a last stage without the embedding
  Tensor logits_buffer_;    // the training forwards' logits (and then dlogits), kept across steps
};

// The model chunks of this rank (one without a virtual pipeline), in virtual-stage order.
std::vector<std::unique_ptr<GPTModel>> make_gpt_model_chunks(const StrataConfig& cfg, Device device,
                                                             const ParallelGroups& groups);

// The model dtype of a precision: Fp32 → F32, Bf16 → BF16.
DType model_dtype(Precision precision);

}  // namespace strata
