// The CPU GEMM's OpenMP split (kernels/cpu/gemm.cpp: blocks of C's rows or columns, one
// single-threaded cblas call each): for the shapes of a GPT output layer (forward x·wᵀ, dgrad
// dy·w, wgrad dyᵀ·x; tall, wide and odd sizes, beta 0 and 1) the result is bitwise identical for
// 1, 2 and 3 threads, and matches the f64 GEMM within f32 rounding; so are a small model's
// 256-token GEMMs (cut into two 128-row blocks) and batches of GEMMs too small to cut (one call per
// entry, spread over the threads), with a or b broadcast over the batch.
#include <omp.h>

#include "kernels/gemm.h"
#include "test_helpers.h"

namespace strata {

TEST_CASE("gemm threads: OpenMP-split GEMMs are identical for 1, 2, 3 threads and match f64", "[gemm][determinism]") {
  struct Case {
    int64_t m, n, k;
    bool ta, tb;
    double beta;
    int64_t batch = 0;  // 0: 2-d; else a and b 3-d [batch, ., .] (b broadcast when negative)
  };
  const Case cases[] = {
      {96, 3000, 64, false, true, 0.0},   // logits = h · wᵀ (columns split)
      {96, 64, 3000, false, false, 0.0},  // dh = dlogits · w (k large: never split)
      {3000, 64, 96, true, false, 1.0},   // dw += dlogitsᵀ · h (rows split, accumulate)
      {1001, 333, 70, false, false, 0.5},
      {130, 2049, 33, true, true, 0.0},
      {256, 256, 256, false, true, 0.0},       // a small model's projection: two 128-row blocks
      {256, 1024, 256, true, false, 1.0},      // its wgrad shape: columns split
      {64, 64, 48, false, true, 0.0, 24},      // a batch of small GEMMs: one call per entry
      {64, 80, 40, false, false, 1.0, -32},    // the same with b broadcast over the batch
  };
  const int saved = omp_get_max_threads();
  for (const Case& c : cases) {
    INFO("batch=" << c.batch << " m=" << c.m << " n=" << c.n << " k=" << c.k << " ta=" << c.ta << " tb=" << c.tb << " beta=" << c.beta);
    const int64_t batch = c.batch < 0 ? -c.batch : c.batch;
    const auto shape = [&](int64_t rows, int64_t cols, bool batched) {
      return batched ? Shape{batch, rows, cols} : Shape{rows, cols};
    };
    const Tensor a64 = test::random_tensor(c.ta ? shape(c.k, c.m, batch) : shape(c.m, c.k, batch), 11, -1, 1);
    const Tensor b64 = test::random_tensor(c.tb ? shape(c.n, c.k, c.batch > 0) : shape(c.k, c.n, c.batch > 0), 12, -1, 1);
    const Tensor c64 = test::random_tensor(shape(c.m, c.n, batch), 13, -1, 1);
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
    const Tensor got = Tensor::from_vector(results[0], c64.shape(), DType::F64);
    CHECK(test::normalized_error(got, ref) <= 1e-6);
  }
}

}  // namespace strata
