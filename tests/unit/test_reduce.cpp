// Reductions (kernels/reduce.h): hand-computed values, f32/bf16/f16 inputs against f64 on the same
// rounded inputs, bitwise determinism across thread counts, NaN propagation in max, exact
// count_zeros, long rows (> 65536 elements), empty tensors, bad arguments.
#include <omp.h>

#include <cmath>
#include <cstring>
#include <limits>

#include "kernels/reduce.h"
#include "test_helpers.h"

using namespace strata;
using namespace strata::kernels;
using strata::test::normalized_error;
using strata::test::random_tensor;

namespace {
const double kNaN = std::numeric_limits<double>::quiet_NaN();
const double kInf = std::numeric_limits<double>::infinity();

// Run a whole-tensor reduction into a fresh 1-element out and return its value.
double run(void (*fn)(const Tensor&, const Tensor&), const Tensor& x, DType out_dtype = DType::F32) {
  Tensor out = Tensor::full({1}, 12345.0, out_dtype);
  fn(x, out);
  return out.item();
}
// Plain f64 references.
double ref_sum(const Tensor& x, bool squares = false) {
  double s = 0;
  for (double v : x.to_vector()) s += squares ? v * v : v;
  return s;
}
double rel(double got, double want) { return std::abs(got - want) / std::max(std::abs(want), 1e-300); }
}  // namespace

TEST_CASE("reduce: hand-computed values", "[reduce]") {
  Tensor x = Tensor::from_vector({1, 2, 3, -4, 0, 0.5}, {2, 3}, DType::F32);
  CHECK(run(sum, x) == 2.5);
  CHECK(run(max, x) == 3);
  CHECK(run(sum_of_squares, x) == 30.25);
  CHECK(run(count_zeros, x) == 1);
  CHECK(run(sum, x, DType::F64) == 2.5);
  Tensor rows = Tensor::empty({2}, DType::F32);
  sum_rows(x, rows);
  CHECK(rows.to_vector() == std::vector<double>{6, -3.5});
  // Negative numbers only: max is not the identity 0.
  CHECK(run(max, Tensor::from_vector({-3, -1.5, -2}, {3}, DType::BF16)) == -1.5);
  // -0 counts as zero, NaN does not.
  Tensor z = Tensor::from_vector({0.0, -0.0, 1.0, kNaN, 1e-30}, {5}, DType::F64);
  CHECK(run(count_zeros, z, DType::I64) == 2);
  // sum_rows over 3-d input: leading dims are rows; out dtype may differ from x.
  Tensor x3 = Tensor::from_vector({1, 2, 3, 4, 5, 6, 7, 8}, {2, 2, 2}, DType::F16);
  Tensor r3 = Tensor::empty({2, 2}, DType::F64);
  sum_rows(x3, r3);
  CHECK(r3.to_vector() == std::vector<double>{3, 7, 11, 15});
}

TEST_CASE("reduce: f32, bf16, f16 against f64", "[reduce][dtype]") {
  // Accumulation is f32 with a chunked pairwise tree, so the error is a few eps·log2(n) of the
  // (well-conditioned, positive-biased) sum: bound 2e-6 relative for every input dtype, since
  // the reference sees the same rounded inputs. max is exact.
  for (DType dt : {DType::F32, DType::BF16, DType::F16}) {
    for (int64_t n : {int64_t(1), int64_t(5), int64_t(1023), int64_t(1025), int64_t(70001), (int64_t(1) << 18) + 3}) {
      INFO(dtype_name(dt) << " n=" << n);
      Tensor x = random_tensor({n}, 41, -0.5, 1.5).to(dt).to(DType::F64);
      Tensor xl = x.to(dt);
      CHECK(rel(run(sum, xl), ref_sum(x)) <= 2e-6);
      CHECK(rel(run(sum_of_squares, xl), ref_sum(x, true)) <= 2e-6);
      CHECK(run(max, xl) == run(max, x, DType::F64));
      CHECK(rel(run(sum, x, DType::F64), ref_sum(x)) <= 1e-14);
    }
    for (Shape s : {Shape{1, 7}, Shape{13, 130}, Shape{3, 4099}, Shape{2, 70001}}) {
      INFO(dtype_name(dt) << " " << s.str());
      Tensor x = random_tensor(s, 42, -0.5, 1.5).to(dt).to(DType::F64);
      Tensor r64 = Tensor::empty({s[0]}, DType::F64), r32 = Tensor::empty({s[0]}, DType::F32);
      Tensor rl = Tensor::empty({s[0]}, dt);
      sum_rows(x, r64);
      sum_rows(x.to(dt), r32);
      sum_rows(x.to(dt), rl);
      CHECK(normalized_error(r32, r64) <= 2e-6);
      CHECK(normalized_error(rl, r64) <= (dt == DType::BF16 ? 4e-3 : dt == DType::F16 ? 5e-4 : 2e-6));
    }
  }
}

TEST_CASE("reduce: f32 sum of many elements stays accurate", "[reduce][accuracy]") {
  // 2^22 values in [0, 1): naive sequential f32 would lose ~1e-4; the tree keeps ~1e-7.
  Tensor x = random_tensor({int64_t(1) << 22}, 43, 0.0, 1.0).to(DType::F32);
  double want = ref_sum(x);
  INFO("sum " << run(sum, x) << " want " << want);
  CHECK(rel(run(sum, x), want) <= 1e-6);
}

TEST_CASE("reduce: bitwise identical for 1, 2 and 3 threads", "[reduce][determinism]") {
  const int64_t n = (int64_t(1) << 20) + 3;
  Tensor x = random_tensor({n}, 44, -1, 1).to(DType::F32);
  Tensor xb = x.to(DType::BF16);
  Tensor rows_in = random_tensor({5, 100003}, 45).to(DType::F32);
  const int saved = omp_get_max_threads();
  std::vector<std::vector<float>> results;
  for (int threads : {1, 2, 3}) {
    omp_set_num_threads(threads);
    std::vector<float> r;
    for (auto fn : {sum, max, sum_of_squares, count_zeros}) {
      for (const Tensor* t : {&x, &xb}) {
        Tensor out = Tensor::empty({1}, DType::F32);
        fn(*t, out);
        r.push_back(*out.data<float>());
      }
    }
    Tensor rows = Tensor::empty({5}, DType::F32), one = Tensor::empty({1}, DType::F32);
    sum_rows(rows_in, rows);
    sum_rows(x.reshape({1, n}), one);  // one long row: parallel over chunks
    r.insert(r.end(), rows.data<float>(), rows.data<float>() + 5);
    r.push_back(*one.data<float>());
    results.push_back(r);
  }
  omp_set_num_threads(saved);
  REQUIRE(results[0].size() == results[1].size());
  CHECK(std::memcmp(results[0].data(), results[1].data(), results[0].size() * sizeof(float)) == 0);
  CHECK(std::memcmp(results[0].data(), results[2].data(), results[0].size() * sizeof(float)) == 0);
  // The long row and the whole-tensor sum use the same tree.
  CHECK(results[0].back() == results[0][0]);
}

TEST_CASE("reduce: max propagates NaN and handles infinities", "[reduce][nan]") {
  const int64_t n = 10000;  // several CPU chunks
  for (int64_t pos : {int64_t(0), int64_t(1500), n - 1}) {
    for (DType dt : {DType::F64, DType::F32, DType::BF16, DType::F16}) {
      INFO(dtype_name(dt) << " NaN at " << pos);
      std::vector<double> v = random_tensor({n}, 46).to_vector();
      v[pos] = kNaN;
      Tensor x = Tensor::from_vector(v, {n}, dt);
      CHECK(std::isnan(run(max, x)));
      CHECK(std::isnan(run(max, x, DType::F64)));
      CHECK(std::isnan(run(sum, x)));
      v[pos] = kInf;
      CHECK(run(max, Tensor::from_vector(v, {n}, dt)) == kInf);
    }
  }
  CHECK(run(max, Tensor::full({3}, -kInf, DType::F32)) == -kInf);
}

TEST_CASE("reduce: count_zeros is exact", "[reduce][count]") {
  const int64_t n = 300007;
  std::vector<double> v = random_tensor({n}, 47, 0.5, 1.0).to_vector();
  int64_t zeros = 0;
  for (int64_t i = 0; i < n; ++i)
    if (i % 7 == 3 || i % 1000 == 999) {
      v[i] = (i % 2) ? -0.0 : 0.0;
      ++zeros;
    }
  for (DType dt : {DType::F64, DType::F32, DType::BF16, DType::F16}) {
    INFO(dtype_name(dt));
    Tensor x = Tensor::from_vector(v, {n}, dt);
    CHECK(run(count_zeros, x, DType::I64) == zeros);
    CHECK(run(count_zeros, x, DType::F64) == zeros);
    CHECK(run(count_zeros, x, DType::F32) == zeros);
  }
}

TEST_CASE("reduce: long rows", "[reduce][long]") {
  // Rows well beyond 65536 elements, one row and several, against the f64 reference.
  for (Shape s : {Shape{1, 300001}, Shape{3, 65537}, Shape{2, 131072}}) {
    INFO(s.str());
    Tensor x = random_tensor(s, 48, -0.5, 1.5).to(DType::F32);
    Tensor got = Tensor::empty({s[0]}, DType::F32);
    sum_rows(x, got);
    std::vector<double> v = x.to_vector(), g = got.to_vector();
    for (int64_t r = 0; r < s[0]; ++r) {
      double want = 0;
      for (int64_t j = 0; j < s[1]; ++j) want += v[r * s[1] + j];
      CHECK(rel(g[r], want) <= 2e-6);
    }
  }
}

TEST_CASE("reduce: empty tensors", "[reduce][empty]") {
  for (DType dt : {DType::F64, DType::F32, DType::BF16}) {
    Tensor e = Tensor::empty({0}, dt);
    CHECK(run(sum, e) == 0);
    CHECK(run(sum_of_squares, e, DType::F64) == 0);
    CHECK(run(max, e) == -kInf);
    CHECK(run(count_zeros, e, DType::I64) == 0);
    Tensor rows = Tensor::full({3}, 9.0, DType::F32);
    sum_rows(Tensor::empty({3, 0}, dt), rows);  // rows of length 0 sum to 0
    CHECK(rows.to_vector() == std::vector<double>{0, 0, 0});
    Tensor none = Tensor::empty({0}, DType::F32);
    sum_rows(Tensor::empty({0, 4}, dt), none);
  }
}

TEST_CASE("reduce: bad arguments are rejected", "[reduce][errors]") {
  Tensor x = Tensor::zeros({2, 3}, DType::F32);
  CHECK_THROWS_WITH(sum(x, Tensor::zeros({2}, DType::F32)), Catch::Contains("sum: out must have exactly 1 element"));
  CHECK_THROWS_WITH(max(x, Tensor::zeros({1}, DType::BF16)), Catch::Contains("max: out must be f32 or f64, got bf16"));
  CHECK_THROWS_WITH(sum_of_squares(x, Tensor::zeros({1}, DType::I64)), Catch::Contains("sum_of_squares: out must be f32 or f64"));
  CHECK_THROWS_WITH(count_zeros(x, Tensor::zeros({1}, DType::I32)), Catch::Contains("count_zeros: out must be f32, f64 or i64"));
  CHECK_THROWS_WITH(sum(Tensor::zeros({3}, DType::I32), Tensor::zeros({1}, DType::F32)),
                    Catch::Contains("sum: x must be a floating tensor"));
  CHECK_THROWS_WITH(sum(x, Tensor()), Catch::Contains("sum: out is undefined"));
  CHECK_THROWS_WITH(sum_rows(x, Tensor::zeros({3}, DType::F32)), Catch::Contains("sum_rows: out [3] must have 2 elements"));
  CHECK_THROWS_WITH(sum_rows(x, Tensor::zeros({2}, DType::I64)), Catch::Contains("sum_rows: out must be a floating tensor"));
  CHECK_THROWS_WITH(sum(Tensor::zeros({2, 6}, DType::F32).narrow(1, 1, 3), Tensor::zeros({1}, DType::F32)),
                    Catch::Contains("sum: x must be contiguous"));
}
