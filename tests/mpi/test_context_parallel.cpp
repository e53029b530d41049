// Context parallelism under mpirun (parallel/context_parallel.h). Every rank computes the
// unsharded reference locally (no communication), then the context-parallel version with the
// real groups, and compares:
//   - attention alone (cp = the world size), every cp_comm_type (all_gather, p2p ring, a2a, and
//     a2a+p2p with every split of the world into inner × outer groups: 2×1 and 1×2 at np 2, 2×2,
//     4×1 and 1×4 at np 4): out and lse of the local rows, dq of the local rows, dk/dv of the local
//     rows after the reduce-scatter / ring return / inverse all-to-all, against the unsharded
//     kernel (causal, GQA, attention dropout, packed documents, value head dim dv = 5 next to
//     q/k head dim d = 8 as in multi-latent attention; sliding windows shorter than a chunk and
//     than the sequence, attention sinks off-by-one and learnable, whose gradient shares summed
//     over the cp group equal the unsharded gradient); f64 within 1e-12, f32 within 2e-6 of the
//     tensor's largest element;
//   - layout equivalence of a tiny GPT trained by the real Trainer (f32, hidden and attention
//     dropout 0.1, 10 steps): CP2 (np 2) with LayerNorm/GeLU/learned positions/tied and with
//     RMSNorm/SwiGLU/GQA/RoPE/qk-norm/untied, for all_gather, p2p and a2a; CP2×TP2 with sequence
//     parallelism (all_gather, p2p, a2a), CP2×DP2, CP2×PP2 and CP4 a2a+p2p with sizes 2 2 (np 4). Losses within 1e-5 relative of the single-rank run, gradients
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

// Document starts of two samples (global positions): documents of 5, 1, 9, 5, 1, 9 … tokens in
// sample 0, one boundary at 3s/4 in sample 1.
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

// a2a+p2p's levels over the world cp group: inner groups of `inner` consecutive ranks.
cp::HierarchicalGroups world_levels(int inner) {
  const int r = world_comm()->rank(), n = world_comm()->size();
  auto level = [&](const char* name, int color) {
    std::vector<int> ranks;
    for (int i = 0; i < n; ++i)
      if ((std::string(name) == "cp_a2a" ? i / inner : i % inner) == color) ranks.push_back(i);
    std::shared_ptr<Communicator> c = world_comm()->split(color, r);
    return ranks.size() == 1 ? ProcessGroup::single(name, r) : ProcessGroup(name, ranks, r, c);
  };
  cp::HierarchicalGroups h;
  h.a2a = level("cp_a2a", r / inner);
  h.p2p = level("cp_p2p", r % inner);
  return h;
}

// window_left: the sliding window (-1: none); sink: 0 none, 1 off-by-one (zeros), 2 learnable
// (random logits; the ranks' shares of its gradient, summed over the cp group, against the
// unsharded gradient).
void check_attention(CpCommType type, const cp::HierarchicalGroups& levels, DType dt, int64_t hkv, double dropout,
                     bool docs, int64_t value_dim, int64_t window_left = -1, int sink = 0) {
  const ProcessGroup cpg = world_cp();
  const int n = cpg.size(), r = cpg.rank();
  const int64_t s = 8 * n, b = 2, hq = 4, d = 8;  // d: q/k head dim; value_dim: v head dim
  const DType st = dt == DType::F64 ? DType::F64 : DType::F32;
  kernels::AttentionParams p;
  p.causal = true;
  p.dropout_p = dropout;
  p.dropout_key = philox::Key{9, 1};
  if (docs) p.document_start = document_starts(s);
  p.window_left = window_left;
  if (sink > 0) p.softmax_offset = sink == 1 ? Tensor::zeros({hq}, st) : random({hq}, 5, st);
  Tensor q = random({s, b, hq, d}, 1, dt), k = random({s, b, hkv, d}, 2, dt);
  Tensor v = random({s, b, hkv, value_dim}, 3, dt);
  Tensor dout = random({s, b, hq, value_dim}, 4, dt);
  Tensor out = Tensor::empty(dout.shape(), dt), lse = Tensor::empty({b, hq, s}, st);
  kernels::attention_forward(q, k, v, out, lse, p);
  Tensor dq = Tensor::empty(q.shape(), dt), dk = Tensor::empty(k.shape(), dt), dv = Tensor::empty(v.shape(), dt);
  kernels::AttentionParams pb = p;
  if (sink > 0) pb.softmax_offset_grad = Tensor::zeros({hq}, st);
  kernels::attention_backward(q, k, v, out, dout, lse, dq, dk, dv, pb);

  auto local = [&](const Tensor& t) { return cp::split_sequence(t, 0, n, r); };
  kernels::AttentionParams lp = p;
  if (docs) lp.document_start = cp::split_sequence(p.document_start, 1, n, r);
  Tensor lq = local(q), lk = local(k), lv = local(v), ldout = local(dout);
  Tensor lout = Tensor::empty(ldout.shape(), dt), llse = Tensor::empty({b, hq, s / n}, st);
  cp::attention_forward(lq, lk, lv, lout, llse, lp, cpg, type, levels);
  Tensor ldq = Tensor::empty(lq.shape(), dt), ldk = Tensor::empty(lk.shape(), dt), ldv = Tensor::empty(lv.shape(), dt);
  if (sink > 0) lp.softmax_offset_grad = Tensor::zeros({hq}, st);
  cp::attention_backward(lq, lk, lv, lout, ldout, llse, ldq, ldk, ldv, lp, cpg, type, levels);
  const double tol = dt == DType::F64 ? 1e-12 : 2e-6;
  CHECK(rel_err(lout, local(out)) <= tol);
  CHECK(rel_err(llse, cp::split_sequence(lse, 2, n, r)) <= tol);
  CHECK(rel_err(ldq, local(dq)) <= tol);
  CHECK(rel_err(ldk, local(dk)) <= tol);
  CHECK(rel_err(ldv, local(dv)) <= tol);
  if (sink > 0) {  // this rank's share; the sum over the cp group is the gradient
    Tensor total = lp.softmax_offset_grad.clone();
    cpg.all_reduce(total);
    CHECK(rel_err(total, pb.softmax_offset_grad) <= tol);
  }
}

void check_attention_all() {
  const int n = world_comm()->size();
  struct Case {
    CpCommType type;
    int inner;  // a2a+p2p: the a2a group size
  };
  std::vector<Case> cases = {{CpCommType::AllGather, 0}, {CpCommType::P2P, 0}, {CpCommType::A2A, 0}};
  for (int inner = 1; inner <= n; ++inner)
    if (n % inner == 0) cases.push_back({CpCommType::A2AP2P, inner});
  for (const Case& c : cases) {
    const cp::HierarchicalGroups levels = c.type == CpCommType::A2AP2P ? world_levels(c.inner) : cp::HierarchicalGroups{};
    const int a2a = c.type == CpCommType::A2A ? n : c.type == CpCommType::A2AP2P ? c.inner : 1;
    for (DType dt : {DType::F64, DType::F32})
      for (int64_t hkv : {4, 2}) {
        if (hkv % a2a != 0) continue;  // the a2a splits the KV heads too
        for (double dropout : {0.0, 0.2})
          for (bool docs : {false, true})
            for (int64_t value_dim : {8, 5}) {
              INFO(config::enum_to_string(std::span<const config::EnumName<CpCommType>>(kCpCommTypeNames), c.type)
                   << " inner " << c.inner << " " << dtype_name(dt) << " kv heads " << hkv << " dropout " << dropout
                   << " documents " << docs << " dv " << value_dim);
              check_attention(c.type, levels, dt, hkv, dropout, docs, value_dim);
            }
      }
    // Sliding windows shorter than a chunk (3) and than the sequence (11, chunks of 4), with and
    // without attention sinks (off-by-one, learnable), GQA, dropout, documents, dv = 5.
    struct Windowed {
      int64_t left;
      int sink;
    };
    for (const Windowed w : {Windowed{3, 0}, Windowed{11, 2}, Windowed{-1, 1}, Windowed{0, 2}})
      for (DType dt : {DType::F64, DType::F32})
        for (bool docs : {false, true}) {
          if (2 % a2a != 0) continue;
          INFO(config::enum_to_string(std::span<const config::EnumName<CpCommType>>(kCpCommTypeNames), c.type)
               << " inner " << c.inner << " " << dtype_name(dt) << " window " << w.left << " sink " << w.sink
               << " documents " << docs);
          check_attention(c.type, levels, dt, 2, 0.2, docs, 5, w.left, w.sink);
        }
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
  std::string key = std::to_string(p.tensor_model_parallel_size) + "/" + std::to_string(p.context_parallel_size) +
                    "/" + std::to_string(p.pipeline_model_parallel_size);
  for (int64_t h : p.hierarchical_context_parallel_sizes) key += "/h" + std::to_string(h);
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

TEST_CASE("cp attention: all-gather, ring, a2a and a2a+p2p equal the unsharded attention (fwd + bwd)", "[cp][cp4]") {
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
TEST_CASE("cp layout equivalence: CP2 a2a, LayerNorm/GeLU/learned positions/tied", "[cp]") {
  check_equivalence(kGelu, {"parallel.context_parallel_size=2", "parallel.cp_comm_type=a2a"});
}
TEST_CASE("cp layout equivalence: CP2 a2a, RMSNorm/SwiGLU/GQA/RoPE/qk-norm/untied", "[cp]") {
  check_equivalence(kSwiglu, {"parallel.context_parallel_size=2", "parallel.cp_comm_type=a2a"});
}
TEST_CASE("cp layout equivalence: CP4 a2a+p2p with hierarchical sizes 2 2", "[cp4]") {
  {  // Megatron's create_hierarchical_groups over cp ranks 0..3: a2a {0,1} {2,3}, p2p {0,2} {1,3}.
    const ResolvedConfig cfg = cp_config(4, kGelu, {"parallel.context_parallel_size=4", "parallel.cp_comm_type=a2a+p2p",
                                                    "parallel.hierarchical_context_parallel_sizes=[2, 2]"});
    const ParallelGroups& g = groups_for(cfg);
    const int r = world_comm()->rank();
    CHECK(g.cp_a2a.ranks() == (r < 2 ? std::vector<int>{0, 1} : std::vector<int>{2, 3}));
    CHECK(g.cp_p2p.ranks() == (r % 2 == 0 ? std::vector<int>{0, 2} : std::vector<int>{1, 3}));
    CHECK(g.cp_a2a.rank() == r % 2);
    CHECK(g.cp_p2p.rank() == r / 2);
  }
  for (const auto* model : {&kGelu, &kSwiglu})
    check_equivalence(*model, {"parallel.context_parallel_size=4", "parallel.cp_comm_type=a2a+p2p",
                               "parallel.hierarchical_context_parallel_sizes=[2, 2]"});
}

TEST_CASE("cp layout equivalence: CP2 x TP2 with sequence parallelism", "[cp4]") {
  for (const char* type : {"all_gather", "p2p"}) {
    INFO(type);
    check_equivalence(kSwiglu, {"parallel.context_parallel_size=2", "parallel.tensor_model_parallel_size=2",
                                "parallel.sequence_parallel=true", std::string("parallel.cp_comm_type=") + type});
  }
  // a2a with tp: the 2 heads of each tp rank split over cp (kGelu: no GQA, 4 heads).
  check_equivalence(kGelu, {"parallel.context_parallel_size=2", "parallel.tensor_model_parallel_size=2",
                            "parallel.sequence_parallel=true", "parallel.cp_comm_type=a2a"});
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
