// The attention_logit_max site (models/layers/self_attention.cpp) under context parallelism:
// a cp rank's queries attend to keys on every cp rank, so the site all-gathers K when observed.
// Every rank runs the unsharded layer (no communication) and the cp layer on its two sequence
// chunks, for both cp_comm_type values (f64, causal, GQA, RoPE, qk-layernorm, attention dropout):
//   - each rank's per-head maxima equal the direct float64 max over ITS global query rows and
//     every key they may see (from the unsharded layer's q, k);
//   - their max over the cp ranks equals the unsharded layer's site value.
// Tags: [cp] (ctest mpi_cp_np2), [cp4] (mpi_cp_np4).
#include <cmath>
#include <limits>

#include "core/observe.h"
#include "models/layers/self_attention.h"
#include "mpi_test_helpers.h"
#include "parallel/context_parallel.h"
#include "test_helpers.h"

namespace strata {
namespace {

ProcessGroup world_cp_group() {
  std::vector<int> ranks(static_cast<size_t>(mpitest::world_comm()->size()));
  for (int i = 0; i < mpitest::world_comm()->size(); ++i) ranks[static_cast<size_t>(i)] = i;
  return ProcessGroup("cp", ranks, mpitest::world_comm()->rank(), mpitest::world_comm());
}

struct LogitMaxRecorder : Observer {
  std::vector<Tensor> seen;
  void on_tensor(const Observation& o) override { seen.push_back(o.tensor.clone()); }
};

ResolvedModelConfig site_config() {
  ModelConfig m;
  m.num_layers = 2;
  m.hidden_size = 16;
  m.num_attention_heads = 4;
  m.group_query_attention = true;
  m.num_query_groups = 2;
  m.position_embedding_type = PositionEmbeddingType::Rope;
  m.qk_layernorm = true;
  m.normalization = Normalization::RMSNorm;
  m.vocab_size = 32;
  m.seq_length = 16;
  m.init_method_std = 0.5;
  return ResolvedModelConfig(m);
}

// The layer's site value for x (and its saved q, k when `saved`).
std::vector<double> site_value(const layers::SelfAttention& attn, const Tensor& x, layers::SelfAttention::Saved* saved) {
  layers::SelfAttention::Run run;
  run.dropout_p = 0.3;
  run.dropout_key = philox::Key{3, 4};
  LogitMaxRecorder rec;
  {
    CaptureScope scope(rec, {SourceKind::AttentionLogitMax});
    attn.forward(x, run, saved);
  }
  REQUIRE(rec.seen.size() == 1);
  return rec.seen[0].to_vector();
}

void fill_parameters(layers::SelfAttention& attn) {
  std::vector<Parameter*> params;
  attn.collect(params);
  uint64_t seed = 11;
  for (Parameter* p : params) p->value.copy_(test::random_tensor(p->value.shape(), seed++, -0.8, 0.8));
}

void check_site(CpCommType type) {
  const ProcessGroup cpg = world_cp_group();
  const int n = cpg.size(), r = cpg.rank();
  const ResolvedModelConfig cfg = site_config();
  layers::LayerEnv env{DType::F64, Device::cpu()};
  env.cp_comm_type = type;
  layers::SelfAttention single("decoder.layers.1.self_attention", cfg, env, ProcessGroup::single("tp"));
  layers::SelfAttention sharded("decoder.layers.1.self_attention", cfg, env, ProcessGroup::single("tp"), cpg);
  fill_parameters(single);
  fill_parameters(sharded);
  const int64_t s = 16, b = 2;
  const Tensor x = test::random_tensor({s, b, 16}, 77);
  layers::SelfAttention::Saved saved;
  const std::vector<double> whole = site_value(single, x, &saved);
  const std::vector<double> mine = site_value(sharded, cp::split_sequence(x, 0, n, r), nullptr);
  REQUIRE(mine.size() == whole.size());
  // The direct max over this rank's global query rows.
  const std::vector<int64_t> rows = cp::global_positions(s / n, n, r);
  const std::vector<double> q = saved.q.to_vector(), k = saved.k.to_vector();
  const int64_t np = 4, ng = 2, hn = 4;
  for (int64_t h = 0; h < np; ++h) {
    double want = -std::numeric_limits<double>::infinity();
    for (int64_t i : rows)
      for (int64_t bb = 0; bb < b; ++bb)
        for (int64_t j = 0; j <= i; ++j) {
          double dot = 0;
          for (int64_t d = 0; d < hn; ++d)
            dot += q[static_cast<size_t>(((i * b + bb) * np + h) * hn + d)] *
                   k[static_cast<size_t>(((j * b + bb) * ng + h / 2) * hn + d)];
          want = std::max(want, dot / 2.0);  // softmax scale 1/√hn
        }
    INFO("rank " << r << " head " << h);
    CHECK(std::fabs(mine[static_cast<size_t>(h)] - want) <= 1e-6 * std::fabs(want));
  }
  Tensor m = Tensor::from_vector(mine, {np}, DType::F64);
  cpg.all_reduce(m, ReduceOp::Max);
  const std::vector<double> merged = m.to_vector();
  for (size_t h = 0; h < whole.size(); ++h) CHECK(merged[h] == whole[h]);
}

TEST_CASE("attention_logit_max site: CP all_gather and p2p equal the single-rank per-head maxima", "[cp][cp4]") {
  check_site(CpCommType::AllGather);
  check_site(CpCommType::P2P);
}

}  // namespace
}  // namespace strata
