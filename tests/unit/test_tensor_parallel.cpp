// Single-process pieces of tensor parallelism (models/parameter.h, models/layers/linear.h,
// parallel/tensor_parallel.h): a multi-block shard (SwiGLU [gate_r; up_r]) initialised block by
// block equals the corresponding rows of the unsharded init exactly; column/row modes at tp size 1
// are bit-identical to the replicated layer; the grad-norm duplicate rule; the mappings are
// identities on a group of one. The multi-rank checks are in tests/mpi/test_tensor_parallel.cpp.
#include <cstring>

#include "models/layers/linear.h"
#include "parallel/tensor_parallel.h"
#include "test_helpers.h"

namespace strata {
namespace {

bool same_bits(const Tensor& a, const Tensor& b) {
  return a.dtype() == b.dtype() && a.numel() == b.numel() &&
         std::memcmp(a.contiguous().data_ptr(), b.contiguous().data_ptr(), a.nbytes()) == 0;
}

TEST_CASE("tensor_parallel: a two-block shard draws the unsharded init of its rows", "[tensor_parallel]") {
  const int64_t ffn = 8, h = 5, tp = 4;
  Parameter full;
  full.name = "decoder.layers.0.mlp.linear_fc1.weight";
  full.value = Tensor::zeros({2 * ffn, h}, DType::F32);
  full.global_shape = Shape{2 * ffn, h};
  full.init_std = 0.02;
  init_parameter(full, 11);
  for (int r = 0; r < tp; ++r) {
    Parameter p = full;
    p.value = Tensor::zeros({2 * ffn / tp, h}, DType::F32);
    p.tensor_parallel = true;
    for (int64_t c = 0; c < 2; ++c) {
      GlobalSlice s;
      s.global_shape = full.global_shape;
      s.start = Shape{c * ffn + r * (ffn / tp), 0};
      p.blocks.push_back(s);
    }
    p.slice = p.blocks[0];
    init_parameter(p, 11);
    const int64_t part = ffn / tp;
    CHECK(same_bits(p.value.narrow(0, 0, part), full.value.narrow(0, r * part, part)));           // gate_r
    CHECK(same_bits(p.value.narrow(0, part, part), full.value.narrow(0, ffn + r * part, part)));  // up_r
  }
}

TEST_CASE("tensor_parallel: column/row modes at tp size 1 equal the replicated layer bit for bit",
          "[tensor_parallel]") {
  layers::LayerEnv env{DType::F32, Device::cpu(), false};
  const ProcessGroup one = ProcessGroup::single("tp");
  layers::Linear rep("l", 6, 8, true, 0.3, env, one);
  layers::Linear col("l", 6, 8, true, 0.3, env, one, layers::TensorParallelMode::Column, 2);
  layers::Linear row("l", 6, 8, true, 0.3, env, one, layers::TensorParallelMode::Row);
  for (layers::Linear* l : {&rep, &col, &row}) {
    init_parameter(l->weight, 3);
    l->bias.value.fill_(0.25);
    // Megatron's tensor_model_parallel attribute: set on column/row weights whatever the tp size.
    CHECK(l->weight.tensor_parallel == (l != &rep));
  }
  CHECK(col.bias.tensor_parallel);
  CHECK_FALSE(row.bias.tensor_parallel);
  Tensor x = test::random_tensor({3, 2, 6}, 1, -1, 1, DType::F32);
  Tensor dy = test::random_tensor({3, 2, 8}, 2, -1, 1, DType::F32);
  Tensor y = rep.forward(x), dx = rep.backward(x, dy);
  for (layers::Linear* l : {&col, &row}) {
    CHECK(same_bits(l->forward(x), y));
    CHECK(same_bits(l->backward(x, dy), dx));
    CHECK(same_bits(l->weight.main_grad, rep.weight.main_grad));
    CHECK(same_bits(l->bias.main_grad, rep.bias.main_grad));
  }
  CHECK_THROWS_WITH(layers::Linear("q", 6, 9, false, 0.1, env, one, layers::TensorParallelMode::Column, 2),
                    Catch::Contains("q: output size 9 is not divisible into 2 chunks"));
}

TEST_CASE("tensor_parallel: duplicate rule and identity mappings on a group of one", "[tensor_parallel]") {
  Parameter sharded, replicated;
  sharded.tensor_parallel = true;
  CHECK(tp::counts_in_grad_norm(sharded, 0));
  CHECK(tp::counts_in_grad_norm(sharded, 1));
  CHECK(tp::counts_in_grad_norm(replicated, 0));
  CHECK_FALSE(tp::counts_in_grad_norm(replicated, 1));
  const ProcessGroup one = ProcessGroup::single("tp");
  Tensor x = test::random_tensor({4, 3}, 5);
  CHECK(same_bits(tp::gather_dim0(x, one), x));
  CHECK(same_bits(tp::reduce_scatter_dim0(x, one), x));
  CHECK(same_bits(tp::split_dim0(x, one), x));
  CHECK(same_bits(tp::all_reduce_sum(x, one), x));
  replicated.value = x;
  CHECK(same_bits(tp::gather_parameter(replicated, x, one), x));
}

}  // namespace
}  // namespace strata
