// The mHC site and the learned contraction under sequence parallelism, tp = the world size, f64:
// each tp rank holds a sequence shard [s/tp, b, n·C] of the streams and the replicated mHC
// parameters; its outputs and input gradients equal its slice of the single-rank run, and the
// parameters' main grads (summed over tp, Megatron's sequence_parallel attribute) equal the
// single-rank ones (1e-12), with hidden dropout drawn from the same global masks.
// Reference: Megatron-LM dev hyper_connection.py (_init_weights: sequence_parallel on every mHC
// parameter).
#include <algorithm>
#include <cmath>

#include "kernels/elementwise.h"
#include "models/layers/hyper_connection.h"
#include "mpi_test_helpers.h"
#include "parallel/mpi_communicator.h"
#include "test_helpers.h"

namespace strata {
namespace {

ProcessGroup mhc_world_tp() {
  static std::shared_ptr<Communicator> comm = make_mpi_world_communicator();
  std::vector<int> ranks(static_cast<size_t>(comm->size()));
  for (int i = 0; i < comm->size(); ++i) ranks[static_cast<size_t>(i)] = i;
  return ProcessGroup("tp", ranks, comm->rank(), comm);
}
double max_diff(const Tensor& a, const Tensor& b) {
  REQUIRE(a.numel() == b.numel());
  const auto x = a.to_vector(), y = b.to_vector();
  double m = 0;
  for (size_t i = 0; i < x.size(); ++i) m = std::max(m, std::fabs(x[i] - y[i]));
  return m;
}

struct Run {
  Tensor out, gx;
  std::vector<Tensor> grads;
};
// One site around y = agg (bias added by the merge) followed by the contraction; loss = <out, R>.
Run run(const Tensor& x, const Tensor& R, const layers::DropoutKeys& keys, const ProcessGroup& sp) {
  const int64_t n = 3, C = 4;
  MhcOptions o;
  o.streams = n;
  o.sinkhorn_iterations = 4;
  const layers::LayerEnv env{DType::F64, Device::cpu(), sp.size() > 1};
  layers::HyperConnection hc("decoder.layers.0.mlp_hyper_connection", C, o, env, sp);
  layers::HyperConnectionHead head("decoder", C, o, env, sp);
  std::vector<Parameter*> ps;
  hc.collect(ps);
  head.collect(ps);
  for (Parameter* p : ps) init_parameter(*p, 77);
  hc.bias.value.copy_(test::random_tensor({n * n + 2 * n}, 78));  // the same values on every rank
  const Tensor bias = test::random_tensor({C}, 79);
  layers::HyperConnectionState st;
  const Tensor agg = hc.forward(x, st);
  const Tensor streams =
      hc.merge(agg, bias, keys.hidden(0.2, 0, layers::DropoutSite::MlpOutput, x), st);
  Tensor saved;
  Run r;
  r.out = head.forward(streams, &saved);
  const Tensor g_streams = head.backward(saved, R);
  const layers::HyperConnection::MergeGrads mg = hc.merge_backward(g_streams, st);
  r.gx = hc.backward(mg.g_y, st);
  for (Parameter* p : ps) r.grads.push_back(p->main_grad.clone());
  return r;
}

TEST_CASE("mhc: a site and the contraction under sequence parallelism equal the single-rank run (f64)",
          "[tp][mhc]") {
  const ProcessGroup tp = mhc_world_tp();
  const int64_t t = tp.size(), r = tp.rank(), s = 2 * t, b = 2, n = 3, C = 4;
  const Tensor x = test::random_tensor({s, b, n * C}, 80), R = test::random_tensor({s, b, C}, 81);
  layers::DropoutKeys keys;
  keys.seed = 5, keys.step = 1, keys.global_batch = b, keys.training = true;
  const Run full = run(x, R, keys, ProcessGroup::single("tp"));
  layers::DropoutKeys shard_keys = keys;
  shard_keys.seq_offset = 2 * r, shard_keys.global_seq = s;
  const Run part = run(x.narrow(0, 2 * r, 2).contiguous(), R.narrow(0, 2 * r, 2).contiguous(), shard_keys, tp);
  CHECK(max_diff(part.out, full.out.narrow(0, 2 * r, 2).contiguous()) < 1e-12);
  CHECK(max_diff(part.gx, full.gx.narrow(0, 2 * r, 2).contiguous()) < 1e-12);
  REQUIRE(part.grads.size() == full.grads.size());
  for (size_t i = 0; i < full.grads.size(); ++i) CHECK(max_diff(part.grads[i], full.grads[i]) < 1e-12);
}

}  // namespace
}  // namespace strata
