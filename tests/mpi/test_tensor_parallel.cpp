// Tensor and sequence parallelism under mpirun (tp = the world size): column/row-parallel linear
// layers (replicated, sequence-parallel, SwiGLU-chunked) against the full layer in f64; the gather
// of every initial parameter shard equal to the unsharded init bit for bit; and layout
// equivalence of a tiny GPT (f32, dropout on) — each rank first trains the single-rank baseline
// locally (no communication), then the TP / TP+SP layout with the real group, and compares the
// losses of 10 steps (1e-5 relative), the gathered gradients after step 1 (1e-5 of the tensor's
// max) and the grad norms. Two models: LayerNorm/GeLU/learned positions/tied/biases and
// RMSNorm/SwiGLU/GQA/RoPE/qk-layernorm/untied.
// Reference: Megatron-Core tensor_parallel/layers.py, mappings.py, cross_entropy.py.
#include <algorithm>
#include <cmath>
#include <map>
#include <string>

#include "models/gpt/gpt_model.h"
#include "models/layers/linear.h"
#include "mpi_test_helpers.h"
#include "parallel/mpi_communicator.h"
#include "parallel/tensor_parallel.h"
#include "training/optimizer/optimizer.h"

namespace strata {
namespace {

// The tp group over every launched rank (a dedicated duplicate of MPI_COMM_WORLD).
ProcessGroup world_tp() {
  static std::shared_ptr<Communicator> comm = make_mpi_world_communicator();
  std::vector<int> ranks(static_cast<size_t>(comm->size()));
  for (int i = 0; i < comm->size(); ++i) ranks[static_cast<size_t>(i)] = i;
  return ProcessGroup("tp", ranks, comm->rank(), comm);
}

Tensor random_tensor(const Shape& shape, uint64_t seed, DType dtype) {
  Tensor t = Tensor::empty(shape, dtype);
  fill_normal(t, philox::Key{seed, 7}, 0.0, 1.0);
  return t;
}

double max_abs_diff(const Tensor& a, const Tensor& b) {
  REQUIRE(a.shape() == b.shape());
  std::vector<double> x = a.to_vector(), y = b.to_vector();
  double m = 0;
  for (size_t i = 0; i < x.size(); ++i) m = std::max(m, std::fabs(x[i] - y[i]));
  return m;
}
double max_abs(const Tensor& a) {
  double m = 0;
  for (double v : a.to_vector()) m = std::max(m, std::fabs(v));
  return m;
}

// Full and parallel linear layers with the same global init; x, dy global, shard by mode.
void check_linear(layers::TensorParallelMode mode, bool sp, int64_t chunks, bool bias) {
  const ProcessGroup tp = world_tp();
  const int n = tp.size(), r = tp.rank();
  const int64_t s = 4 * n, b = 2, in = 6 * n, out = 4 * n * chunks;
  layers::LayerEnv env{DType::F64, Device::cpu(), false};
  layers::LayerEnv penv{DType::F64, Device::cpu(), sp};
  layers::Linear full("l", in, out, bias, 0.5, env, ProcessGroup::single("tp"));
  layers::Linear par("l", in, out, bias, 0.5, penv, tp, mode, chunks);
  for (Parameter* p : {&full.weight, &par.weight}) init_parameter(*p, 99);
  if (bias) {
    fill_normal(full.bias.value, philox::Key{5, 5}, 0.0, 1.0);
    par.bias.value.copy_(mode == layers::TensorParallelMode::Row
                             ? full.bias.value
                             : full.bias.value.reshape({chunks, out / chunks})
                                   .narrow(1, r * (out / chunks / n), out / chunks / n)
                                   .contiguous()
                                   .reshape({out / n}));
  }
  CHECK(max_abs_diff(tp::gather_parameter(par.weight, par.weight.value, tp), full.weight.value) == 0.0);

  Tensor x = random_tensor({s, b, in}, 1, DType::F64), dy = random_tensor({s, b, out}, 2, DType::F64);
  Tensor y = full.forward(x), dx = full.backward(x, dy);
  const bool col = mode == layers::TensorParallelMode::Column;
  // Column: x whole (sp: sequence shard), y columns of each chunk. Row: x columns, y whole (sp: shard).
  auto cols = [&](const Tensor& t, int64_t width, int64_t k) {  // rank r's part of each of k chunks
    const int64_t c = width / k, part = c / n;
    Tensor v = t.reshape({s, b, k, c}).narrow(3, r * part, part).contiguous();
    return v.reshape({s, b, k * part});
  };
  auto rows = [&](const Tensor& t) { return sp ? t.narrow(0, r * (s / n), s / n).contiguous() : t; };
  Tensor px = col ? rows(x) : cols(x, in, 1);
  Tensor pdy = col ? cols(dy, out, chunks) : rows(dy);
  Tensor py = par.forward(px);
  Tensor pdx = par.backward(px, pdy);
  Tensor ey = col ? cols(y, out, chunks) : rows(y);
  Tensor edx = col ? rows(dx) : cols(dx, in, 1);
  CHECK(max_abs_diff(py, ey) < 1e-12);
  CHECK(max_abs_diff(pdx, edx) < 1e-12);
  CHECK(max_abs_diff(tp::gather_parameter(par.weight, par.weight.main_grad, tp), full.weight.main_grad) < 1e-12);
  if (bias) {
    Tensor eb = col ? full.bias.main_grad.reshape({chunks, out / chunks})
                          .narrow(1, r * (out / chunks / n), out / chunks / n)
                          .contiguous()
                          .reshape({out / n})
                    : full.bias.main_grad;
    CHECK(max_abs_diff(par.bias.main_grad, eb) < 1e-12);
  }
}

TEST_CASE("tp linear: column and row parallel equal the full layer", "[tp]") {
  using M = layers::TensorParallelMode;
  for (bool sp : {false, true}) {
    INFO("sequence_parallel " << sp);
    check_linear(M::Column, sp, 1, true);
    check_linear(M::Column, sp, 2, true);  // SwiGLU fc1: [gate_r; up_r]
    check_linear(M::Row, sp, 1, true);
    check_linear(M::Row, sp, 1, false);
  }
}

ModelConfig config_gelu() {
  ModelConfig m;
  m.num_layers = 2;
  m.hidden_size = 32;
  m.num_attention_heads = 4;
  m.vocab_size = 120;
  m.make_vocab_size_divisible_by = 16;  // tp2: 128 (64 rows per rank)
  m.seq_length = 16;
  m.normalization = Normalization::LayerNorm;
  m.position_embedding_type = PositionEmbeddingType::LearnedAbsolute;
  m.add_bias_linear = true;
  m.hidden_dropout = 0.1;
  m.attention_dropout = 0.1;
  return m;
}

ModelConfig config_swiglu() {
  ModelConfig m;
  m.num_layers = 2;
  m.hidden_size = 32;
  m.num_attention_heads = 4;
  m.group_query_attention = true;
  m.num_query_groups = 2;
  m.vocab_size = 120;
  m.make_vocab_size_divisible_by = 16;
  m.seq_length = 16;
  m.normalization = Normalization::RMSNorm;
  m.position_embedding_type = PositionEmbeddingType::Rope;
  m.swiglu = true;  // ffn 64: fc1 [128, 32], each rank [gate_r; up_r]
  m.qk_layernorm = true;
  m.untie_embeddings_and_output_weights = true;
  m.add_bias_linear = false;
  m.hidden_dropout = 0.1;
  m.attention_dropout = 0.1;
  return m;
}

ParallelGroups tp_groups() {
  ParallelGroups g;
  g.tp = world_tp();
  g.world_size = g.tp.size();
  g.global_rank = g.tp.ranks()[static_cast<size_t>(g.tp.rank())];
  return g;
}

GPTModelOptions model_options(bool sp) {
  GPTModelOptions o;
  o.dtype = DType::F32;
  o.seed = 4321;
  o.global_batch_size = 4;
  o.sequence_parallel = sp;
  return o;
}

constexpr int64_t kMicro = 2, kB = 2, kS = 16;

Batch make_batch(int64_t step, int64_t mb, int64_t vocab) {
  std::vector<int64_t> tok(static_cast<size_t>(kB * kS)), lab(tok.size());
  uint64_t x = static_cast<uint64_t>(step * 100 + mb) * 6364136223846793005ull + 1442695040888963407ull;
  for (size_t i = 0; i < tok.size(); ++i) {
    x = x * 6364136223846793005ull + 1442695040888963407ull;
    tok[i] = static_cast<int64_t>((x >> 33) % static_cast<uint64_t>(vocab));
    x = x * 6364136223846793005ull + 1442695040888963407ull;
    lab[i] = static_cast<int64_t>((x >> 33) % static_cast<uint64_t>(vocab));
  }
  Batch b;
  b.tokens = Tensor::from_data(tok, Shape{kB, kS});
  b.labels = Tensor::from_data(lab, Shape{kB, kS});
  b.loss_mask = Tensor::full({kB, kS}, 1.0, DType::F32);
  b.first_sample_index = (step - 1) * kMicro * kB + mb * kB;
  return b;
}

struct RunResult {
  std::vector<double> losses, grad_norms;
  std::map<std::string, Tensor> grads;  // gathered global gradients after step 1 (before the update)
};

// `steps` iterations of kMicro micro-batches (mean loss over tokens and micro-batches), AdamW.
RunResult train(const ModelConfig& mc, const ParallelGroups& g, bool sp, int steps) {
  GPTModel model(mc, model_options(sp), g);
  model.init_parameters(4321);
  AdamWSettings st;
  st.clip_grad = 1.0;
  st.count_zeros = true;
  AdamWOptimizer opt(model.parameters(), st, ProcessGroup::single("dp"));
  opt.set_model_parallel_group(g.tp, g.tp.rank());
  RunResult out;
  const double scale = 1.0 / static_cast<double>(kB * kS * kMicro);
  for (int step = 1; step <= steps; ++step) {
    opt.zero_grad();
    double loss = 0;
    for (int64_t mb = 0; mb < kMicro; ++mb) {
      auto ctx = model.make_context(step, mb, true);
      Tensor l = model.forward(*ctx, make_batch(step, mb, *mc.vocab_size));
      for (double v : l.to_vector()) loss += v * scale;
      model.backward(*ctx, Tensor::full({kB, kS}, scale, DType::F32));
    }
    if (step == 1)
      for (Parameter* p : model.parameters()) out.grads[p->name] = tp::gather_parameter(*p, p->main_grad, g.tp).clone();
    OptimizerStepResult r = opt.step(3e-3);
    REQUIRE_FALSE(r.skipped);
    out.losses.push_back(loss);
    out.grad_norms.push_back(r.grad_norm);
  }
  return out;
}

void check_layout_equivalence(const ModelConfig& mc, bool sp) {
  const int steps = 10;
  RunResult base = train(mc, ParallelGroups::single_process(), false, steps);
  RunResult par = train(mc, tp_groups(), sp, steps);
  REQUIRE(par.losses.size() == base.losses.size());
  for (size_t i = 0; i < base.losses.size(); ++i) {
    INFO("step " << i + 1 << " loss " << par.losses[i] << " vs " << base.losses[i]);
    CHECK(std::fabs(par.losses[i] - base.losses[i]) <= 1e-5 * std::fabs(base.losses[i]));
    CHECK(std::fabs(par.grad_norms[i] - base.grad_norms[i]) <= 1e-5 * std::fabs(base.grad_norms[i]));
  }
  CHECK(base.losses.back() < base.losses.front());  // it trains
  REQUIRE(par.grads.size() == base.grads.size());
  for (const auto& [name, g] : base.grads) {
    INFO(name);
    REQUIRE(par.grads.count(name) == 1);
    const Tensor& pg = par.grads.at(name);
    REQUIRE(pg.shape() == g.shape());
    CHECK(max_abs_diff(pg, g) <= 1e-5 * max_abs(g) + 1e-9);
  }
}

TEST_CASE("tp init: the gathered shards equal the unsharded init exactly", "[tp]") {
  for (const ModelConfig& mc : {config_gelu(), config_swiglu()}) {
    GPTModel single(mc, model_options(false), ParallelGroups::single_process());
    GPTModel par(mc, model_options(false), tp_groups());
    const ProcessGroup tpg = world_tp();
    single.init_parameters(77);
    par.init_parameters(77);
    auto sp = single.parameters(), pp = par.parameters();
    REQUIRE(sp.size() == pp.size());
    int sharded = 0;
    for (size_t i = 0; i < sp.size(); ++i) {
      INFO(sp[i]->name);
      REQUIRE(pp[i]->name == sp[i]->name);
      Tensor g = tp::gather_parameter(*pp[i], pp[i]->value, tpg);
      CHECK(mpitest::same_bits(g, sp[i]->value));
      sharded += pp[i]->tensor_parallel ? 1 : 0;
    }
    CHECK(sharded > 0);
  }
}

TEST_CASE("tp layout equivalence: TP, LayerNorm/GeLU/learned positions/tied", "[tp][tp4]") {
  check_layout_equivalence(config_gelu(), false);
}
TEST_CASE("tp layout equivalence: TP+SP, LayerNorm/GeLU/learned positions/tied", "[tp][tp4]") {
  check_layout_equivalence(config_gelu(), true);
}
TEST_CASE("tp layout equivalence: TP, RMSNorm/SwiGLU/GQA/RoPE/qk-norm/untied", "[tp]") {
  check_layout_equivalence(config_swiglu(), false);
}
TEST_CASE("tp layout equivalence: TP+SP, RMSNorm/SwiGLU/GQA/RoPE/qk-norm/untied", "[tp]") {
  check_layout_equivalence(config_swiglu(), true);
}

TEST_CASE("tp generation is rejected with a clear error", "[tp]") {
  GPTModel par(config_gelu(), model_options(false), tp_groups());
  par.init_parameters(1);
  CHECK_THROWS_WITH(par.logits_for(Tensor::zeros({1, 4}, DType::I64), nullptr, 0),
                    Catch::Contains("generation with tensor parallelism"));
}

}  // namespace
}  // namespace strata
