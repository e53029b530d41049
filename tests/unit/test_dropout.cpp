// Dropout (kernels/dropout.h): keep fraction and mean, the mask equals the Philox draw, forward
// and backward share it, shards reproduce their slice, finite differences in f64, bf16/f16.
#include "kernels/dropout.h"
#include "test_helpers.h"

using namespace strata;
using namespace strata::kernels;
using strata::test::check_gradient;
using strata::test::normalized_error;
using strata::test::numeric_gradient;
using strata::test::random_tensor;

namespace {
const philox::Key kKey{1234, 77};
}

TEST_CASE("dropout: p = 0 is the identity, values are 0 or x/(1-p) with the Philox mask", "[dropout]") {
  Tensor x = random_tensor({3, 5}, 1);
  Tensor y = Tensor::empty({3, 5}, DType::F64);
  dropout_forward(x, y, 0.0, kKey);
  CHECK(y.to_vector() == x.to_vector());
  const double p = 0.3;
  dropout_forward(x, y, p, kKey);
  std::vector<double> xv = x.to_vector(), yv = y.to_vector();
  for (size_t i = 0; i < xv.size(); ++i) {
    const bool keep = philox::uniform(kKey, i) >= p;
    CHECK(yv[i] == (keep ? xv[i] * (1.0 / (1.0 - p)) : 0.0));
  }
}

TEST_CASE("dropout: keep fraction is 1-p and E[y] = x", "[dropout]") {
  const int64_t n = 200000;
  for (double p : {0.1, 0.5}) {
    Tensor x = Tensor::full({n}, 1.0, DType::F32), y = Tensor::empty({n}, DType::F32);
    dropout_forward(x, y, p, kKey);
    std::vector<double> yv = y.to_vector();
    double kept = 0, mean = 0;
    for (double v : yv) {
      kept += v != 0.0;
      mean += v / n;
    }
    // Standard deviations: sqrt(p(1-p)/n) <= 0.0012 for the fraction; mean is fraction/(1-p).
    INFO("p " << p);
    CHECK(std::abs(kept / n - (1 - p)) < 0.006);
    CHECK(std::abs(mean - 1.0) < 0.012);
  }
}

TEST_CASE("dropout: forward and backward use the same mask, in place", "[dropout]") {
  Tensor x = random_tensor({17, 33}, 2, 0.5, 1.5, DType::F32);  // no zeros in x
  Tensor y = Tensor::empty({17, 33}, DType::F32), dx = Tensor::empty({17, 33}, DType::F32);
  dropout_forward(x, y, 0.25, kKey);
  dropout_backward(Tensor::full({17, 33}, 1.0, DType::F32), dx, 0.25, kKey);
  std::vector<double> yv = y.to_vector(), dv = dx.to_vector();
  for (size_t i = 0; i < yv.size(); ++i) CHECK((yv[i] == 0.0) == (dv[i] == 0.0));
  Tensor z = x.clone();
  dropout_forward(z, z, 0.25, kKey);
  CHECK(z.to_vector() == yv);
  Tensor y2 = Tensor::empty({17, 33}, DType::F32);
  dropout_forward(x, y2, 0.25, philox::Key{1234, 78});  // another stream: another mask
  CHECK(y2.to_vector() != yv);
}

TEST_CASE("dropout: shards of the global tensor drop exactly their slice", "[dropout]") {
  Tensor x = random_tensor({4, 8}, 3);
  Tensor y = Tensor::empty({4, 8}, DType::F64);
  dropout_forward(x, y, 0.5, kKey);
  for (int dim : {0, 1}) {
    for (int r = 0; r < 2; ++r) {
      Tensor xs = x.narrow(dim, r * (dim == 0 ? 2 : 4), dim == 0 ? 2 : 4).contiguous();
      Tensor ys = Tensor::empty(xs.shape(), DType::F64), dxs = Tensor::empty(xs.shape(), DType::F64);
      GlobalSlice slice = GlobalSlice::shard({4, 8}, dim, r, 2);
      dropout_forward(xs, ys, 0.5, kKey, slice);
      Tensor want = y.narrow(dim, r * (dim == 0 ? 2 : 4), dim == 0 ? 2 : 4).contiguous();
      INFO("dim " << dim << " rank " << r);
      CHECK(ys.to_vector() == want.to_vector());
      dropout_backward(xs, dxs, 0.5, kKey, slice);
      CHECK(dxs.to_vector() == want.to_vector());
    }
  }
}

TEST_CASE("dropout: backward matches finite differences (f64)", "[dropout][grad]") {
  for (Shape s : {Shape{1, 1}, Shape{3, 7}, Shape{2, 3, 11}}) {
    Tensor x = random_tensor(s, 4), w = random_tensor(s, 5);
    Tensor y = Tensor::empty(s, DType::F64), dx = Tensor::empty(s, DType::F64);
    auto loss = [&] {
      dropout_forward(x, y, 0.2, kKey);
      return test::dot(y, w);
    };
    Tensor num = numeric_gradient(x, loss);
    dropout_backward(w, dx, 0.2, kKey);
    check_gradient("dropout dx", dx, num, 1e-8);
  }
}

TEST_CASE("dropout: f32, bf16, f16 against f64, odd and long shapes", "[dropout][dtype]") {
  struct Bound { DType dt; double tol; };
  for (Bound b : {Bound{DType::F32, 1e-7}, Bound{DType::BF16, 4e-3}, Bound{DType::F16, 6e-4}}) {
    for (Shape s : {Shape{1, 1}, Shape{7, 131}, Shape{1, 65537}}) {
      INFO(dtype_name(b.dt) << " " << s.str());
      Tensor x = random_tensor(s, 6, -2, 2, b.dt);
      Tensor ref = Tensor::empty(s, DType::F64), y = Tensor::empty(s, b.dt), dx = Tensor::empty(s, b.dt);
      dropout_forward(x.to(DType::F64), ref, 0.15, kKey);
      dropout_forward(x, y, 0.15, kKey);
      dropout_backward(x, dx, 0.15, kKey);
      CHECK(normalized_error(y, ref) <= b.tol);
      CHECK(normalized_error(dx, ref) <= b.tol);
    }
  }
}

TEST_CASE("dropout: bad arguments are rejected", "[dropout][errors]") {
  Tensor x = Tensor::zeros({4, 8}, DType::F32), y = Tensor::zeros({4, 8}, DType::F32);
  CHECK_THROWS_WITH(dropout_forward(x, y, 1.0, kKey), Catch::Contains("p must be in [0, 1)"));
  CHECK_THROWS_WITH(dropout_backward(x, y, -0.1, kKey), Catch::Contains("p must be in [0, 1)"));
  CHECK_THROWS_WITH(dropout_forward(x, Tensor::zeros({32}, DType::F32), 0.1, kKey), Catch::Contains("must match x"));
  CHECK_THROWS_WITH(dropout_forward(x, Tensor::zeros({4, 8}, DType::BF16), 0.1, kKey), Catch::Contains("dtype mismatch"));
  CHECK_THROWS_WITH(dropout_forward(Tensor::zeros({4}, DType::I32), Tensor::zeros({4}, DType::I32), 0.1, kKey),
                    Catch::Contains("floating"));
  GlobalSlice bad{Shape{4, 8}, Shape{0, 6}};  // a [4, 8] shard cannot start at column 6 of [4, 8]
  CHECK_THROWS_WITH(dropout_forward(x, y, 0.1, kKey, bad), Catch::Contains("does not fit"));
}
