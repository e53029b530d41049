// Packed sequences (data.reset_position_ids + data.reset_attention_mask), the packing identity:
// documents A|B|C packed into one sequence give each document the per-token losses (every loss
// channel, MTP included), the output logits and, summed, the parameter gradients of running A, B
// and C alone, in float64 on the CPU within 1e-10: GPT with RoPE, GPT with learned absolute
// positions, the hybrid pattern M*-E (Mamba, attention, MLP, MoE) and GPT with two MTP depths;
// the MoE router diagnostic sums come one row per document, each the document's own.
// The attention kernel alone: a packed call equals one call per document, forward and backward.
// Reference: Megatron-Core packed sequences (PackedSeqParams / THD: attention, Mamba seq_idx, MTP
// _roll_tensor_packed_seq), the definition itself: a document never sees another.
#include <catch2/catch.hpp>

#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "core/observe.h"
#include "kernels/attention.h"
#include "models/gpt/gpt_model.h"
#include "models/hybrid/hybrid_model.h"
#include "packed_sequence_cases.h"
#include "test_helpers.h"

namespace strata {
namespace {

using namespace strata::test::packed;

// The packed run against every document alone.
void check_packing(LanguageModel& model) {
  const std::vector<Doc> docs = documents();
  const Pass packed = run(model, packed_batch(docs), packed_weights(docs));
  std::map<std::string, std::vector<double>> grad_sum;
  double worst_loss = 0, worst_logit = 0, scale = 0;
  std::vector<int64_t> index_in_sample(2, 0);
  for (const Doc& d : docs) {
    std::vector<double> wd(d.length);
    for (int64_t t = 0; t < d.length; ++t) wd[t] = weight(d, t);
    const Pass alone = run(model, alone_batch(d), wd);
    // Router diagnostics per document (Strata's extension): the packed run's row of this document
    // is the alone run's one sequence.
    const int64_t doc_row = d.sample * 3 + index_in_sample[d.sample]++;  // 3 documents per sample
    REQUIRE(alone.router_sums.size() == packed.router_sums.size());
    for (const auto& [owner, sums] : alone.router_sums) {
      INFO(owner << " document row " << doc_row);
      const Tensor& p = packed.router_sums.at(owner);
      REQUIRE(p.size(0) == 2 * 3);
      CHECK(test::max_abs_diff(p.narrow(0, doc_row, 1).contiguous(), sums) <= 1e-6);
    }
    REQUIRE(alone.losses.size() == packed.losses.size());
    for (size_t c = 0; c < alone.losses.size(); ++c)
      for (int64_t t = 0; t < d.length; ++t)
        worst_loss = std::max(worst_loss, std::fabs(alone.losses[c][t] - packed.losses[c][d.sample * kSeq + d.begin + t]));
    const int64_t V = packed.vocab;
    for (int64_t t = 0; t < d.length; ++t)
      for (int64_t v = 0; v < V; ++v) {
        const double a = alone.logits[t * V + v], p = packed.logits[((d.begin + t) * 2 + d.sample) * V + v];
        worst_logit = std::max(worst_logit, std::fabs(a - p));
        scale = std::max(scale, std::fabs(a));
      }
    for (const auto& [name, g] : alone.grads) {
      auto& sum = grad_sum[name];
      if (sum.empty()) sum.assign(g.size(), 0.0);
      for (size_t i = 0; i < g.size(); ++i) sum[i] += g[i];
    }
  }
  CHECK(scale > 0.1);
  CHECK(worst_loss <= 1e-10);
  CHECK(worst_logit <= 1e-10);
  check_gradients(packed.grads, grad_sum);
}

GPTModelOptions f64_gpt() {
  GPTModelOptions o;
  o.dtype = DType::F64;
  return o;
}

}  // namespace

TEST_CASE("packed sequences: GPT with RoPE trains each document as if alone (f64, 1e-10)", "[packed]") {
  GPTModel model(base_config(), f64_gpt());
  model.init_parameters(5);
  check_packing(model);
}

TEST_CASE("packed sequences: GPT with learned absolute positions trains each document as if alone", "[packed]") {
  ModelConfig m = base_config();
  m.position_embedding_type = PositionEmbeddingType::LearnedAbsolute;
  GPTModel model(m, f64_gpt());
  model.init_parameters(6);
  check_packing(model);
}

TEST_CASE("packed sequences: GPT with two MTP depths, the shifts inside each document", "[packed][mtp]") {
  GPTModel model(mtp_config(2), f64_gpt());
  model.init_parameters(7);
  check_packing(model);
}

TEST_CASE("packed sequences: hybrid M*-E restarts the Mamba conv1d and SSD state at each document",
          "[packed][hybrid]") {
  LanguageModelOptions o;
  o.dtype = DType::F64;
  HybridModel model(hybrid_moe_config(), o);
  model.init_parameters(8);
  check_packing(model);
}

TEST_CASE("packed sequences: attention over packed documents equals attention per document", "[packed][attention]") {
  const int64_t b = 2, hq = 4, hkv = 2, d = 8;
  const std::vector<Doc> docs = documents();
  const Batch batch = packed_batch(docs);
  const Tensor q = test::random_tensor({kSeq, b, hq, d}, 1, -1, 1, DType::F64);
  const Tensor k = test::random_tensor({kSeq, b, hkv, d}, 2, -1, 1, DType::F64);
  const Tensor v = test::random_tensor({kSeq, b, hkv, d}, 3, -1, 1, DType::F64);
  const Tensor dout = test::random_tensor({kSeq, b, hq, d}, 4, -1, 1, DType::F64);
  kernels::AttentionParams p;
  p.document_start = batch.document_start;
  Tensor out = Tensor::empty(q.shape(), DType::F64), lse = Tensor::empty({b, hq, kSeq}, DType::F64);
  kernels::attention_forward(q, k, v, out, lse, p);
  Tensor dq = Tensor::empty(q.shape(), DType::F64), dk = Tensor::empty(k.shape(), DType::F64),
         dv = Tensor::empty(v.shape(), DType::F64);
  kernels::attention_backward(q, k, v, out, dout, lse, dq, dk, dv, p);
  for (const Doc& doc : docs) {
    INFO("sample " << doc.sample << " document at " << doc.begin);
    auto part = [&](const Tensor& t) { return t.narrow(1, doc.sample, 1).narrow(0, doc.begin, doc.length).contiguous(); };
    const Tensor qd = part(q), kd = part(k), vd = part(v), dod = part(dout);
    Tensor o = Tensor::empty(qd.shape(), DType::F64), l = Tensor::empty({1, hq, doc.length}, DType::F64);
    kernels::attention_forward(qd, kd, vd, o, l, kernels::AttentionParams{});
    Tensor gq = Tensor::empty(qd.shape(), DType::F64), gk = Tensor::empty(kd.shape(), DType::F64),
           gv = Tensor::empty(vd.shape(), DType::F64);
    kernels::attention_backward(qd, kd, vd, o, dod, l, gq, gk, gv, kernels::AttentionParams{});
    CHECK(test::max_abs_diff(o, part(out)) <= 1e-13);
    CHECK(test::max_abs_diff(l, lse.narrow(0, doc.sample, 1).narrow(2, doc.begin, doc.length).contiguous()) <= 1e-13);
    CHECK(test::max_abs_diff(gq, part(dq)) <= 1e-13);
    CHECK(test::max_abs_diff(gk, part(dk)) <= 1e-13);
    CHECK(test::max_abs_diff(gv, part(dv)) <= 1e-13);
  }
  // Bad input is named: a document mask needs causal attention and a [b, sq] i64 tensor.
  p.causal = false;
  CHECK_THROWS_WITH(kernels::attention_forward(q, k, v, out, lse, p), Catch::Contains("needs causal attention"));
  p.causal = true;
  p.document_start = Tensor::zeros({b, kSeq - 1}, DType::I64);
  CHECK_THROWS_WITH(kernels::attention_forward(q, k, v, out, lse, p), Catch::Contains("document_start must be [b, sq]"));
}

}  // namespace strata
