// The Mamba2 mixer and layer (models/layers/mamba_mixer.h, mamba_layer.h) and the mamba_* config
// fields: Megatron's parameter names and shapes, the init rules (dt_bias, A_log, D, conv bounds),
// gradients of the whole mixer (input and every parameter) against central finite differences in
// f64, f32 against f64, a stack of two Mamba layers generating with the recurrent state cache
// exactly as the full forward, config errors naming the field; unequal row blocks (in_proj's parts)
// in the Philox init and the checkpoint regions.
#include <cmath>

#include "kernels/elementwise.h"
#include "models/layers/mamba_layer.h"
#include "models/layers/mamba_mixer.h"
#include "models/config/mamba_config.h"
#include "test_helpers.h"
#include "training/checkpointing/checkpoint_pieces.h"

using namespace strata;
using namespace strata::layers;
using strata::test::check_gradient;
using strata::test::max_abs_diff;
using strata::test::normalized_error;
using strata::test::numeric_gradient;
using strata::test::random_tensor;

namespace {
ResolvedModelConfig small_config() {
  ModelConfig c;
  c.num_layers = 2;
  c.hidden_size = 8;
  c.num_attention_heads = 2;
  c.mamba_head_dim = 4;  // d_inner 16, 4 heads
  c.mamba_num_groups = 2;
  c.mamba_state_dim = 3;
  c.mamba_chunk_size = 3;
  c.normalization = Normalization::RMSNorm;
  c.hidden_dropout = 0.0;
  return ResolvedModelConfig(c);
}
LayerEnv env_of(DType dt) {
  LayerEnv e;
  e.dtype = dt;
  return e;
}
template <class M>
std::vector<Parameter*> params_of(M& m) {
  std::vector<Parameter*> v;
  m.collect(v);
  return v;
}
template <class M>
void init_all(M& m, uint64_t seed) {
  for (Parameter* p : params_of(m)) init_parameter(*p, seed);
}
double weighted_sum(const Tensor& a, const Tensor& w) {
  const auto x = a.to_vector(), y = w.to_vector();
  double s = 0;
  for (size_t i = 0; i < x.size(); ++i) s += x[i] * y[i];
  return s;
}
}  // namespace

TEST_CASE("mamba config: Megatron defaults and sizes", "[mamba]") {
  ModelConfig c;
  CHECK(c.mamba_head_dim == 64);
  CHECK(c.mamba_state_dim == 128);
  CHECK(c.mamba_num_groups == 8);
  CHECK(!c.mamba_num_heads.has_value());
  CHECK(c.mamba_chunk_size == 128);
  c.hidden_size = 1024;
  MambaDims d = mamba_dims(c);
  CHECK(d.d_inner == 2048);
  CHECK(d.heads == 32);
  CHECK(d.conv_dim() == 2048 + 2 * 8 * 128);
  CHECK(d.in_proj_out() == 2 * 2048 + 2 * 8 * 128 + 32);
  c.mamba_num_heads = 16;
  d = mamba_dims(c);
  CHECK(d.d_inner == 1024);
  CHECK(d.heads == 16);
}

TEST_CASE("mamba config: errors name the field", "[mamba]") {
  ModelConfig c;
  c.hidden_size = 96;  // d_inner 192 = 3 heads of 64
  c.mamba_num_groups = 3;
  CHECK_NOTHROW(check_mamba_config(c, 1));
  c.mamba_num_groups = 8;
  c.hidden_size = 100;  // d_inner 200
  CHECK_THROWS_WITH(check_mamba_config(c, 1), Catch::Contains("model.mamba_head_dim"));
  c.hidden_size = 1024;  // 32 heads, 8 groups
  c.mamba_num_groups = 6;
  CHECK_THROWS_WITH(check_mamba_config(c, 1), Catch::Contains("model.mamba_num_groups: 6 does not divide"));
  c.mamba_num_groups = 8;
  c.mamba_num_heads = 24;
  CHECK_THROWS_WITH(check_mamba_config(c, 16), Catch::Contains("model.mamba_num_heads"));
  c.mamba_num_heads = 32;
  CHECK_THROWS_WITH(check_mamba_config(c, 16),
                    Catch::Contains("model.mamba_num_groups: 8 is not divisible by parallel.tensor_model_parallel_size (16)"));
  CHECK_NOTHROW(check_mamba_config(c, 8));
  // The mixer checks before it allocates anything.
  ModelConfig raw_bad = *small_config();
  raw_bad.mamba_num_groups = 3;  // 4 heads
  const ResolvedModelConfig bad(raw_bad);  // no M layer: the model section's resolution leaves mamba_* alone
  CHECK_THROWS_WITH(MambaMixer("decoder.layers.0.mixer", bad, env_of(DType::F64), ParallelGroups{}),
                    Catch::Contains("model.mamba_num_groups: 3 does not divide"));
}

TEST_CASE("mamba mixer: Megatron names, shapes and init rules", "[mamba]") {
  ModelConfig raw = *small_config();
  raw.mamba_state_dim = 16;  // enough draws for the init ranges below
  raw.hidden_size = 32;
  raw.mamba_head_dim = 8;  // d_inner 64, 8 heads
  const ResolvedModelConfig c(raw);
  MambaMixer m("decoder.layers.0.mixer", c, env_of(DType::F64), ParallelGroups{});
  init_all(m, 7);
  std::vector<std::string> names;
  for (Parameter* p : params_of(m)) names.push_back(p->name + " " + p->value.shape().str());
  const std::string pre = "decoder.layers.0.mixer.";
  CHECK(names == std::vector<std::string>{
                     pre + "in_proj.layer_norm_weight [32]", pre + "in_proj.weight [200, 32]",
                     pre + "conv1d.weight [128, 1, 4]", pre + "conv1d.bias [128]", pre + "dt_bias [8]",
                     pre + "A_log [8]", pre + "D [8]", pre + "norm.weight [64]", pre + "out_proj.weight [32, 64]"});
  for (double v : m.dt_bias.value.to_vector()) {
    const double dt = std::log1p(std::exp(v));
    CHECK(dt >= 1e-3 * (1 - 1e-12));
    CHECK(dt <= 0.1 * (1 + 1e-12));
  }
  for (double v : m.A_log.value.to_vector()) {
    CHECK(v >= 0.0);
    CHECK(v <= std::log(16.0));
  }
  for (double v : m.D.value.to_vector()) CHECK(v == 1.0);
  for (double v : m.norm_weight.value.to_vector()) CHECK(v == 1.0);
  double conv_max = 0;
  for (double v : m.conv1d_weight.value.to_vector()) conv_max = std::max(conv_max, std::abs(v));
  CHECK(conv_max <= 0.5);
  CHECK(conv_max > 0.4);  // 512 draws of U(±0.5)
  CHECK(m.out_proj.weight.init_std == Approx(0.02 / std::sqrt(2.0)));  // multiplier 1.0, 2 layers
  CHECK(m.in_proj.weight.init_std == Approx(0.02));
}

TEST_CASE("mamba mixer: gradients match finite differences (f64)", "[mamba]") {
  const ResolvedModelConfig c = small_config();
  MambaMixer m("decoder.layers.0.mixer", c, env_of(DType::F64), ParallelGroups{});
  init_all(m, 3);
  // Larger projections than the default init so every path carries a visible gradient.
  for (Parameter* p : {&m.in_proj.weight, &m.out_proj.weight}) p->value.copy_(random_tensor(p->value.shape(), 9, -0.6, 0.6));
  const int64_t s = 7, b = 2;
  const Tensor x = random_tensor({s, b, c->hidden_size}, 5), w = random_tensor({s, b, c->hidden_size}, 6);
  auto loss = [&]() { return weighted_sum(m.forward(x, nullptr, nullptr), w); };
  MambaMixer::Saved sv;
  const Tensor out = m.forward(x, nullptr, &sv);
  CHECK(normalized_error(out, Tensor::zeros(out.shape(), DType::F64)) > 0.5);
  const Tensor dx = m.backward(sv, w);
  check_gradient("dx", dx, numeric_gradient(x, loss), 1e-7);
  for (Parameter* p : params_of(m)) check_gradient(p->name.c_str(), p->main_grad, numeric_gradient(p->value, loss), 1e-7);
}

TEST_CASE("mamba mixer: f32 agrees with f64", "[mamba]") {
  const ResolvedModelConfig c = small_config();
  MambaMixer m64("decoder.layers.0.mixer", c, env_of(DType::F64), ParallelGroups{});
  MambaMixer m32("decoder.layers.0.mixer", c, env_of(DType::F32), ParallelGroups{});
  init_all(m64, 3);
  init_all(m32, 3);
  const Tensor x = random_tensor({9, 2, c->hidden_size}, 5);
  MambaMixer::Saved s64, s32;
  const Tensor y64 = m64.forward(x, nullptr, &s64), y32 = m32.forward(x.to(DType::F32), nullptr, &s32);
  CHECK(normalized_error(y32, y64) < 1e-5);
  const Tensor dy = random_tensor(y64.shape(), 8);
  const Tensor dx64 = m64.backward(s64, dy), dx32 = m32.backward(s32, dy.to(DType::F32));
  CHECK(normalized_error(dx32, dx64) < 1e-4);
  const auto p64 = params_of(m64), p32 = params_of(m32);
  for (size_t i = 0; i < p64.size(); ++i) {
    INFO(p64[i]->name);
    CHECK(normalized_error(p32[i]->main_grad, p64[i]->main_grad) < 1e-4);
  }
}

TEST_CASE("mamba mixer: bf16 within bf16 tolerance of f64, A_log and D kept in f32", "[mamba]") {
  const ResolvedModelConfig c = small_config();
  MambaMixer m64("decoder.layers.0.mixer", c, env_of(DType::F64), ParallelGroups{});
  MambaMixer m16("decoder.layers.0.mixer", c, env_of(DType::BF16), ParallelGroups{});
  init_all(m64, 3);
  init_all(m16, 3);
  CHECK(m16.A_log.value.dtype() == DType::F32);
  CHECK(m16.D.value.dtype() == DType::F32);
  CHECK(m16.in_proj.weight.value.dtype() == DType::BF16);
  // The f64 mixer with the bf16-rounded parameters, so only the computation's rounding differs.
  const auto p64 = params_of(m64), p16 = params_of(m16);
  for (size_t i = 0; i < p64.size(); ++i) p64[i]->value.copy_(p16[i]->value);
  const Tensor x = random_tensor({9, 2, c->hidden_size}, 5, -1, 1, DType::BF16);
  MambaMixer::Saved s64, s16;
  const Tensor y64 = m64.forward(x.to(DType::F64), nullptr, &s64), y16 = m16.forward(x, nullptr, &s16);
  CHECK(y16.dtype() == DType::BF16);
  CHECK(normalized_error(y16, y64) < 3e-2);
  const Tensor dy = random_tensor(y64.shape(), 8, -1, 1, DType::BF16);
  CHECK(normalized_error(m16.backward(s16, dy), m64.backward(s64, dy.to(DType::F64))) < 5e-2);
}

TEST_CASE("mamba layer: generation with the state cache equals the full forward (stack of 2)", "[mamba]") {
  const ResolvedModelConfig c = small_config();
  std::vector<std::unique_ptr<MambaLayer>> stack;
  for (int64_t i = 0; i < 2; ++i) {
    stack.push_back(std::make_unique<MambaLayer>(i, c, env_of(DType::F64), ParallelGroups{}));
    init_all(*stack.back(), 11);
  }
  CHECK(stack[1]->mixer().in_proj.weight.name == "decoder.layers.1.mixer.in_proj.weight");
  const int64_t s = 8, b = 2;
  const Tensor x = random_tensor({s, b, c->hidden_size}, 4);
  DropoutKeys keys;
  Tensor full = x;
  for (auto& l : stack) full = l->forward(full, keys, 0, nullptr, nullptr);
  std::vector<LayerKVCache> caches;
  for (auto& l : stack) caches.push_back(l->make_cache(b, s));
  // A prompt of 3 tokens, then one token at a time.
  for (int64_t t = 0; t < s;) {
    const int64_t n = t == 0 ? 3 : 1;
    Tensor h = x.narrow(0, t, n).contiguous();
    for (size_t i = 0; i < stack.size(); ++i) h = stack[i]->forward(h, keys, t, &caches[i], nullptr);
    CHECK(max_abs_diff(h, full.narrow(0, t, n).contiguous()) < 1e-13);
    t += n;
  }
  CHECK(caches[0].length == s);
}

TEST_CASE("mamba layer: residual and backward through the layer", "[mamba]") {
  const ResolvedModelConfig c = small_config();
  MambaLayer layer(0, c, env_of(DType::F64), ParallelGroups{});
  init_all(layer, 2);
  const Tensor x = random_tensor({5, 2, c->hidden_size}, 1), w = random_tensor({5, 2, c->hidden_size}, 2);
  DropoutKeys keys;
  MambaLayer::Saved sv;
  const Tensor y = layer.forward(x, keys, 0, nullptr, &sv);
  const Tensor m = layer.mixer().forward(x, nullptr, nullptr);
  Tensor sum = Tensor::empty(x.shape(), DType::F64);
  kernels::add(x, m, sum);
  CHECK(max_abs_diff(y, sum) == 0.0);
  const Tensor dx = layer.backward(sv, w);
  auto loss = [&]() { return weighted_sum(layer.forward(x, keys, 0, nullptr, nullptr), w); };
  check_gradient("dx", dx, numeric_gradient(x, loss), 1e-7);
}

TEST_CASE("mamba: unequal row blocks (in_proj parts) in init and checkpoint regions", "[mamba]") {
  // A rank's shard of a global [10, 2] tensor in parts of 6 and 4 rows over tp = 2, rank 1:
  // rows 3..5 of part 0 and rows 8..9 of part 1.
  Parameter p;
  p.name = "w";
  p.global_shape = Shape{10, 2};
  p.value = Tensor::zeros({5, 2}, DType::F64);
  p.init_std = 1.0;
  GlobalSlice a{Shape{10, 2}, Shape{3, 0}}, b{Shape{10, 2}, Shape{8, 0}};
  p.blocks = {a, b};
  p.block_rows = {3, 2};
  p.slice = a;
  p.tensor_parallel = true;
  init_parameter(p, 5);
  Parameter whole;
  whole.name = "w";
  whole.global_shape = Shape{10, 2};
  whole.value = Tensor::zeros({10, 2}, DType::F64);
  whole.init_std = 1.0;
  init_parameter(whole, 5);
  CHECK(max_abs_diff(p.value.narrow(0, 0, 3).contiguous(), whole.value.narrow(0, 3, 3).contiguous()) == 0.0);
  CHECK(max_abs_diff(p.value.narrow(0, 3, 2).contiguous(), whole.value.narrow(0, 8, 2).contiguous()) == 0.0);
  const std::vector<LocalRegion> r = parameter_regions(p, p.value);
  REQUIRE(r.size() == 2);
  CHECK(r[0].box.offsets == std::vector<int64_t>{3, 0});
  CHECK(r[0].box.shape == std::vector<int64_t>{3, 2});
  CHECK(r[1].box.offsets == std::vector<int64_t>{8, 0});
  CHECK(r[1].box.shape == std::vector<int64_t>{2, 2});
}
