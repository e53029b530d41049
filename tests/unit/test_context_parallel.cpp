// Context parallelism without communication (parallel/context_parallel.h): the load-balanced
// split and its inverse (positions by hand: rank r holds chunks r and 2cp−1−r), and both attention
// schemes with every cp rank simulated in one process — all-gather (each rank's queries against
// the global K/V, the dK/dV contributions summed over the ranks as the reduce-scatter does) and
// the ring (each rank's queries against every rank's KV block in ring order, log-sum-exp merging;
// dK/dV accumulated per block) — against the unsharded attention kernel, forward (out, lse) and
// backward (dq, dk, dv), causal, GQA and attention dropout keyed by global positions: f64 within
// 1e-12, f32 within 2e-6 of the tensor's largest element. The real exchanges run under mpirun
// (tests/mpi/test_context_parallel.cpp). Also the config field parallel.cp_comm_type.
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
};

// The unsharded attention: s tokens, b = 2, hq = 4 query heads over hkv KV heads, d = 8.
Full full_attention(int64_t s, int64_t hkv, DType dt, const kernels::AttentionParams& p, uint64_t seed) {
  const int64_t b = 2, hq = 4, d = 8;
  Full f;
  f.q = random_tensor({s, b, hq, d}, seed, -1, 1, dt);
  f.k = random_tensor({s, b, hkv, d}, seed + 1, -1, 1, dt);
  f.v = random_tensor({s, b, hkv, d}, seed + 2, -1, 1, dt);
  f.dout = random_tensor({s, b, hq, d}, seed + 3, -1, 1, dt);
  f.out = Tensor::empty(f.q.shape(), dt);
  f.lse = Tensor::empty({b, hq, s}, lse_dtype(dt));
  kernels::attention_forward(f.q, f.k, f.v, f.out, f.lse, p);
  f.dq = Tensor::empty(f.q.shape(), dt);
  f.dk = Tensor::empty(f.k.shape(), dt);
  f.dv = Tensor::empty(f.v.shape(), dt);
  kernels::attention_backward(f.q, f.k, f.v, f.out, f.dout, f.lse, f.dq, f.dk, f.dv, p);
  return f;
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
        for (bool docs : {false, true}) {
          INFO(dtype_name(dt) << " cp " << cp << " kv heads " << hkv << " dropout " << dropout << " documents " << docs);
          const double tol = dt == DType::F64 ? 1e-12 : 2e-6;
          const int64_t s = 12 * cp;
          kernels::AttentionParams p = params(dropout);
          if (docs) p.document_start = document_starts(s);
          const Full f = full_attention(s, hkv, dt, p, 11 + cp);
          Tensor dk_sum = Tensor::zeros(f.k.shape(), DType::F64), dv_sum = Tensor::zeros(f.v.shape(), DType::F64);
          for (int r = 0; r < cp; ++r) {
            const Tensor q = cp::split_sequence(f.q, 0, cp, r);
            Tensor out = Tensor::empty(q.shape(), dt);
            Tensor lse = Tensor::empty({q.size(1), q.size(2), q.size(0)}, lse_dtype(dt));
            const kernels::AttentionParams pr = rank_params(p, cp, r);
            cp::gathered_forward(q, f.k, f.v, out, lse, pr, cp, r);
            CHECK(rel_err(out, cp::split_sequence(f.out, 0, cp, r)) <= tol);
            CHECK(max_abs_diff(lse, cp::split_sequence(f.lse, 2, cp, r)) <= tol * 10);
            Tensor dq = Tensor::empty(q.shape(), dt), dk = Tensor::empty(f.k.shape(), dt),
                   dv = Tensor::empty(f.v.shape(), dt);
            cp::gathered_backward(q, f.k, f.v, out, cp::split_sequence(f.dout, 0, cp, r), lse, dq, dk, dv, pr, cp, r);
            CHECK(rel_err(dq, cp::split_sequence(f.dq, 0, cp, r)) <= tol);
            kernels::add(dk_sum, dk.to(DType::F64), dk_sum);
            kernels::add(dv_sum, dv.to(DType::F64), dv_sum);
          }
          CHECK(rel_err(dk_sum, f.dk.to(DType::F64)) <= tol);
          CHECK(rel_err(dv_sum, f.dv.to(DType::F64)) <= tol);
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
        for (bool docs : {false, true}) {
          INFO(dtype_name(dt) << " cp " << cp << " kv heads " << hkv << " dropout " << dropout << " documents " << docs);
          const double tol = dt == DType::F64 ? 1e-12 : 2e-6;
          const int64_t s = 8 * cp;
          kernels::AttentionParams p = params(dropout);
          if (docs) p.document_start = document_starts(s);
          const Full f = full_attention(s, hkv, dt, p, 31 + cp);
          std::vector<Tensor> k(cp), v(cp), dk(cp), dv(cp);
          for (int r = 0; r < cp; ++r) {
            k[r] = cp::split_sequence(f.k, 0, cp, r);
            v[r] = cp::split_sequence(f.v, 0, cp, r);
            dk[r] = Tensor::zeros(k[r].shape(), dt);
            dv[r] = Tensor::zeros(v[r].shape(), dt);
          }
          for (int r = 0; r < cp; ++r) {
            const Tensor q = cp::split_sequence(f.q, 0, cp, r);
            const kernels::AttentionParams pr = rank_params(p, cp, r);
            cp::RingAccumulator acc = cp::make_ring_accumulator(q);
            for (int i = 0; i < cp; ++i) {  // ring order: own block first, then the previous rank's …
              const int src = (r + cp - i) % cp;
              cp::ring_block_forward(q, k[src], v[src], src, acc, pr, cp, r);
            }
            Tensor out = Tensor::empty(q.shape(), dt);
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
        }
      }
    }
  }
}

TEST_CASE("context parallel: parallel.cp_comm_type is validated", "[context_parallel]") {
  const char* yaml = "optimizer:\n  lr: 1.0e-3\ndata:\n  mock_data: true\n";
  StrataConfig ok = StrataConfig::from_yaml_text(yaml, {"parallel.cp_comm_type=p2p"}, "cp.yaml");
  CHECK(ok.parallel.cp_comm_type == CpCommType::P2P);
  CHECK(StrataConfig::from_yaml_text(yaml, {}, "cp.yaml").parallel.cp_comm_type == CpCommType::AllGather);
  CHECK_THROWS_WITH(StrataConfig::from_yaml_text(yaml, {"parallel.cp_comm_type=ring"}, "cp.yaml"),
                    Catch::Contains("parallel.cp_comm_type"));
}
