// Context parallelism without communication (parallel/context_parallel.h): the load-balanced
// split and its inverse (positions by hand: rank r holds chunks r and 2cp−1−r), and both attention
// schemes with every cp rank simulated in one process — all-gather (each rank's queries against
// the global K/V, the dK/dV contributions summed over the ranks as the reduce-scatter does) and
// the ring (each rank's queries against every rank's KV block in ring order, log-sum-exp merging;
// dK/dV accumulated per block) — against the unsharded attention kernel, forward (out, lse) and
// backward (dq, dk, dv), causal, GQA, attention dropout keyed by global positions and a value head
// dim dv = 5 next to d = 8 (multi-latent attention's dv != d; the ring's partial outputs and
// accumulator are dv wide, the a2a moves dv-wide outputs): f64 within
// 1e-12, f32 within 2e-6 of the tensor's largest element. Likewise a2a and a2a+p2p: the
// all-to-all over the heads simulated between the ranks of each inner group (TE's chunk order by
// hand), attention on the gathered rows (the kernel on the whole sequence for a2a, the simulated
// ring over the outer groups for a2a+p2p), the inverse all-to-all back to each rank's local rows.
// Sliding windows (shorter than a chunk, spanning chunks, window 0, non-causal (left, right)) and
// attention sinks (off-by-one, learnable: the ranks' shares of the sink gradient summed) in all
// three schemes, with packed documents and dropout.
// The real exchanges run under mpirun (tests/mpi/test_context_parallel.cpp). Also the config
// fields parallel.cp_comm_type (Megatron's default p2p) and
// parallel.hierarchical_context_parallel_sizes, and the a2a head-divisibility rules.
#include <cmath>

#include "kernels/attention.h"
#include "kernels/elementwise.h"
#include "parallel/context_parallel.h"
#include "test_helpers.h"
#include "training/config/config.h"
#include "models/batch.h"

using namespace strata;
using strata::test::max_abs_diff;
using strata::test::random_tensor;

namespace {

double max_abs(const Tensor& t) {
  double m = 0;
  for (double v : t.to_vector()) m = std::max(m, std::fabs(v));
  return m;
}
// max |a − b| / max |b|.
double rel_err(const Tensor& a, const Tensor& b) { return max_abs_diff(a, b) / std::max(max_abs(b), 1e-300); }

DType lse_dtype(DType t) { return t == DType::F64 ? DType::F64 : DType::F32; }

struct Full {
  Tensor q, k, v, dout, out, lse, dq, dk, dv;
  Tensor dsink;  // [hq] d softmax_offset when p has a sink
};

// The unsharded attention: s tokens, b = 2, hq = 4 query heads over hkv KV heads, q/k head dim
// d = 8, value head dim dv.
Full full_attention(int64_t s, int64_t hkv, DType dt, const kernels::AttentionParams& p, uint64_t seed,
                    int64_t dv = 8) {
  const int64_t b = 2, hq = 4, d = 8;
  Full f;
  f.q = random_tensor({s, b, hq, d}, seed, -1, 1, dt);
  f.k = random_tensor({s, b, hkv, d}, seed + 1, -1, 1, dt);
  f.v = random_tensor({s, b, hkv, dv}, seed + 2, -1, 1, dt);
  f.dout = random_tensor({s, b, hq, dv}, seed + 3, -1, 1, dt);
  f.out = Tensor::empty(f.dout.shape(), dt);  // [s, b, hq, dv]
  f.lse = Tensor::empty({b, hq, s}, lse_dtype(dt));
  kernels::attention_forward(f.q, f.k, f.v, f.out, f.lse, p);
  f.dq = Tensor::empty(f.q.shape(), dt);
  f.dk = Tensor::empty(f.k.shape(), dt);
  f.dv = Tensor::empty(f.v.shape(), dt);
  kernels::AttentionParams pb = p;
  if (p.softmax_offset.defined()) {
    f.dsink = Tensor::zeros(p.softmax_offset.shape(), p.softmax_offset.dtype());
    pb.softmax_offset_grad = f.dsink;
  }
  kernels::attention_backward(f.q, f.k, f.v, f.out, f.dout, f.lse, f.dq, f.dk, f.dv, pb);
  return f;
}

// p with a zeroed softmax_offset_grad when it has a sink (the simulated ranks add their shares).
kernels::AttentionParams with_sink_grad(const kernels::AttentionParams& p) {
  kernels::AttentionParams out = p;
  if (p.softmax_offset.defined())
    out.softmax_offset_grad = Tensor::zeros(p.softmax_offset.shape(), p.softmax_offset.dtype());
  return out;
}
// The ranks' summed sink gradient against the unsharded one.
void check_sink_grad(const kernels::AttentionParams& p, const Full& f, double tol) {
  if (!p.softmax_offset.defined()) return;
  INFO("d softmax_offset");
  CHECK(rel_err(p.softmax_offset_grad, f.dsink) <= tol);
}

kernels::AttentionParams params(double dropout) {
  kernels::AttentionParams p;
  p.causal = true;
  p.dropout_p = dropout;
  p.dropout_key = philox::Key{77, 5};
  return p;
}

// Packed sequences: document_start [2, s] of documents of lengths 5, 1, 9, … (sample 0) and 3s/4,
// the rest (sample 1): boundaries inside chunks, on chunk edges and a one-token document.
Tensor document_starts(int64_t s) {
  std::vector<double> v(static_cast<size_t>(2 * s));
  const int64_t lens[] = {5, 1, 9};
  int64_t start = 0, next = 0, k = 0;
  for (int64_t t = 0; t < s; ++t) {
    if (t == next) {
      start = t;
      next = t + lens[k++ % 3];
    }
    v[static_cast<size_t>(t)] = static_cast<double>(start);
    v[static_cast<size_t>(s + t)] = t < 3 * s / 4 ? 0.0 : static_cast<double>(3 * s / 4);
  }
  return Tensor::from_vector(v, {2, s}, DType::I64);
}

// p with rank r's rows of the document starts (whole-sequence positions), or p unchanged.
kernels::AttentionParams rank_params(const kernels::AttentionParams& p, int cp, int r) {
  kernels::AttentionParams out = p;
  if (p.document_start.defined()) out.document_start = cp::split_sequence(p.document_start, 1, cp, r);
  return out;
}

// All-gather over cp simulated ranks against the unsharded f (p: its parameters): each rank's
// queries against the global K/V, the dK/dV contributions and the sink gradient summed over ranks.
void check_gathered(const Full& f, const kernels::AttentionParams& p0, int cp, DType dt, double tol) {
  const kernels::AttentionParams p = with_sink_grad(p0);
  Tensor dk_sum = Tensor::zeros(f.k.shape(), DType::F64), dv_sum = Tensor::zeros(f.v.shape(), DType::F64);
  for (int r = 0; r < cp; ++r) {
    INFO("cp rank " << r);
    const Tensor q = cp::split_sequence(f.q, 0, cp, r);
    Tensor out = Tensor::empty(cp::split_sequence(f.out, 0, cp, r).shape(), dt);  // [s_local, b, hq, dv]
    Tensor lse = Tensor::empty({q.size(1), q.size(2), q.size(0)}, lse_dtype(dt));
    const kernels::AttentionParams pr = rank_params(p, cp, r);
    cp::gathered_forward(q, f.k, f.v, out, lse, pr, cp, r);
    CHECK(rel_err(out, cp::split_sequence(f.out, 0, cp, r)) <= tol);
    CHECK(max_abs_diff(lse, cp::split_sequence(f.lse, 2, cp, r)) <= tol * 10);
    Tensor dq = Tensor::empty(q.shape(), dt), dk = Tensor::empty(f.k.shape(), dt), dv = Tensor::empty(f.v.shape(), dt);
    cp::gathered_backward(q, f.k, f.v, out, cp::split_sequence(f.dout, 0, cp, r), lse, dq, dk, dv, pr, cp, r);
    CHECK(rel_err(dq, cp::split_sequence(f.dq, 0, cp, r)) <= tol);
    kernels::add(dk_sum, dk.to(DType::F64), dk_sum);
    kernels::add(dv_sum, dv.to(DType::F64), dv_sum);
  }
  CHECK(rel_err(dk_sum, f.dk.to(DType::F64)) <= tol);
  CHECK(rel_err(dv_sum, f.dv.to(DType::F64)) <= tol);
  check_sink_grad(p, f, tol);
}

// The ring over cp simulated ranks against the unsharded f: each rank's queries against every
// rank's KV block in ring order (log-sum-exp merging, the sink in the accumulator), dK/dV
// accumulated per block, the sink gradient summed over ranks.
void check_ring(const Full& f, const kernels::AttentionParams& p0, int cp, DType dt, double tol) {
  const kernels::AttentionParams p = with_sink_grad(p0);
  std::vector<Tensor> k(cp), v(cp), dk(cp), dv(cp);
  for (int r = 0; r < cp; ++r) {
    k[r] = cp::split_sequence(f.k, 0, cp, r);
    v[r] = cp::split_sequence(f.v, 0, cp, r);
    dk[r] = Tensor::zeros(k[r].shape(), dt);
    dv[r] = Tensor::zeros(v[r].shape(), dt);
  }
  for (int r = 0; r < cp; ++r) {
    INFO("cp rank " << r);
    const Tensor q = cp::split_sequence(f.q, 0, cp, r);
    const kernels::AttentionParams pr = rank_params(p, cp, r);
    cp::RingAccumulator acc = cp::make_ring_accumulator(q, v[r], pr.softmax_offset);
    for (int i = 0; i < cp; ++i) {  // ring order: own block first, then the previous rank's …
      const int src = (r + cp - i) % cp;
      cp::ring_block_forward(q, k[src], v[src], src, acc, pr, cp, r);
    }
    Tensor out = Tensor::empty(acc.out.shape(), dt);  // [s_local, b, hq, dv]
    Tensor lse = Tensor::empty({q.size(1), q.size(2), q.size(0)}, lse_dtype(dt));
    cp::ring_finish(acc, out, lse);
    CHECK(rel_err(out, cp::split_sequence(f.out, 0, cp, r)) <= tol);
    CHECK(max_abs_diff(lse, cp::split_sequence(f.lse, 2, cp, r)) <= tol * 10);
    Tensor dq = Tensor::zeros(q.shape(), dt);
    const Tensor dout = cp::split_sequence(f.dout, 0, cp, r);
    for (int i = 0; i < cp; ++i) {
      const int src = (r + cp - i) % cp;
      cp::ring_block_backward(q, k[src], v[src], src, out, dout, lse, dq, dk[src], dv[src], pr, cp, r);
    }
    CHECK(rel_err(dq, cp::split_sequence(f.dq, 0, cp, r)) <= tol);
  }
  CHECK(rel_err(cp::merge_sequence(dk, 0), f.dk) <= tol);
  CHECK(rel_err(cp::merge_sequence(dv, 0), f.dv) <= tol);
  check_sink_grad(p, f, tol);
}

}  // namespace

TEST_CASE("context parallel: the load-balanced split holds chunks r and 2cp-1-r and merges back", "[context_parallel]") {
  for (int cp : {1, 2, 3, 4}) {
    INFO("cp " << cp);
    const int64_t s = 24, c = s / (2 * cp);
    std::vector<double> v(2 * s);
    for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<double>(i);
    const Tensor t = Tensor::from_vector(v, {2, s}, DType::F64);  // t[b, j] = b·s + j
    std::vector<Tensor> shards;
    for (int r = 0; r < cp; ++r) {
      Tensor part = cp::split_sequence(t, 1, cp, r);
      REQUIRE(part.shape() == Shape{2, s / cp});
      const std::vector<int64_t> pos = cp::global_positions(s / cp, cp, r);
      for (int64_t j = 0; j < s / cp; ++j) {
        // By hand: the first c rows are chunk r, the next c rows chunk 2cp−1−r.
        const int64_t want = j < c ? r * c + j : (2 * cp - 1 - r) * c + (j - c);
        CHECK(pos[static_cast<size_t>(j)] == want);
        CHECK(cp::global_position(j, s / cp, cp, r) == want);
        for (int64_t b = 0; b < 2; ++b)
          CHECK(part.to_vector()[static_cast<size_t>(b * (s / cp) + j)] == static_cast<double>(b * s + want));
      }
      shards.push_back(part);
    }
    CHECK(max_abs_diff(cp::merge_sequence(shards, 1), t) == 0.0);
    // Every rank does the same causal work: rows r and 2cp−1−r see (r+1)c + (2cp−r)c keys in all.
  }
  // A batch: tokens, labels and the loss mask split alike; the sample index kept.
  Batch batch;
  batch.tokens = Tensor::from_vector({0, 1, 2, 3, 4, 5, 6, 7}, {1, 8}, DType::I64);
  batch.labels = Tensor::from_vector({1, 2, 3, 4, 5, 6, 7, 8}, {1, 8}, DType::I64);
  batch.loss_mask = Tensor::from_vector({1, 1, 1, 0, 1, 1, 1, 1}, {1, 8}, DType::F32);
  batch.first_sample_index = 42;
  const Batch b1 = cp::split_batch(batch, 2, 1);  // chunks 1 and 2 of 4: positions 2, 3, 4, 5
  CHECK(b1.tokens.to_vector() == std::vector<double>{2, 3, 4, 5});
  CHECK(b1.labels.to_vector() == std::vector<double>{3, 4, 5, 6});
  CHECK(b1.loss_mask.to_vector() == std::vector<double>{1, 0, 1, 1});
  CHECK(b1.first_sample_index == 42);
  CHECK_THROWS_WITH(cp::split_sequence(Tensor::zeros({1, 10}, DType::F32), 1, 3, 0),
                    Catch::Contains("not divisible by 2 x context_parallel_size"));
}

TEST_CASE("context parallel: all-gather attention over simulated ranks equals the unsharded attention, "
          "with and without packed documents",
          "[context_parallel]") {
  for (DType dt : {DType::F64, DType::F32}) {
    for (int cp : {2, 3}) {
      for (int64_t hkv : {4, 2}) {  // MHA and GQA
        for (double dropout : {0.0, 0.2})
        for (bool docs : {false, true})
        for (int64_t value_dim : {8, 5}) {
          INFO(dtype_name(dt) << " cp " << cp << " kv heads " << hkv << " dropout " << dropout << " documents " << docs
                              << " dv " << value_dim);
          const double tol = dt == DType::F64 ? 1e-12 : 2e-6;
          const int64_t s = 12 * cp;
          kernels::AttentionParams p = params(dropout);
          if (docs) p.document_start = document_starts(s);
          check_gathered(full_attention(s, hkv, dt, p, 11 + cp, value_dim), p, cp, dt, tol);
        }
      }
    }
  }
}

TEST_CASE("context parallel: ring attention over simulated ranks equals the unsharded attention, "
          "with and without packed documents",
          "[context_parallel]") {
  for (DType dt : {DType::F64, DType::F32}) {
    for (int cp : {2, 3, 4}) {
      for (int64_t hkv : {4, 2}) {
        for (double dropout : {0.0, 0.2})
        for (bool docs : {false, true})
        for (int64_t value_dim : {8, 5}) {
          INFO(dtype_name(dt) << " cp " << cp << " kv heads " << hkv << " dropout " << dropout << " documents " << docs
                              << " dv " << value_dim);
          const double tol = dt == DType::F64 ? 1e-12 : 2e-6;
          const int64_t s = 8 * cp;
          kernels::AttentionParams p = params(dropout);
          if (docs) p.document_start = document_starts(s);
          check_ring(full_attention(s, hkv, dt, p, 31 + cp, value_dim), p, cp, dt, tol);
        }
      }
    }
  }
}

TEST_CASE("context parallel: parallel.cp_comm_type is validated, p2p by default", "[context_parallel]") {
  const char* yaml = "optimizer:\n  lr: 1.0e-3\ndata:\n  mock_data: true\n";
  StrataConfig ok = StrataConfig::from_yaml_text(yaml, {"parallel.cp_comm_type=all_gather"}, "cp.yaml");
  CHECK(ok.parallel.cp_comm_type == CpCommType::AllGather);
  CHECK(StrataConfig::from_yaml_text(yaml, {"parallel.cp_comm_type=a2a"}, "cp.yaml").parallel.cp_comm_type ==
        CpCommType::A2A);
  CHECK(StrataConfig::from_yaml_text(yaml, {}, "cp.yaml").parallel.cp_comm_type == CpCommType::P2P);  // Megatron's
  CHECK_THROWS_WITH(StrataConfig::from_yaml_text(yaml, {"parallel.cp_comm_type=ring"}, "cp.yaml"),
                    Catch::Contains("parallel.cp_comm_type"));
  // The Megatron flag, with its values.
  const StrataConfig flag = StrataConfig::from_yaml_text(
      yaml, {"--context-parallel-size", "4", "--cp-comm-type", "a2a+p2p", "--hierarchical-context-parallel-sizes", "2",
             "2"},
      "cp.yaml");
  CHECK(flag.parallel.cp_comm_type == CpCommType::A2AP2P);
  CHECK(flag.parallel.hierarchical_context_parallel_sizes == std::vector<int64_t>{2, 2});
  // Megatron's per-layer list form is refused by name (one type for every layer).
  CHECK_THROWS_WITH(StrataConfig::from_yaml_text(yaml, {"--cp-comm-type", "p2p", "a2a"}, "cp.yaml"),
                    Catch::Contains("'--cp-comm-type' takes one value") && Catch::Contains("parallel.cp_comm_type") &&
                        Catch::Contains("per-layer"));
}

TEST_CASE("context parallel: hierarchical sizes and the a2a head rules are validated by field", "[context_parallel]") {
  const char* yaml = "optimizer:\n  lr: 1.0e-3\ndata:\n  mock_data: true\nmodel:\n  num_layers: 2\n  hidden_size: 64\n"
                     "  num_attention_heads: 8\n  seq_length: 64\n  max_position_embeddings: 64\n  vocab_size: 128\n";
  auto validate = [&](std::vector<std::string> o, int64_t world) {
    return StrataConfig::from_yaml_text(yaml, o, "cp.yaml").validate(world);
  };
  const ResolvedConfig ok = validate({"parallel.context_parallel_size=4", "parallel.cp_comm_type=a2a+p2p",
                                      "parallel.hierarchical_context_parallel_sizes=[2, 2]"},
                                     4);
  CHECK(ok.parallel->hierarchical_context_parallel_sizes == std::vector<int64_t>{2, 2});
  // a2a+p2p needs the sizes; the sizes need a2a+p2p; two of them, multiplying to cp.
  CHECK_THROWS_WITH(validate({"parallel.context_parallel_size=4", "parallel.cp_comm_type=a2a+p2p"}, 4),
                    Catch::Contains("parallel.hierarchical_context_parallel_sizes") && Catch::Contains("must be set"));
  CHECK_THROWS_WITH(validate({"parallel.context_parallel_size=4", "parallel.cp_comm_type=p2p",
                              "parallel.hierarchical_context_parallel_sizes=[2, 2]"},
                             4),
                    Catch::Contains("parallel.hierarchical_context_parallel_sizes") && Catch::Contains("only with"));
  CHECK_THROWS_WITH(validate({"parallel.context_parallel_size=4", "parallel.cp_comm_type=a2a+p2p",
                              "parallel.hierarchical_context_parallel_sizes=[2, 3]"},
                             4),
                    Catch::Contains("parallel.hierarchical_context_parallel_sizes") &&
                        Catch::Contains("2 x 3 is not parallel.context_parallel_size (4)"));
  CHECK_THROWS_WITH(validate({"parallel.context_parallel_size=4", "parallel.cp_comm_type=a2a+p2p",
                              "parallel.hierarchical_context_parallel_sizes=[2, 1, 2]"},
                             4),
                    Catch::Contains("parallel.hierarchical_context_parallel_sizes") && Catch::Contains("two sizes"));
  // a2a: each tensor-parallel rank's heads and query groups divide by the a2a group.
  CHECK_NOTHROW(validate({"parallel.context_parallel_size=4", "parallel.cp_comm_type=a2a",
                          "parallel.tensor_model_parallel_size=2"},
                         8));  // 8 heads / tp 2 = 4 per rank, over 4
  CHECK_THROWS_WITH(validate({"parallel.context_parallel_size=4", "parallel.cp_comm_type=a2a",
                              "parallel.tensor_model_parallel_size=4"},
                             16),
                    Catch::Contains("model.num_attention_heads") && Catch::Contains("parallel.context_parallel_size (4)"));
  CHECK_THROWS_WITH(validate({"parallel.context_parallel_size=4", "parallel.cp_comm_type=a2a",
                              "model.group_query_attention=true", "model.num_query_groups=2"},
                             4),
                    Catch::Contains("model.num_query_groups"));
  // a2a+p2p: only the inner (a2a) size has to divide them.
  CHECK_NOTHROW(validate({"parallel.context_parallel_size=4", "parallel.cp_comm_type=a2a+p2p",
                          "parallel.hierarchical_context_parallel_sizes=[2, 2]", "model.group_query_attention=true",
                          "model.num_query_groups=2"},
                         4));
  CHECK_THROWS_WITH(validate({"parallel.context_parallel_size=4", "parallel.cp_comm_type=a2a+p2p",
                              "parallel.hierarchical_context_parallel_sizes=[4, 1]", "model.group_query_attention=true",
                              "model.num_query_groups=2"},
                             4),
                    Catch::Contains("model.num_query_groups") &&
                        Catch::Contains("parallel.hierarchical_context_parallel_sizes[0] (4)"));
}

namespace {

// One all-to-all between simulated ranks: recv[j] block i = send[i] block j.
std::vector<Tensor> exchange(const std::vector<Tensor>& send) {
  std::vector<Tensor> recv;
  for (size_t j = 0; j < send.size(); ++j) {
    Tensor t = Tensor::empty(send[0].shape(), send[0].dtype());
    for (size_t i = 0; i < send.size(); ++i)
      t.narrow(0, static_cast<int64_t>(i), 1).copy_(send[i].narrow(0, static_cast<int64_t>(j), 1));
    recv.push_back(t);
  }
  return recv;
}

// a2a over the inner group of outer rank g (cp ranks g·A … g·A + A − 1): every rank's local rows
// of all heads -> its head group of the group's merged rows.
std::vector<Tensor> to_heads(const std::vector<Tensor>& local, int A, int g) {
  std::vector<Tensor> send;
  for (int a = 0; a < A; ++a) send.push_back(cp::a2a_pack_heads(local[static_cast<size_t>(g * A + a)], A));
  std::vector<Tensor> out;
  for (const Tensor& r : exchange(send)) out.push_back(cp::a2a_unpack_rows(r, A));
  return out;
}
// The way back: member a's head group of the merged rows -> every member's local rows, all heads.
std::vector<Tensor> to_rows(const std::vector<Tensor>& heads, int A) {
  std::vector<Tensor> send;
  for (const Tensor& h : heads) send.push_back(cp::a2a_pack_rows(h, A));
  std::vector<Tensor> out;
  for (const Tensor& r : exchange(send)) out.push_back(cp::a2a_unpack_heads(r, A));
  return out;
}

// Attention of every simulated rank of cp = A·B with a2a inside groups of A and the ring (or, at
// B = 1, the kernel on the whole sequence) across them, against the unsharded f.
void check_a2a(const Full& f, const kernels::AttentionParams& p0, int A, int B, DType dt, double tol) {
  const kernels::AttentionParams p = with_sink_grad(p0);
  const int cp = A * B;
  const int64_t hq = f.q.size(2);
  auto locals = [&](const Tensor& t) {
    std::vector<Tensor> v;
    for (int r = 0; r < cp; ++r) v.push_back(cp::split_sequence(t, 0, cp, r));
    return v;
  };
  const std::vector<Tensor> q = locals(f.q), k = locals(f.k), v = locals(f.v), dout = locals(f.dout);
  std::vector<std::vector<Tensor>> qh(B), kh(B), vh(B), douth(B), oh(B), lh(B), dqh(B), dkh(B), dvh(B);
  for (int g = 0; g < B; ++g) {
    qh[g] = to_heads(q, A, g), kh[g] = to_heads(k, A, g), vh[g] = to_heads(v, A, g), douth[g] = to_heads(dout, A, g);
    for (int a = 0; a < A; ++a) {
      oh[g].push_back(Tensor::empty(douth[g][a].shape(), dt));  // [rows, b, heads, dv]
      lh[g].push_back(Tensor::empty({qh[g][a].size(1), qh[g][a].size(2), qh[g][a].size(0)}, lse_dtype(dt)));
      dqh[g].push_back(Tensor::zeros(qh[g][a].shape(), dt));
      dkh[g].push_back(Tensor::zeros(kh[g][a].shape(), dt));
      dvh[g].push_back(Tensor::zeros(vh[g][a].shape(), dt));
    }
  }
  for (int a = 0; a < A; ++a) {
    // The head group's parameters: global head index, the merged rows' document starts.
    const kernels::AttentionParams pa = rank_params(cp::head_group_params(p, hq, A, a), B, 0);
    if (B == 1) {
      kernels::AttentionParams whole = pa;
      whole.global_seq_len = f.q.size(0);
      kernels::attention_forward(qh[0][a], kh[0][a], vh[0][a], oh[0][a], lh[0][a], whole);
      kernels::attention_backward(qh[0][a], kh[0][a], vh[0][a], oh[0][a], douth[0][a], lh[0][a], dqh[0][a], dkh[0][a],
                                  dvh[0][a], whole);
      continue;
    }
    for (int g = 0; g < B; ++g) {  // the ring of member a over the outer ranks g
      const kernels::AttentionParams pg = rank_params(cp::head_group_params(p, hq, A, a), B, g);
      cp::RingAccumulator acc = cp::make_ring_accumulator(qh[g][a], vh[g][a], pg.softmax_offset);
      for (int i = 0; i < B; ++i) {
        const int src = (g + B - i) % B;
        cp::ring_block_forward(qh[g][a], kh[src][a], vh[src][a], src, acc, pg, B, g);
      }
      cp::ring_finish(acc, oh[g][a], lh[g][a]);
    }
    for (int g = 0; g < B; ++g) {
      const kernels::AttentionParams pg = rank_params(cp::head_group_params(p, hq, A, a), B, g);
      for (int i = 0; i < B; ++i) {
        const int src = (g + B - i) % B;
        cp::ring_block_backward(qh[g][a], kh[src][a], vh[src][a], src, oh[g][a], douth[g][a], lh[g][a], dqh[g][a],
                                dkh[src][a], dvh[src][a], pg, B, g);
      }
    }
  }
  std::vector<Tensor> dk_local, dv_local;
  for (int g = 0; g < B; ++g) {
    const std::vector<Tensor> out = to_rows(oh[g], A), dq = to_rows(dqh[g], A), dk = to_rows(dkh[g], A),
                              dv = to_rows(dvh[g], A);
    for (int a = 0; a < A; ++a) {
      const int r = g * A + a;
      INFO("cp rank " << r);
      CHECK(rel_err(out[a], cp::split_sequence(f.out, 0, cp, r)) <= tol);
      CHECK(rel_err(dq[a], cp::split_sequence(f.dq, 0, cp, r)) <= tol);
      dk_local.push_back(dk[a]);
      dv_local.push_back(dv[a]);
      // The head group's lse rows: this rank's heads [a·hq/A, (a+1)·hq/A), the merged rows.
      const Tensor want = cp::split_sequence(f.lse.narrow(1, a * (hq / A), hq / A).contiguous(), 2, B, g);
      CHECK(max_abs_diff(lh[g][a], want) <= tol * 10);
    }
  }
  CHECK(rel_err(cp::merge_sequence(dk_local, 0), f.dk) <= tol);
  CHECK(rel_err(cp::merge_sequence(dv_local, 0), f.dv) <= tol);
  check_sink_grad(p, f, tol);
}

}  // namespace

TEST_CASE("context parallel: a2a and a2a+p2p over simulated ranks equal the unsharded attention, "
          "with and without packed documents",
          "[context_parallel]") {
  // (A, B): a2a over A ranks, then the ring over B groups; B = 1 is a2a, A = 1 the plain ring.
  const std::vector<std::pair<int, int>> layouts = {{2, 1}, {4, 1}, {2, 2}, {2, 3}, {4, 2}, {1, 3}};
  for (DType dt : {DType::F64, DType::F32})
    for (auto [A, B] : layouts)
      for (int64_t hkv : {4, 2}) {
        if (hkv % A != 0) continue;  // the a2a splits the KV heads too
        for (double dropout : {0.0, 0.2})
          for (bool docs : {false, true})
            for (int64_t value_dim : {8, 5}) {
              INFO(dtype_name(dt) << " a2a " << A << " p2p " << B << " kv heads " << hkv << " dropout " << dropout
                                  << " documents " << docs << " dv " << value_dim);
              const double tol = dt == DType::F64 ? 1e-12 : 2e-6;
              const int64_t s = 4 * A * B;
              kernels::AttentionParams p = params(dropout);
              if (docs) p.document_start = document_starts(s);
              check_a2a(full_attention(s, hkv, dt, p, 51 + A * B, value_dim), p, A, B, dt, tol);
            }
      }
}

TEST_CASE("context parallel: the a2a layout steps move heads and rows as Transformer Engine orders them",
          "[context_parallel]") {
  // Two ranks, rows of 4 (chunks of 2), 4 heads, d = 1: value = 100·global row + head.
  const int n = 2;
  const int64_t s = 8, H = 4;
  std::vector<double> v;
  for (int64_t t = 0; t < s; ++t)
    for (int64_t h = 0; h < H; ++h) v.push_back(100.0 * t + h);
  const Tensor full = Tensor::from_vector(v, {s, 1, H, 1}, DType::F64);
  std::vector<Tensor> send;
  for (int r = 0; r < n; ++r) send.push_back(cp::a2a_pack_heads(cp::split_sequence(full, 0, n, r), n));
  const std::vector<Tensor> recv = exchange(send);
  for (int a = 0; a < n; ++a) {
    const Tensor rows = cp::a2a_unpack_rows(recv[static_cast<size_t>(a)], n);
    REQUIRE(rows.shape() == Shape{s, 1, H / n, 1});
    // By hand: rank 0 held global rows 0,1,6,7 and rank 1 rows 2,3,4,5; merged: 0..7 in order.
    for (int64_t t = 0; t < s; ++t)
      for (int64_t h = 0; h < H / n; ++h)
        CHECK(rows.to_vector()[static_cast<size_t>(t * (H / n) + h)] == 100.0 * t + a * (H / n) + h);
  }
}

TEST_CASE("context parallel: sliding windows and attention sinks over simulated ranks equal the unsharded "
          "attention in all-gather, ring, a2a and a2a+p2p",
          "[context_parallel][attention_window][attention_sink]") {
  // Windows shorter than a chunk, spanning chunks, non-causal (left, right); the sink off-by-one
  // (zeros) and learnable (random logits, its gradient summed over the ranks); with packed
  // documents and dropout.
  struct Variant {
    const char* name;
    bool causal;
    int64_t left, right;
    int sink;  // 0: none, 1: off-by-one (zeros), 2: learnable
  };
  const Variant variants[] = {
      {"window 3", true, 3, -1, 0},           {"window 11, learnable sink", true, 11, -1, 2},
      {"off-by-one sink", true, -1, -1, 1},   {"window (5, 2) non-causal, learnable sink", false, 5, 2, 2},
      {"window 0, off-by-one sink", true, 0, -1, 1},
  };
  for (DType dt : {DType::F64, DType::F32})
    for (const Variant& var : variants)
      for (bool docs : {false, true}) {
        if (docs && !var.causal) continue;  // documents need causal attention
        for (int cp : {2, 3}) {
          INFO(dtype_name(dt) << " " << var.name << " documents " << docs << " cp " << cp);
          const double tol = dt == DType::F64 ? 1e-12 : 2e-6;
          const int64_t s = 12 * cp;  // chunks of 6
          kernels::AttentionParams p = params(0.2);
          p.causal = var.causal;
          p.window_left = var.left;
          p.window_right = var.right;
          if (var.sink > 0)
            p.softmax_offset = var.sink == 1 ? Tensor::zeros({4}, lse_dtype(dt)) : random_tensor({4}, 77, -1, 1, lse_dtype(dt));
          if (docs) p.document_start = document_starts(s);
          const Full f = full_attention(s, 2, dt, p, 91 + cp, 5);
          {
            INFO("all-gather");
            check_gathered(f, p, cp, dt, tol);
          }
          {
            INFO("ring");
            check_ring(f, p, cp, dt, tol);
          }
          {
            INFO("a2a");
            check_a2a(f, p, 2, cp == 2 ? 1 : 3, dt, tol);
          }
        }
      }
}
