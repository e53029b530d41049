// The packed-sequence cases shared by tests/unit/test_packed_sequences.cpp and
// tests/mpi/test_packed_exact.cpp: two samples of three documents each, the packed batch and each
// document alone, per-token loss weights, one forward + backward of a model that keeps every loss
// channel, the output logits and the router diagnostic sums, and the small model config.
#pragma once
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "core/observe.h"
#include "models/batch.h"
#include "core/parameter.h"
#include "models/language_model.h"
#include "models/config/model_config.h"

namespace strata::test::packed {

constexpr int64_t kVocab = 29, kEod = 28;

// Two samples of 16 tokens: sample 0 = A(5) | B(7) | C(4), sample 1 = D(1) | E(9) | F(6). Every
// document but the last of its sample ends with EOD, as preprocessed data does.
inline const std::vector<std::vector<int64_t>> kDocLengths = {{5, 7, 4}, {1, 9, 6}};
constexpr int64_t kSeq = 16;

struct Doc {
  int64_t sample, begin, length;
  std::vector<int64_t> tokens, labels;
};

inline std::vector<Doc> documents() {
  std::vector<Doc> docs;
  for (int64_t b = 0; b < 2; ++b) {
    int64_t begin = 0;
    for (size_t d = 0; d < kDocLengths[b].size(); ++d) {
      Doc doc{b, begin, kDocLengths[b][d], {}, {}};
      for (int64_t t = 0; t < doc.length; ++t) {
        const bool last = t + 1 == doc.length && d + 1 < kDocLengths[b].size();
        doc.tokens.push_back(last ? kEod : (begin * 7 + t * 5 + b * 3 + 1) % (kVocab - 1));
        doc.labels.push_back((begin * 3 + t * 11 + b + 2) % kVocab);
      }
      docs.push_back(doc);
      begin += doc.length;
    }
  }
  return docs;
}

inline Batch packed_batch(const std::vector<Doc>& docs) {
  std::vector<int64_t> tok(2 * kSeq), lab(2 * kSeq);
  for (const Doc& d : docs)
    for (int64_t t = 0; t < d.length; ++t) {
      tok[d.sample * kSeq + d.begin + t] = d.tokens[t];
      lab[d.sample * kSeq + d.begin + t] = d.labels[t];
    }
  Batch b;
  b.tokens = Tensor::from_data(tok, Shape{2, kSeq});
  b.labels = Tensor::from_data(lab, Shape{2, kSeq});
  b.loss_mask = Tensor::full({2, kSeq}, 1.0, DType::F32);
  set_documents(b, document_starts_after_eod(b.tokens, kEod));
  b.position_ids = positions_within_documents(b.document_start);
  return b;
}

inline Batch alone_batch(const Doc& d) {
  Batch b;
  b.tokens = Tensor::from_data(d.tokens, Shape{1, d.length});
  b.labels = Tensor::from_data(d.labels, Shape{1, d.length});
  b.loss_mask = Tensor::full({1, d.length}, 1.0, DType::F32);
  return b;
}

// Keeps the output logits [s, b, V] and each router's diagnostic sums [rows, 8, E] of a forward.
class LogitsObserver : public Observer {
 public:
  void on_tensor(const Observation& o) override {
    if (o.kind == SourceKind::OutputLogits) logits.push_back(o.tensor.to(Device::cpu()).clone());
    else router_sums[std::string(o.owner)] = o.tensor.to(Device::cpu()).clone();
  }
  std::vector<Tensor> logits;
  std::map<std::string, Tensor> router_sums;
};

// The loss weight of token t of document d (the same in the packed and the alone run).
inline double weight(const Doc& d, int64_t t) { return 0.5 + 0.1 * static_cast<double>((d.begin + t + d.sample) % 7); }

struct Pass {
  std::vector<std::vector<double>> losses;  // per channel, [b, s] row-major
  std::vector<double> logits;               // [s, b, V]
  std::map<std::string, std::vector<double>> grads;
  std::map<std::string, Tensor> router_sums;  // owner -> [rows, 8, E]
  int64_t b = 0, s = 0, vocab = 0;
};

// A parameter's whole gradient after backward (layouts: shards gathered, partial sums reduced).
using GlobalGrad = std::function<Tensor(Parameter&)>;

// One forward + backward of `batch` (per-token loss gradients from `w` [b, s]) on a whole model.
inline Pass run(LanguageModel& model, const Batch& batch, const std::vector<double>& w,
                const GlobalGrad& global_grad = nullptr) {
  for (Parameter* p : model.parameters()) p->main_grad.zero_();
  LogitsObserver obs;
  Pass r;
  r.b = batch.tokens.size(0);
  r.s = batch.tokens.size(1);
  auto ctx = model.make_context(1, 0, true);
  ForwardOutput out;
  {
    CaptureScope scope(obs, SourceKinds{SourceKind::OutputLogits, SourceKind::RouterDiagnosticSums});
    out = model.forward_pass(*ctx, batch);
  }
  r.router_sums = obs.router_sums;
  REQUIRE(obs.logits.size() == 1);
  r.vocab = obs.logits[0].size(2);
  r.logits = obs.logits[0].to_vector();
  BackwardInput in;
  for (const NamedLoss& l : out.losses) {
    REQUIRE(l.reduction == LossReduction::PerToken);  // no batch-level loss: nothing mixes documents
    r.losses.push_back(l.value.to_vector());
    in.loss_grads.push_back(Tensor::from_vector(w, l.value.shape(), DType::F64).to(l.value.dtype()));
  }
  model.backward_pass(*ctx, in);
  for (Parameter* p : model.parameters())
    r.grads[p->name] = (global_grad ? global_grad(*p) : p->main_grad).to_vector();
  return r;
}

// Every document alone on this process: its per-token losses of every channel, by document
// index, and the parameter gradients summed over the documents.
struct AloneRuns {
  std::vector<std::vector<std::vector<double>>> losses;  // [doc][channel][t]
  std::map<std::string, std::vector<double>> grad_sum;
};
inline AloneRuns run_alone(LanguageModel& model, const std::vector<Doc>& docs) {
  AloneRuns a;
  for (const Doc& d : docs) {
    std::vector<double> wd(static_cast<size_t>(d.length));
    for (int64_t t = 0; t < d.length; ++t) wd[static_cast<size_t>(t)] = weight(d, t);
    const Pass p = run(model, alone_batch(d), wd);
    a.losses.push_back(p.losses);
    for (const auto& [name, g] : p.grads) {
      auto& sum = a.grad_sum[name];
      if (sum.empty()) sum.assign(g.size(), 0.0);
      for (size_t i = 0; i < g.size(); ++i) sum[i] += g[i];
    }
  }
  return a;
}

// The packed batch's loss weights [2, kSeq]: each token's weight() in its document.
inline std::vector<double> packed_weights(const std::vector<Doc>& docs) {
  std::vector<double> w(2 * kSeq);
  for (const Doc& d : docs)
    for (int64_t t = 0; t < d.length; ++t) w[static_cast<size_t>(d.sample * kSeq + d.begin + t)] = weight(d, t);
  return w;
}

// Every gradient `got` (by name; a subset of `want`'s names) within 1e-10 of `want`, relative to
// the tensor's largest entry (at least 1); and not all zero.
inline void check_gradients(const std::map<std::string, std::vector<double>>& got,
                            const std::map<std::string, std::vector<double>>& want) {
  double scale = 0;
  for (const auto& [name, g] : got) {
    INFO(name);
    REQUIRE(want.count(name) == 1);
    const std::vector<double>& w = want.at(name);
    REQUIRE(w.size() == g.size());
    double m = 0, e = 0;
    for (size_t i = 0; i < g.size(); ++i) {
      m = std::max(m, std::fabs(w[i]));
      e = std::max(e, std::fabs(g[i] - w[i]));
    }
    CHECK(e <= 1e-10 * std::max(m, 1.0));
    scale = std::max(scale, m);
  }
  CHECK(scale > 1e-3);
}

inline ModelConfig base_config() {
  ModelConfig m;
  m.num_layers = 2;
  m.hidden_size = 16;
  m.num_attention_heads = 4;
  m.num_query_groups = 2;
  m.group_query_attention = true;
  m.ffn_hidden_size = 24;
  m.vocab_size = kVocab;
  m.make_vocab_size_divisible_by = 4;
  m.seq_length = kSeq;
  m.max_position_embeddings = kSeq;
  m.position_embedding_type = PositionEmbeddingType::Rope;
  m.hidden_dropout = 0.0;
  m.attention_dropout = 0.0;
  return m;
}

// base_config() with `depths` MTP depths (loss scale 0.3).
inline ModelConfig mtp_config(int64_t depths) {
  ModelConfig m = base_config();
  m.mtp_num_layers = depths;
  m.mtp_loss_scaling_factor = 0.3;
  return m;
}

// The hybrid pattern M*-E (Mamba, attention, MLP, MoE top-2 of 4), Mamba chunks of 3 that straddle
// document boundaries; no aux loss (a batch-level loss would couple the documents).
inline ModelConfig hybrid_moe_config() {
  ModelConfig m = base_config();
  m.hybrid_layer_pattern = "M*-E";
  m.num_layers = 4;
  m.add_bias_linear = false;
  m.mamba_head_dim = 4;
  m.mamba_num_groups = 2;
  m.mamba_state_dim = 4;
  m.mamba_chunk_size = 3;
  m.num_experts = 4;
  m.moe_ffn_hidden_size = 8;
  m.moe_router_topk = 2;
  m.moe_aux_loss_coeff = {0.0};
  return m;
}

}  // namespace strata::test::packed
