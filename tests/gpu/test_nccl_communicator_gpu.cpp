// The NCCL communicator on one GPU (run only where a GPU is usable; scripts/gpu_check.sh): a
// 1-rank communicator on cuda:0 bootstrapped over the self communicator, against host values —
//   - all_reduce (sum, avg), reduce_scatter and all_gather give the inputs (one rank);
//   - the asynchronous all-reduce / reduce-scatter run on the communication stream ordered after
//     the compute stream: the input is produced by a chain of kernels enqueued just before the
//     call (so a collective that did not wait for them would read stale values), the output is
//     consumed by a kernel enqueued right after wait() (which must see the result) — expected
//     values computed on the host; several in flight at once; test() reports completion after a
//     device synchronisation;
//   - deterministic mode: the asynchronous calls equal the blocking ones bit for bit.
#include <catch2/catch.hpp>

#include <cstring>

#include "core/stream.h"
#include "core/tensor.h"
#include "kernels/elementwise.h"
#include "parallel/communicator.h"
#include "parallel/nccl_communicator.h"

using namespace strata;

namespace {
std::vector<double> host_values(int64_t n, double offset) {
  std::vector<double> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[static_cast<size_t>(i)] = static_cast<double>(i % 97) * 0.25 + offset;
  return v;
}
}  // namespace

TEST_CASE("gpu nccl: one-rank collectives against host values", "[gpu][nccl]") {
  const Device g = Device::cuda(0);
  auto self = make_self_communicator();
  auto nccl = make_nccl_communicator(*self, g);
  REQUIRE(nccl->size() == 1);
  CHECK(std::string(nccl->backend()) == "nccl");
  const int64_t n = 4096;
  const std::vector<double> v = host_values(n, -3.0);
  Tensor t = Tensor::from_vector(v, {n}, DType::F32).to(g);
  nccl->all_reduce(t, ReduceOp::Sum);
  CHECK(t.to_vector() == v);
  nccl->all_reduce(t, ReduceOp::Avg);
  CHECK(t.to_vector() == v);
  Tensor out = Tensor::zeros({n}, DType::F32, g);
  nccl->reduce_scatter(t, out, ReduceOp::Sum);
  CHECK(out.to_vector() == v);
  Tensor gathered = Tensor::zeros({n}, DType::F32, g);
  nccl->all_gather(t, gathered);
  CHECK(gathered.to_vector() == v);
  Tensor bad = Tensor::zeros({n - 1}, DType::F32, g);
  CHECK_THROWS_WITH(nccl->reduce_scatter(t, bad, ReduceOp::Sum), Catch::Contains("reduce_scatter"));
}

TEST_CASE("gpu nccl: asynchronous collectives are ordered with the compute stream", "[gpu][nccl]") {
  const Device g = Device::cuda(0);
  auto self = make_self_communicator();
  auto nccl = make_nccl_communicator(*self, g);
  const int64_t n = int64_t{1} << 22;  // 16 MiB of f32: the kernels take long enough to race
  const std::vector<double> v = host_values(n, 1.0);
  const Tensor x = Tensor::from_vector(v, {n}, DType::F32).to(g);
  synchronize(g);
  std::vector<Tensor> inputs, outputs;
  std::vector<std::unique_ptr<CommWork>> works;
  for (int k = 0; k < 3; ++k) {
    // input = ((x·2)·2)·2 + k, produced on the compute stream right before the call.
    Tensor in = Tensor::empty({n}, DType::F32, g);
    kernels::scale(x, 2.0, in);
    for (int r = 0; r < 2; ++r) kernels::scale(in, 2.0, in);
    kernels::add(in, Tensor::full({n}, static_cast<double>(k), DType::F32, g), in);
    Tensor out = Tensor::empty({n}, DType::F32, g);
    works.push_back(nccl->reduce_scatter_async(in, out, ReduceOp::Sum));  // one rank: a copy
    works.push_back(nccl->all_reduce_async(in, ReduceOp::Sum));           // one rank: identity
    inputs.push_back(in);
    outputs.push_back(out);
  }
  for (size_t k = works.size(); k-- > 0;) works[k]->wait();
  for (int k = 0; k < 3; ++k) {
    // Consumed on the compute stream right after wait(): out + 1.
    kernels::add(outputs[k], Tensor::full({n}, 1.0, DType::F32, g), outputs[k]);
    const std::vector<double> got = outputs[k].to_vector();
    bool all_equal = true;
    for (int64_t i = 0; i < n && all_equal; ++i) all_equal = got[static_cast<size_t>(i)] == v[static_cast<size_t>(i)] * 8 + k + 1;
    CHECK(all_equal);
  }
  synchronize(g);
  for (auto& w : works) CHECK(w->test());
}

TEST_CASE("gpu nccl: deterministic asynchronous collectives equal the blocking ones", "[gpu][nccl]") {
  const Device g = Device::cuda(0);
  auto self = make_self_communicator();
  self->set_deterministic(true);
  auto nccl = make_nccl_communicator(*self, g);
  REQUIRE(nccl->deterministic());
  const std::vector<double> v = host_values(1000, 0.1);
  Tensor a = Tensor::from_vector(v, {1000}, DType::F32).to(g), b = a.clone();
  nccl->all_reduce_async(a, ReduceOp::Avg)->wait();
  nccl->all_reduce(b, ReduceOp::Avg);
  CHECK(a.to_vector() == b.to_vector());
  Tensor oa = Tensor::zeros({1000}, DType::F32, g), ob = Tensor::zeros({1000}, DType::F32, g);
  nccl->reduce_scatter_async(a, oa, ReduceOp::Sum)->wait();
  nccl->reduce_scatter(a, ob, ReduceOp::Sum);
  CHECK(oa.to_vector() == ob.to_vector());
  CHECK(oa.to_vector() == a.to_vector());
}
