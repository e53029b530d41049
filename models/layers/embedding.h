// GPT input embedding: word embeddings over the padded vocabulary (+ learned absolute position
// embeddings when position_embedding_type = learned_absolute), then embedding dropout with
// p = hidden_dropout. Output in Megatron's [s, b, h] layout. Tensor parallelism
// (VocabParallelEmbedding): each rank holds rows [r·V/tp, (r+1)·V/tp) of the padded table, looks
// up the ids in its range (zeros elsewhere) and the partial outputs are all-reduced over tp
// (sequence parallel: reduce-scattered, output [s/tp, b, h]; positions, embedding dropout and the
// position-embedding gradient, summed over tp, then refer to the local rows). Context parallelism
// (keys.cp_size > 1): the tokens are a cp rank's two sequence chunks; positions are their global ones. The word-embedding table doubles as
// the output layer weight when embeddings are tied.
// Reference: Megatron-Core models/common/embeddings/language_model_embedding.py
// (LanguageModelEmbedding), tensor_parallel/layers.py (VocabParallelEmbedding).
#pragma once
#include <string>
#include <vector>

#include "models/layers/layer_common.h"
#include "models/config/model_config.h"
#include "parallel/process_group.h"

namespace strata::layers {

class VocabEmbedding {
 public:
  // The word-embedding table's canonical name (also the tied output layer's copy on a last stage).
  static constexpr const char* kWordEmbeddingsName = "embedding.word_embeddings.weight";
  struct Saved {
    Tensor ids;        // [s·b] i64 on the model device, row (t, b) = tokens[b, t]
    Tensor positions;  // [s·b] i64 position of row (t, b) (learned_absolute only)
    DropoutSpec dropout;
  };
  // padded_vocab: rows of the word-embedding table (padded_vocab_size()).
  VocabEmbedding(const ResolvedModelConfig& cfg, int64_t padded_vocab, const LayerEnv& env, const ProcessGroup& tp);
  // tokens: [b, s] i64 (any device) -> [s, b, h]. position_offset: position of tokens[:, 0].
  Tensor forward(const Tensor& tokens, int64_t position_offset, const DropoutKeys& keys, Saved* saved) const;
  // dy: [s, b, h]: adds the word (and position) embedding gradients into main_grad.
  void backward(const Saved& saved, const Tensor& dy);
  void collect(std::vector<Parameter*>& out);
  int64_t vocab_start() const { return vocab_start_; }

  Parameter word_embeddings;      // [padded_vocab, h]
  Parameter position_embeddings;  // [max_position_embeddings, h], learned_absolute only
  bool learned_positions = false;

 private:
  int64_t h_, vocab_, padded_vocab_, max_positions_;
  double dropout_p_;
  bool sequence_parallel_ = false;
  int64_t vocab_start_ = 0;  // first global row of this rank's word-embedding shard
  ProcessGroup tp_;
};

}  // namespace strata::layers
