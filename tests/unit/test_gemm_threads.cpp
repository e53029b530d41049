// The CPU GEMM's OpenMP split (kernels/cpu/gemm.cpp: blocks of C's rows or columns, one
// single-threaded cblas call each): for the shapes of a GPT output layer (forward x·wᵀ, dgrad
// dy·w, wgrad dyᵀ·x; tall, wide and odd sizes, beta 0 and 1) the result is bitwise identical for
// 1, 2 and 3 threads, and matches the f64 GEMM within f32 rounding.
#include <omp.h>

#include "kernels/gemm.h"
#include "test_helpers.h"

namespace strata {

TEST_CASE("gemm threads: OpenMP-split GEMMs are identical for 1, 2, 3 threads and match f64", "[gemm][determinism]") {
  struct Case {
    int64_t m, n, k;
    bool ta, tb;
    double beta;
  };
  const Case cases[] = {
      {96, 3000, 64, false, true, 0.0},   // logits = h · wᵀ (columns split)
      {96, 64, 3000, false, false, 0.0},  // dh = dlogits · w (k large: never split)
      {3000, 64, 96, true, false, 1.0},   // dw += dlogitsᵀ · h (rows split, accumulate)
      {1001, 333, 70, false, false, 0.5},
      {130, 2049, 33, true, true, 0.0},
  };
  const int saved = omp_get_max_threads();
  for (const Case& c : cases) {
    INFO("m=" << c.m << " n=" << c.n << " k=" << c.k << " ta=" << c.ta << " tb=" << c.tb << " beta=" << c.beta);
    const Tensor a64 = test::random_tensor(c.ta ? Shape{c.k, c.m} : Shape{c.m, c.k}, 11, -1, 1);
    const Tensor b64 = test::random_tensor(c.tb ? Shape{c.n, c.k} : Shape{c.k, c.n}, 12, -1, 1);
    const Tensor c64 = test::random_tensor({c.m, c.n}, 13, -1, 1);
    const Tensor a = a64.to(DType::F32), b = b64.to(DType::F32), c0 = c64.to(DType::F32);
    std::vector<std::vector<double>> results;
    for (int threads : {1, 2, 3}) {
      omp_set_num_threads(threads);
      Tensor out = c0.clone();
      kernels::gemm(a, c.ta, b, c.tb, out, 1.0, c.beta);
      results.push_back(out.to_vector());
    }
    omp_set_num_threads(saved);
    CHECK(results[1] == results[0]);
    CHECK(results[2] == results[0]);
    Tensor ref = c64.clone();
    kernels::gemm(a.to(DType::F64), c.ta, b.to(DType::F64), c.tb, ref, 1.0, c.beta);
    const Tensor got = Tensor::from_vector(results[0], Shape{c.m, c.n}, DType::F64);
    CHECK(test::normalized_error(got, ref) <= 1e-6);
  }
}

}  // namespace strata
