// Context parallelism under mpirun (parallel/context_parallel.h). Every rank computes the
// unsharded reference locally (no communication), then the context-parallel version with the
// real groups, and compares:
//   - attention alone (cp = the world size), both K/V exchanges (all_gather, p2p ring): out and
//     lse of the local rows, dq of the local rows, dk/dv of the local rows after the reduce-scatter
//     / ring return, against the unsharded kernel (causal, GQA, attention dropout); f64 within
//     1e-12, f32 within 2e-6 of the tensor's largest element;
//   - layout equivalence of a tiny GPT trained by the real Trainer (f32, hidden and attention
//     dropout 0.1, 10 steps): CP2 (np 2) with LayerNorm/GeLU/learned positions/tied and with
//     RMSNorm/SwiGLU/GQA/RoPE/qk-norm/untied, for both cp_comm_type values; CP2×TP2 with sequence
//     parallelism, CP2×DP2 and CP2×PP2 (np 4). Losses within 1e-5 relative of the single-rank run, gradients
//     after step 1 (gathered over tp to global tensors) within 1e-5 of the tensor's largest
//     element, grad norms within 1e-5 relative.
// Tags: [cp] needs 2 ranks (ctest mpi_cp_np2), [cp4] 4 ranks (mpi_cp_np4).
#include <cmath>
#include <map>
#include <sstream>

#include "kernels/attention.h"
#include "models/gpt/gpt_model.h"
#include "layout_training.h"
#include "mpi_test_helpers.h"
#include "parallel/context_parallel.h"
#include "parallel/rank_grid.h"
#include "parallel/tensor_parallel.h"
#include "training/batch_source.h"
#include "training/pipeline_setup.h"
#include "training/trainer.h"
#include "training/config/model_factory.h"

namespace strata {
namespace {

constexpr int64_t kVocab = 128;

using mpitest::world_comm;

// The whole world as one cp group.
ProcessGroup world_cp() {
  std::vector<int> ranks(static_cast<size_t>(world_comm()->size()));
  for (int i = 0; i < world_comm()->size(); ++i) ranks[static_cast<size_t>(i)] = i;
  return ProcessGroup("cp", ranks, world_comm()->rank(), world_comm());
}

Tensor random(const Shape& shape, uint64_t seed, DType dt) {
  Tensor t = Tensor::empty(shape, DType::F64);
  fill_uniform(t, philox::Key{seed, 3}, -1.0, 1.0);
  return t.to(dt);
}

double max_abs(const Tensor& t) {
  double m = 0;
  for (double v : t.to_vector()) m = std::max(m, std::fabs(v));
  return m;
}
double rel_err(const Tensor& a, const Tensor& b) {
  REQUIRE(a.shape() == b.shape());
  std::vector<double> x = a.to_vector(), y = b.to_vector();
  double d = 0;
  for (size_t i = 0; i < x.size(); ++i) d = std::max(d, std::fabs(x[i] - y[i]));
  return d / std::max(max_abs(b), 1e-300);
}

void check_attention(CpCommType type, DType dt, int64_t hkv, double dropout) {
  const ProcessGroup cpg = world_cp();
  const int n = cpg.size(), r = cpg.rank();
  const int64_t s = 8 * n, b = 2, hq = 4, d = 8;
  const DType st = dt == DType::F64 ? DType::F64 : DType::F32;
  kernels::AttentionParams p;
  p.causal = true;
  p.dropout_p = dropout;
  p.dropout_key = philox::Key{9, 1};
  Tensor q = random({s, b, hq, d}, 1, dt), k = random({s, b, hkv, d}, 2, dt), v = random({s, b, hkv, d}, 3, dt);
  Tensor dout = random({s, b, hq, d}, 4, dt);
  Tensor out = Tensor::empty(q.shape(), dt), lse = Tensor::empty({b, hq, s}, st);
  kernels::attention_forward(q, k, v, out, lse, p);
  Tensor dq = Tensor::empty(q.shape(), dt), dk = Tensor::empty(k.shape(), dt), dv = Tensor::empty(v.shape(), dt);
  kernels::attention_backward(q, k, v, out, dout, lse, dq, dk, dv, p);

  auto local = [&](const Tensor& t) { return cp::split_sequence(t, 0, n, r); };
  Tensor lq = local(q), lk = local(k), lv = local(v), ldout = local(dout);
  Tensor lout = Tensor::empty(lq.shape(), dt), llse = Tensor::empty({b, hq, s / n}, st);
  cp::attention_forward(lq, lk, lv, lout, llse, p, cpg, type);
  Tensor ldq = Tensor::empty(lq.shape(), dt), ldk = Tensor::empty(lk.shape(), dt), ldv = Tensor::empty(lv.shape(), dt);
  cp::attention_backward(lq, lk, lv, lout, ldout, llse, ldq, ldk, ldv, p, cpg, type);
  const double tol = dt == DType::F64 ? 1e-12 : 2e-6;
  CHECK(rel_err(lout, local(out)) <= tol);
  CHECK(rel_err(llse, cp::split_sequence(lse, 2, n, r)) <= tol);
  CHECK(rel_err(ldq, local(dq)) <= tol);
  CHECK(rel_err(ldk, local(dk)) <= tol);
  CHECK(rel_err(ldv, local(dv)) <= tol);
}

void check_attention_all() {
  for (CpCommType type : {CpCommType::AllGather, CpCommType::P2P})
    for (DType dt : {DType::F64, DType::F32})
      for (int64_t hkv : {4, 2})
        for (double dropout : {0.0, 0.2}) {
          INFO((type == CpCommType::P2P ? "p2p" : "all_gather") << " " << dtype_name(dt) << " kv heads " << hkv
                                                                << " dropout " << dropout);
          check_attention(type, dt, hkv, dropout);
        }
}

// ---- layout equivalence --------------------------------------------------------------------------

const std::vector<std::string> kGelu = {};
const std::vector<std::string> kSwiglu = {"model.normalization=RMSNorm",
                                          "model.position_embedding_type=rope",
                                          "model.swiglu=true",
                                          "model.group_query_attention=true",
                                          "model.num_query_groups=2",
                                          "model.qk_layernorm=true",
                                          "model.untie_embeddings_and_output_weights=true",
                                          "model.add_bias_linear=false"};

// The same global batch (8 samples of 16 tokens, micro-batches of 2) in every layout.
ResolvedConfig cp_config(int64_t world, const std::vector<std::string>& model, const std::vector<std::string>& layout) {
  std::vector<std::string> o = {
      "model.num_layers=2", "model.hidden_size=32", "model.num_attention_heads=4", "model.vocab_size=128",
      "model.seq_length=16", "model.max_position_embeddings=16", "model.hidden_dropout=0.1",
      "model.attention_dropout=0.1", "model.make_vocab_size_divisible_by=8", "training.micro_batch_size=2",
      "training.global_batch_size=8", "training.train_iters=10", "optimizer.lr_warmup_iters=2",
      "optimizer.lr_decay_iters=10", "optimizer.lr_decay_style=cosine", "optimizer.min_lr=1.0e-4",
      "logging.log_interval=1", "training.eval_interval=1000", "optimizer.weight_decay=0.1", "optimizer.clip_grad=1.0"};
  o.insert(o.end(), model.begin(), model.end());
  o.insert(o.end(), layout.begin(), layout.end());
  StrataConfig cfg = StrataConfig::from_yaml_text("optimizer:\n  lr: 1.0e-2\ndata:\n  mock_data: true\n", o, "cp.yaml");
  return cfg.validate(world);
}

// The groups of a layout, built once per layout (communicator splits are collective).
const ParallelGroups& groups_for(const ResolvedConfig& cfg) {
  static std::map<std::string, ParallelGroups> cache;
  const ParallelConfig& p = *cfg.parallel;
  const std::string key = std::to_string(p.tensor_model_parallel_size) + "/" + std::to_string(p.context_parallel_size) +
                          "/" + std::to_string(p.pipeline_model_parallel_size);
  auto it = cache.find(key);
  if (it == cache.end()) it = cache.emplace(key, build_parallel_groups(p, world_comm())).first;
  return it->second;
}

struct Run {
  std::vector<double> losses, grad_norms;
  std::map<std::string, Tensor> grads;  // global (gathered over tp) gradients after the last step
};

Run train(const ResolvedConfig& cfg, const ParallelGroups& groups) {
  mpitest::LayoutRun t = mpitest::train_layout(cfg, groups, kVocab);
  return Run{std::move(t.losses), std::move(t.grad_norms), std::move(t.grads)};
}

void check_equivalence(const std::vector<std::string>& model, const std::vector<std::string>& layout) {
  const int64_t world = world_comm()->size();
  const ResolvedConfig base_cfg = cp_config(1, model, {});
  const ResolvedConfig par_cfg = cp_config(world, model, layout);
  const ParallelGroups& groups = groups_for(par_cfg);
  REQUIRE(groups.cp.size() == par_cfg.parallel->context_parallel_size);
  const Run base = train(base_cfg, ParallelGroups::single_process());
  const Run par = train(par_cfg, groups);
  REQUIRE(base.losses.size() == 10);
  REQUIRE(par.losses.size() == base.losses.size());
  for (size_t i = 0; i < base.losses.size(); ++i) {
    INFO("step " << i + 1 << " loss " << par.losses[i] << " vs " << base.losses[i] << ", grad norm "
                 << par.grad_norms[i] << " vs " << base.grad_norms[i]);
    CHECK(std::fabs(par.losses[i] - base.losses[i]) <= 1e-5 * std::fabs(base.losses[i]));
    CHECK(std::fabs(par.grad_norms[i] - base.grad_norms[i]) <= 1e-5 * std::fabs(base.grad_norms[i]));
  }
  // Gradients after step 1 (before any update has made the runs differ by rounding).
  const Run base1 = train(cp_config(1, model, {"training.train_iters=1"}), ParallelGroups::single_process());
  std::vector<std::string> layout1 = layout;
  layout1.push_back("training.train_iters=1");
  const Run par1 = train(cp_config(world, model, layout1), groups);
  // Every parameter of this rank (all of them without pipeline stages; its stage's with).
  if (par_cfg.parallel->pipeline_model_parallel_size == 1) REQUIRE(par1.grads.size() == base1.grads.size());
  REQUIRE(!par1.grads.empty());
  for (const auto& [name, g] : par1.grads) {
    INFO(name);
    REQUIRE(base1.grads.count(name) == 1);
    CHECK(rel_err(g, base1.grads.at(name)) <= 1e-5);
  }
}

}  // namespace

TEST_CASE("cp attention: all-gather and ring equal the unsharded attention (fwd + bwd)", "[cp][cp4]") {
  check_attention_all();
}

TEST_CASE("cp layout equivalence: CP2 all_gather, LayerNorm/GeLU/learned positions/tied", "[cp]") {
  check_equivalence(kGelu, {"parallel.context_parallel_size=2", "parallel.cp_comm_type=all_gather"});
}
TEST_CASE("cp layout equivalence: CP2 p2p, LayerNorm/GeLU/learned positions/tied", "[cp]") {
  check_equivalence(kGelu, {"parallel.context_parallel_size=2", "parallel.cp_comm_type=p2p"});
}
TEST_CASE("cp layout equivalence: CP2 all_gather, RMSNorm/SwiGLU/GQA/RoPE/qk-norm/untied", "[cp]") {
  check_equivalence(kSwiglu, {"parallel.context_parallel_size=2", "parallel.cp_comm_type=all_gather"});
}
TEST_CASE("cp layout equivalence: CP2 p2p, RMSNorm/SwiGLU/GQA/RoPE/qk-norm/untied", "[cp]") {
  check_equivalence(kSwiglu, {"parallel.context_parallel_size=2", "parallel.cp_comm_type=p2p"});
}

TEST_CASE("cp layout equivalence: CP2 x TP2 with sequence parallelism", "[cp4]") {
  for (const char* type : {"all_gather", "p2p"}) {
    INFO(type);
    check_equivalence(kSwiglu, {"parallel.context_parallel_size=2", "parallel.tensor_model_parallel_size=2",
                                "parallel.sequence_parallel=true", std::string("parallel.cp_comm_type=") + type});
  }
  check_equivalence(kGelu, {"parallel.context_parallel_size=2", "parallel.tensor_model_parallel_size=2",
                            "parallel.sequence_parallel=true"});
}

TEST_CASE("cp layout equivalence: CP2 x DP2", "[cp4]") {
  check_equivalence(kGelu, {"parallel.context_parallel_size=2", "parallel.cp_comm_type=p2p"});
}

TEST_CASE("cp layout equivalence: CP2 x PP2 (stages exchange the local shard)", "[cp4]") {
  check_equivalence(kSwiglu, {"parallel.context_parallel_size=2", "parallel.pipeline_model_parallel_size=2",
                              "parallel.cp_comm_type=all_gather"});
}

TEST_CASE("cp generation is rejected with a clear error", "[cp]") {
  const ResolvedConfig cfg = cp_config(world_comm()->size(), kGelu, {"parallel.context_parallel_size=2"});
  auto model_holder = make_gpt_model(cfg, Device::cpu(), groups_for(cfg));
  GPTModel& model = *model_holder;
  model.init_parameters(1);
  CHECK_THROWS_WITH(model.logits_for(Tensor::zeros({1, 4}, DType::I64), nullptr, 0),
                    Catch::Contains("generation with context parallelism"));
}

}  // namespace strata
