// ProcessGroup routing and the self communicator (parallel/process_group.h, communicator.h):
// a group of one rank makes every collective an identity or a copy.
#include "parallel/process_group.h"
#include "test_helpers.h"

namespace strata {

TEST_CASE("process group: a group of one rank", "[process_group]") {
  ProcessGroup g = ProcessGroup::single("tp", 3);
  CHECK(g.size() == 1);
  CHECK(g.rank() == 0);
  CHECK(g.ranks() == std::vector<int>{3});
  Tensor t = Tensor::from_data<float>({1, 2, 3, 4}, {2, 2});
  g.all_reduce(t, ReduceOp::Sum);
  g.all_reduce(t, ReduceOp::Avg);
  g.broadcast(t, 0);
  CHECK(t.to_vector() == std::vector<double>{1, 2, 3, 4});
  Tensor out = Tensor::zeros({4}, DType::F32);
  g.all_gather(t, out);
  CHECK(out.to_vector() == std::vector<double>{1, 2, 3, 4});
  Tensor rs = Tensor::zeros({2, 2}, DType::F32);
  g.reduce_scatter(t, rs);
  CHECK(rs.to_vector() == std::vector<double>{1, 2, 3, 4});
  Tensor a2a = Tensor::zeros({4}, DType::F32);
  g.all_to_all_v(t, {3}, a2a, {3});
  CHECK(a2a.to_vector() == std::vector<double>{1, 2, 3, 0});
  Tensor r = Tensor::zeros({2, 2}, DType::F32);
  std::vector<PointToPoint> ops{PointToPoint::send(t, 0, 7), PointToPoint::recv(r, 0, 7)};
  g.batch_send_recv(ops);
  CHECK(r.to_vector() == std::vector<double>{1, 2, 3, 4});
  CHECK_THROWS_WITH(g.broadcast(t, 1), Catch::Contains("root 1"));
  CHECK_THROWS_WITH(g.all_gather(t, rs = Tensor::zeros({3}, DType::F32)), Catch::Contains("all_gather"));
  CHECK(std::string(g.comm(DeviceType::CPU).backend()) == "self");
  CHECK(g.comm(DeviceType::CPU).split(-1, 0) == nullptr);
  CHECK(g.comm(DeviceType::CPU).split(0, 0)->size() == 1);
}

}  // namespace strata
