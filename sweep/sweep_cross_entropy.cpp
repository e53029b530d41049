// Sweep cases for kernels/cross_entropy.h: one-call forward (loss, row_max, sum_exp), the staged
// functions, and backward (plain, label-smoothed, in place) against the f64 CPU reference; vocab
// shards with non-local and ignored targets; aligned (vectorised) and odd row lengths.
#include <algorithm>

#include "kernels/cross_entropy.h"
#include "sweep/sweep.h"

using namespace strata;
using namespace strata::kernels;

namespace {
const std::vector<DType> kFloat = {DType::F64, DType::F32, DType::BF16, DType::F16};

struct Case {
  int64_t n, v_local, vocab_start, v_global;
};

void run_case(sweep::Context& c, const Case& k) {
  const Shape s{k.n, k.v_local};
  const DType sd = c.dtype == DType::F64 ? DType::F64 : DType::F32;
  std::vector<double> u = c.input({k.n}, 11, 0.0, 1.0).to_vector();
  std::vector<int64_t> tv(k.n);
  for (int64_t i = 0; i < k.n; ++i) {
    tv[i] = std::min<int64_t>(static_cast<int64_t>(u[i] * k.v_global), k.v_global - 1);
    if (i % 7 == 3) tv[i] = -100;  // ignore index
  }
  Tensor targets = Tensor::from_data(tv, {k.n});
  Tensor logits = c.input(s, 12, -8, 8);
  Tensor dloss = c.input({k.n}, 13, 0.5, 1.5);  // dloss values rounded like the data, kept in f64 here

  // f64 reference: forward, statistics, backward with and without label smoothing.
  Tensor loss_r = Tensor::empty({k.n}, DType::F64), max_r = Tensor::empty({k.n}, DType::F64),
         se_r = Tensor::empty({k.n}, DType::F64), tl_r = Tensor::empty({k.n}, DType::F64);
  cross_entropy_forward(logits, targets, loss_r, max_r, se_r, k.vocab_start);
  cross_entropy_sum_exp(logits, targets, max_r, se_r, tl_r, k.vocab_start);
  Tensor g_r = Tensor::empty(s, DType::F64), gs_r = Tensor::empty(s, DType::F64);
  cross_entropy_backward(logits, targets, max_r, se_r, dloss, g_r, k.vocab_start, 0.0, k.v_global);
  cross_entropy_backward(logits, targets, max_r, se_r, dloss, gs_r, k.vocab_start, 0.1, k.v_global);

  // Target.
  Tensor lt = c.on_target(logits), tt = targets.to(c.device), dlt = dloss.to(sd).to(c.device);
  auto stat = [&] { return Tensor::empty({k.n}, sd, c.device); };
  Tensor loss = stat(), mx = stat(), se = stat(), tl = stat(), loss2 = stat();
  cross_entropy_forward(lt, tt, loss, mx, se, k.vocab_start);
  c.compare("fwd.loss", s, loss, loss_r, 1e-5);
  c.compare("fwd.row_max", s, mx, max_r, 0.0);
  c.compare("fwd.sum_exp", s, se, se_r, 1e-5);
  // Staged: stage 1, then stage 2 with the target's own max, then stage 3.
  Tensor mx2 = stat(), se2 = stat();
  cross_entropy_max(lt, mx2);
  cross_entropy_sum_exp(lt, tt, mx2, se2, tl, k.vocab_start);
  cross_entropy_loss(mx2, se2, tl, loss2);
  c.compare("stages.target_logit", s, tl, tl_r, 0.0);
  c.compare("stages.loss", s, loss2, loss_r, 1e-5);

  Tensor g = c.empty(s), gs = c.empty(s);
  cross_entropy_backward(lt, tt, mx, se, dlt, g, k.vocab_start, 0.0, k.v_global);
  cross_entropy_backward(lt, tt, mx, se, dlt, gs, k.vocab_start, 0.1, k.v_global);
  c.compare("bwd", s, g, g_r, c.bound(1e-5, 1e-2, 2e-3));
  c.compare("bwd.smoothing", s, gs, gs_r, c.bound(1e-5, 1e-2, 2e-3));
  Tensor inplace = lt.clone();
  cross_entropy_backward(inplace, tt, mx, se, dlt, inplace, k.vocab_start, 0.0, k.v_global);
  c.compare("bwd.inplace", s, inplace, g_r, c.bound(1e-5, 1e-2, 2e-3));
}
}  // namespace

STRATA_SWEEP_OP("cross_entropy", kFloat,
                "cross_entropy_max cross_entropy_sum_exp cross_entropy_loss cross_entropy_forward "
                "cross_entropy_backward",
                [](sweep::Context& c) {
  std::vector<Case> cases = {
      {1, 7, 0, 7},
      {37, 130, 0, 130},
      {3, 4099, 0, 4099},          // odd row length: scalar loads
      {4, 50304, 0, 50304},
      {16, 12576, 25152, 50304},   // vocab shard 2 of 4: most targets are not local
  };
  if (!c.quick) {
    cases.push_back({512, 50304, 0, 50304});
    cases.push_back({64, 128256, 0, 128256});
    cases.push_back({33, 32001, 0, 32001});
    cases.push_back({256, 25152, 25152, 50304});
  }
  for (const Case& k : cases) run_case(c, k);
});
