// The Mamba2 mixer under tensor (and sequence) parallelism, tp = the world size, in f64: every
// parameter shard gathers to the unsharded mixer's init bit for bit (in_proj's z|x|B|C|dt and
// conv1d's x|B|C parts sharded part by part), and the forward output, the input gradient and the
// gathered parameter gradients equal the single-rank mixer's (1e-12 relative to the tensor's max).
// Reference: Megatron-Core ssm/mamba_mixer.py (nheads_local_tp, ngroups_local_tp, partition_sizes).
#include <algorithm>
#include <cmath>

#include "models/layers/mamba_mixer.h"
#include "mpi_test_helpers.h"
#include "parallel/mpi_communicator.h"
#include "parallel/tensor_parallel.h"

namespace strata {
namespace {

ProcessGroup mamba_world_tp() {
  static std::shared_ptr<Communicator> comm = make_mpi_world_communicator();
  std::vector<int> ranks(static_cast<size_t>(comm->size()));
  for (int i = 0; i < comm->size(); ++i) ranks[static_cast<size_t>(i)] = i;
  return ProcessGroup("tp", ranks, comm->rank(), comm);
}
double max_abs_of(const Tensor& t) {
  double m = 0;
  for (double v : t.to_vector()) m = std::max(m, std::fabs(v));
  return m;
}
double max_diff(const Tensor& a, const Tensor& b) {
  REQUIRE(a.shape() == b.shape());
  const auto x = a.to_vector(), y = b.to_vector();
  double m = 0;
  for (size_t i = 0; i < x.size(); ++i) m = std::max(m, std::fabs(x[i] - y[i]));
  return m;
}
Tensor normal(const Shape& s, uint64_t seed) {
  Tensor t = Tensor::empty(s, DType::F64);
  fill_normal(t, philox::Key{seed, 3}, 0.0, 1.0);
  return t;
}
std::vector<Parameter*> params_of(layers::MambaMixer& m) {
  std::vector<Parameter*> v;
  m.collect(v);
  return v;
}

void check_mixer_tp(bool sp) {
  const ProcessGroup tp = mamba_world_tp();
  const int n = tp.size(), r = tp.rank();
  ModelConfig raw_c;
  raw_c.num_layers = 2;
  raw_c.hidden_size = 8;
  raw_c.mamba_head_dim = 4;  // 4 heads
  raw_c.mamba_num_groups = 2;
  raw_c.mamba_state_dim = 3;
  raw_c.mamba_chunk_size = 3;
  raw_c.normalization = Normalization::RMSNorm;
  const ResolvedModelConfig c(raw_c);
  ParallelGroups single, par;
  par.tp = tp;
  layers::LayerEnv env{DType::F64, Device::cpu(), false}, penv{DType::F64, Device::cpu(), sp};
  layers::MambaMixer full("decoder.layers.0.mixer", c, env, single), part("decoder.layers.0.mixer", c, penv, par);
  const auto pf = params_of(full), pp = params_of(part);
  REQUIRE(pf.size() == pp.size());
  for (size_t i = 0; i < pf.size(); ++i) {
    init_parameter(*pf[i], 21);
    init_parameter(*pp[i], 21);
    INFO(pf[i]->name);
    CHECK(max_diff(tp::gather_parameter(*pp[i], pp[i]->value, tp), pf[i]->value) == 0.0);
  }
  const int64_t s = 4 * n, b = 2;
  const Tensor x = normal({s, b, c->hidden_size}, 1), dy = normal({s, b, c->hidden_size}, 2);
  layers::MambaMixer::Saved sf, spv;
  const Tensor y = full.forward(x, nullptr, &sf), dx = full.backward(sf, dy);
  auto shard = [&](const Tensor& t) { return sp ? t.narrow(0, r * (s / n), s / n).contiguous() : t; };
  const Tensor yp = part.forward(shard(x), nullptr, &spv), dxp = part.backward(spv, shard(dy));
  CHECK(max_diff(yp, shard(y)) <= 1e-12 * max_abs_of(y));
  CHECK(max_diff(dxp, shard(dx)) <= 1e-12 * max_abs_of(dx));
  for (size_t i = 0; i < pf.size(); ++i) {
    INFO(pf[i]->name);
    const Tensor g = tp::gather_parameter(*pp[i], pp[i]->main_grad, tp);
    CHECK(max_diff(g, pf[i]->main_grad) <= 1e-12 * std::max(1.0, max_abs_of(pf[i]->main_grad)));
  }
}
}  // namespace

TEST_CASE("mamba mixer: tensor parallel equals the single-rank mixer (f64)", "[tp][mamba]") {
  check_mixer_tp(false);
}
TEST_CASE("mamba mixer: tensor + sequence parallel equals the single-rank mixer (f64)", "[tp][mamba]") {
  check_mixer_tp(true);
}

}  // namespace strata
