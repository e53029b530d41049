// Sweep cases for kernels/embedding.h: lookup (exact) and deterministic weight gradient against the
// f64 CPU reference, incl. vocab shards, long duplicate segments, i32 ids, accumulate and the
// out-of-vocabulary check.
#include <algorithm>

#include "kernels/embedding.h"
#include "sweep/sweep.h"

using namespace strata;
using namespace strata::kernels;

namespace {
const std::vector<DType> kFloat = {DType::F64, DType::F32, DType::BF16, DType::F16};

struct Case {
  int64_t n, v_local, h, vocab_start, v_global;
  DType ids_dtype;
  bool accumulate;
};

Tensor make_ids(const sweep::Context& c, int64_t n, int64_t v_global, uint64_t seed, DType dt) {
  std::vector<double> u = c.input({n}, seed, 0.0, 1.0).to_vector();
  std::vector<int64_t> ids(n);
  for (int64_t i = 0; i < n; ++i) ids[i] = std::min<int64_t>(static_cast<int64_t>(u[i] * v_global), v_global - 1);
  Tensor t = Tensor::from_data(ids, {n});
  return dt == DType::I64 ? t : t.to(dt);
}

void run_case(sweep::Context& c, const Case& k) {
  const Shape s{k.n, k.v_local, k.h};
  Tensor ids = make_ids(c, k.n, k.v_global, 1, k.ids_dtype);
  Tensor w = c.input({k.v_local, k.h}, 2), dout = c.input({k.n, k.h}, 3), dw0 = c.input({k.v_local, k.h}, 4);
  Tensor out_ref = Tensor::empty({k.n, k.h}, DType::F64), dw_ref = dw0.clone();
  embedding_forward(ids, w, out_ref, k.vocab_start, k.v_global);
  embedding_backward(ids, dout, dw_ref, k.accumulate, k.vocab_start);

  Tensor ids_t = ids.to(c.device);
  Tensor out = c.empty({k.n, k.h}), dw = c.on_target(dw0);
  embedding_forward(ids_t, c.on_target(w), out, k.vocab_start, k.v_global);
  embedding_backward(ids_t, c.on_target(dout), dw, k.accumulate, k.vocab_start);
  c.compare("fwd", s, out, out_ref, 0.0);  // a lookup is exact
  c.compare(k.accumulate ? "bwd_acc" : "bwd", s, dw, dw_ref, c.bound(1e-5, 1e-2, 2e-3));
}
}  // namespace

STRATA_SWEEP_OP("embedding", kFloat, "embedding_forward embedding_backward", [](sweep::Context& c) {
  std::vector<Case> cases = {
      {1, 1, 1, 0, 1, DType::I64, false},
      {37, 13, 130, 0, 13, DType::I32, false},
      {5, 7, 4099, 0, 7, DType::I64, true},
      {300, 500, 64, 500, 2000, DType::I64, false},  // vocab shard: most ids are not local
      {1000, 3, 96, 0, 3, DType::I32, false},        // long duplicate segments
  };
  if (!c.quick) {
    cases.push_back({4096, 50304, 256, 0, 50304, DType::I64, false});
    cases.push_back({8192, 12576, 768, 25152, 50304, DType::I32, true});  // shard 2 of 4
    cases.push_back({16384, 64, 1024, 0, 64, DType::I64, false});
  }
  for (const Case& k : cases) run_case(c, k);

  // Ids outside the global vocabulary must be rejected when vocab_size_global is given.
  Tensor ids = Tensor::from_data<int64_t>({0, 5, 9}, {3}).to(c.device);
  Tensor w = c.on_target(c.input({8, 4}, 5)), out = c.empty({3, 4});
  bool threw = false;
  try {
    embedding_forward(ids, w, out, 0, 8);
  } catch (const std::exception&) {
    threw = true;
  }
  c.compare("range_check", Shape{3, 8, 4}, Tensor::from_vector({threw ? 1.0 : 0.0}, {1}, DType::F64),
            Tensor::from_vector({1.0}, {1}, DType::F64), 0.0);
});
