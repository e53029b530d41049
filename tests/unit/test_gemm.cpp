// GEMM and linear layer (kernels/gemm.h): a hand-computed product; all transpose combinations,
// batches and batch broadcast against a naive f64 triple loop; alpha/beta and k = 0; f32 against
// f64; bf16/f16 inputs (rounded) against f64 on the same rounded inputs, with 16-bit or f32
// output; linear forward/backward against finite differences in f64, gradient accumulation;
// odd shapes; bad arguments rejected naming the dimension.
#include <array>
#include <cmath>
#include <limits>

#include "kernels/gemm.h"
#include "test_helpers.h"

using namespace strata;
using namespace strata::kernels;
using strata::test::check_gradient;
using strata::test::normalized_error;
using strata::test::numeric_gradient;
using strata::test::random_tensor;

namespace {
struct Problem {
  int64_t m, n, k;
};

// Shape of an operand: rows × cols, with a leading batch when batch > 0.
Shape matrix(int64_t batch, int64_t rows, int64_t cols) {
  return batch > 0 ? Shape{batch, rows, cols} : Shape{rows, cols};
}

// alpha · op(a) · op(b) + beta · c0 with a naive triple loop in f64 (broadcasting a batch of 1).
Tensor naive_gemm(const Tensor& a, bool ta, const Tensor& b, bool tb, const Tensor& c0, double alpha, double beta) {
  std::vector<double> av = a.to_vector(), bv = b.to_vector(), cv = c0.to_vector();
  const int64_t m = c0.size(-2), n = c0.size(-1), k = ta ? a.size(-2) : a.size(-1);
  const int64_t batch = c0.dim() == 3 ? c0.size(0) : 1;
  const int64_t ba = a.dim() == 3 ? a.size(0) : 1, bb = b.dim() == 3 ? b.size(0) : 1;
  std::vector<double> out(cv.size());
  for (int64_t p = 0; p < batch; ++p) {
    const double* A = av.data() + (ba == 1 ? 0 : p * m * k);
    const double* B = bv.data() + (bb == 1 ? 0 : p * k * n);
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) {
        double s = 0;
        for (int64_t l = 0; l < k; ++l) s += (ta ? A[l * m + i] : A[i * k + l]) * (tb ? B[j * k + l] : B[l * n + j]);
        const int64_t idx = p * m * n + i * n + j;
        out[idx] = alpha * s + (beta == 0.0 ? 0.0 : beta * cv[idx]);
      }
  }
  return Tensor::from_vector(out, c0.shape(), DType::F64);
}

// Random operands for a problem: (a, b, c0) in f64 with the given batch layout (0 = 2-d).
std::array<Tensor, 3> operands(const Problem& p, bool ta, bool tb, int64_t batch_a, int64_t batch_b,
                               int64_t batch_c, uint64_t seed) {
  return {random_tensor(ta ? matrix(batch_a, p.k, p.m) : matrix(batch_a, p.m, p.k), seed),
          random_tensor(tb ? matrix(batch_b, p.n, p.k) : matrix(batch_b, p.k, p.n), seed + 1),
          random_tensor(matrix(batch_c, p.m, p.n), seed + 2)};
}
}  // namespace

TEST_CASE("gemm: hand-computed 2x3 · 3x2", "[gemm]") {
  // [1 2 3; 4 5 6] · [7 8; 9 10; 11 12] = [58 64; 139 154] (exact in every dtype)
  for (DType dt : kFloatDTypes) {
    Tensor a = Tensor::from_vector({1, 2, 3, 4, 5, 6}, {2, 3}, dt);
    Tensor b = Tensor::from_vector({7, 8, 9, 10, 11, 12}, {3, 2}, dt);
    Tensor c = Tensor::full({2, 2}, 1e9, dt);
    gemm(a, false, b, false, c);
    INFO(dtype_name(dt));
    CHECK(c.to_vector() == std::vector<double>{58, 64, 139, 154});
    // Same product from the transposed storage of both operands.
    gemm(a.transpose(0, 1), true, b.transpose(0, 1), true, c);
    CHECK(c.to_vector() == std::vector<double>{58, 64, 139, 154});
  }
}

TEST_CASE("gemm: transposes, batches and broadcast against a naive f64 loop", "[gemm]") {
  struct Batching { int64_t a, b, c; const char* name; };
  const Batching layouts[] = {{0, 0, 0, "2-d"}, {3, 3, 3, "batched"}, {1, 3, 3, "a broadcast"},
                              {3, 0, 3, "b broadcast (2-d)"}, {0, 1, 2, "both broadcast"}};
  for (Problem p : {Problem{1, 1, 1}, Problem{7, 13, 5}, Problem{1, 4097, 3}, Problem{33, 17, 65}})
    for (bool ta : {false, true})
      for (bool tb : {false, true})
        for (const Batching& l : layouts) {
          auto [a, b, c0] = operands(p, ta, tb, l.a, l.b, l.c, 3);
          Tensor c = c0.clone();
          gemm(a, ta, b, tb, c);
          INFO(p.m << "x" << p.n << "x" << p.k << " ta=" << ta << " tb=" << tb << " " << l.name);
          CHECK(normalized_error(c, naive_gemm(a, ta, b, tb, c0, 1.0, 0.0)) <= 1e-14);
        }
}

TEST_CASE("gemm: alpha, beta, k = 0 and beta = 0 ignoring C", "[gemm]") {
  const Problem p{9, 11, 6};
  for (DType dt : {DType::F64, DType::F32}) {
    auto [a, b, c0] = operands(p, false, true, 2, 2, 2, 5);
    Tensor c = c0.clone().to(dt);  // clone: to() returns c0 itself for f64
    gemm(a.to(dt), false, b.to(dt), true, c, 0.5, -1.5);
    INFO(dtype_name(dt));
    CHECK(normalized_error(c, naive_gemm(a, false, b, true, c0, 0.5, -1.5)) <= (dt == DType::F64 ? 1e-14 : 1e-6));
  }
  // beta = 0: C is write-only, NaNs in it must not leak into the result.
  auto [a, b, c0] = operands(p, true, false, 0, 0, 0, 6);
  Tensor c = Tensor::full({p.m, p.n}, std::numeric_limits<double>::quiet_NaN(), DType::F32);
  gemm(a.to(DType::F32), true, b.to(DType::F32), false, c, 2.0, 0.0);
  CHECK(normalized_error(c, naive_gemm(a, true, b, false, c0, 2.0, 0.0)) <= 1e-6);
  // k = 0: the product is empty and C = beta · C.
  for (DType dt : kFloatDTypes) {
    Tensor ak = Tensor::zeros({4, 0}, dt), bk = Tensor::zeros({0, 3}, dt);
    Tensor ck = Tensor::full({4, 3}, 2.0, dt);
    gemm(ak, false, bk, false, ck, 1.0, 0.25);
    CHECK(ck.to_vector() == std::vector<double>(12, 0.5));
    gemm(ak, false, bk, false, ck, 1.0, 0.0);
    CHECK(ck.to_vector() == std::vector<double>(12, 0.0));
  }
  // m = 0 or n = 0: nothing to do.
  Tensor e = Tensor::empty({0, 3}, DType::F32);
  gemm(Tensor::zeros({0, 5}, DType::F32), false, Tensor::zeros({5, 3}, DType::F32), false, e);
}

TEST_CASE("gemm: f32 against f64", "[gemm][dtype]") {
  // f32 accumulation of k random-sign terms: normalized error ≈ u·√(k/2) (u = 6e-8). Bound 1e-6
  // for k ≤ 128 and 5e-6 for the long inner dimension k = 4500 (expected ≈ 2.8e-6).
  for (Problem p : {Problem{1, 1, 1}, Problem{7, 13, 5}, Problem{1, 4097, 3}, Problem{5, 3, 4500}, Problem{64, 96, 80}})
    for (bool ta : {false, true})
      for (bool tb : {false, true}) {
        auto [a, b, c0] = operands(p, ta, tb, 2, 1, 2, 7);
        Tensor c = Tensor::empty(c0.shape(), DType::F32);
        gemm(a.to(DType::F32), ta, b.to(DType::F32), tb, c);
        INFO(p.m << "x" << p.n << "x" << p.k << " ta=" << ta << " tb=" << tb);
        CHECK(normalized_error(c, naive_gemm(a, ta, b, tb, c0, 1.0, 0.0)) <= (p.k <= 128 ? 1e-6 : 5e-6));
      }
}

TEST_CASE("gemm: bf16 and f16 inputs against f64 on the same rounded inputs", "[gemm][dtype]") {
  // 16-bit output: one rounding of an f32 result, RMS relative error u/√3 (bf16 u = 2^-9,
  // f16 u = 2^-12 after round-to-nearest): bounds 4e-3 (bf16) and 6e-4 (f16).
  // f32 output keeps the f32 accumulation: bound 1e-6 for k ≤ 300, 5e-6 for k = 4500 (see the f32
  // case), also when accumulating with beta = 1.
  struct Bound { DType dt; double out16; };
  for (Bound bd : {Bound{DType::BF16, 4e-3}, Bound{DType::F16, 6e-4}})
    for (Problem p : {Problem{7, 13, 5}, Problem{1, 4097, 3}, Problem{48, 40, 300}, Problem{3, 5, 4500}})
      for (bool ta : {false, true})
        for (bool tb : {false, true}) {
          auto [a64, b64, c64] = operands(p, ta, tb, 0, 0, 0, 9);
          Tensor a = a64.to(bd.dt), b = b64.to(bd.dt);
          Tensor ar = a.to(DType::F64), br = b.to(DType::F64), cr = c64.to(DType::F32).to(DType::F64);
          INFO(dtype_name(bd.dt) << " " << p.m << "x" << p.n << "x" << p.k << " ta=" << ta << " tb=" << tb);
          Tensor c = Tensor::empty(c64.shape(), bd.dt);
          gemm(a, ta, b, tb, c);
          CHECK(normalized_error(c, naive_gemm(ar, ta, br, tb, cr, 1.0, 0.0)) <= bd.out16);
          Tensor c32 = cr.to(DType::F32);
          gemm(a, ta, b, tb, c32, 1.0, 1.0);  // main-grad style accumulation
          CHECK(normalized_error(c32, naive_gemm(ar, ta, br, tb, cr, 1.0, 1.0)) <= (p.k <= 300 ? 1e-6 : 5e-6));
        }
}

TEST_CASE("gemm: disallowing reduced-precision reductions keeps the CPU's f32 reduction bitwise", "[gemm][dtype]") {
  // The switch (training.disable_bf16_reduced_precision_matmul) restricts cuBLAS's split-K reductions
  // on CUDA (checked there by the op sweep); the CPU GEMMs always reduce in f32, so their bf16 result
  // is the same bits either way, and equals one rounding of the f64 product of the rounded inputs.
  const Problem p{3, 5, 4500};
  auto [a64, b64, c64] = operands(p, false, true, 0, 0, 0, 11);
  const Tensor a = a64.to(DType::BF16), b = b64.to(DType::BF16);
  Tensor allowed = Tensor::empty(c64.shape(), DType::BF16), disallowed = Tensor::empty(c64.shape(), DType::BF16);
  REQUIRE(reduced_precision_reduction());
  gemm(a, false, b, true, allowed);
  set_reduced_precision_reduction(false);
  gemm(a, false, b, true, disallowed);
  set_reduced_precision_reduction(true);
  CHECK(allowed.to_vector() == disallowed.to_vector());
  CHECK(normalized_error(disallowed, naive_gemm(a.to(DType::F64), false, b.to(DType::F64), true,
                                                c64.to(DType::F64), 1.0, 0.0)) <= 4e-3);
}

TEST_CASE("linear: backward matches finite differences (f64)", "[gemm][linear][grad]") {
  // y = x·wᵀ + b is linear in each argument, so central differences are exact up to rounding.
  for (Shape xs : {Shape{5, 7}, Shape{2, 3, 7}, Shape{1, 1}}) {
    const int64_t in = xs[xs.ndim() - 1], out = in == 1 ? 1 : 4;
    Shape ys = xs;
    ys[ys.ndim() - 1] = out;
    Tensor x = random_tensor(xs, 21), w = random_tensor({out, in}, 22), bias = random_tensor({out}, 23);
    Tensor r = random_tensor(ys, 24), y = Tensor::empty(ys, DType::F64);
    auto loss = [&] {
      linear_forward(x, w, &bias, y);
      return test::dot(y, r);
    };
    Tensor nx = numeric_gradient(x, loss), nw = numeric_gradient(w, loss), nb = numeric_gradient(bias, loss);
    Tensor dx = Tensor::empty(xs, DType::F64), dw = Tensor::empty({out, in}, DType::F64);
    Tensor db = Tensor::empty({out}, DType::F64);
    linear_backward(x, w, r, &dx, &dw, &db, false);
    INFO("x " << xs.str());
    check_gradient("dx", dx, nx, 1e-8);
    check_gradient("dw", dw, nw, 1e-8);
    check_gradient("dbias", db, nb, 1e-8);
    // Forward against the definition.
    linear_forward(x, w, nullptr, y);
    Tensor y_ref = naive_gemm(x.reshape({-1, in}), false, w, true, Tensor::zeros({x.numel() / in, out}, DType::F64),
                              1.0, 0.0);
    CHECK(normalized_error(y.reshape({-1, out}), y_ref) <= 1e-14);
  }
}

TEST_CASE("linear: accumulate_grads adds, null gradients are skipped", "[gemm][linear]") {
  Tensor x = random_tensor({6, 5}, 31), w = random_tensor({3, 5}, 32), dy = random_tensor({6, 3}, 33);
  Tensor dw = Tensor::empty({3, 5}, DType::F64), db = Tensor::empty({3}, DType::F64);
  linear_backward(x, w, dy, nullptr, &dw, &db, false);
  Tensor dw0 = random_tensor({3, 5}, 34), db0 = random_tensor({3}, 35);
  Tensor dw_acc = dw0.clone(), db_acc = db0.clone();
  linear_backward(x, w, dy, nullptr, &dw_acc, &db_acc, true);
  std::vector<double> a = dw_acc.to_vector(), f = dw.to_vector(), o = dw0.to_vector();
  for (size_t i = 0; i < a.size(); ++i) CHECK(a[i] == Approx(f[i] + o[i]).epsilon(1e-13));
  a = db_acc.to_vector(), f = db.to_vector(), o = db0.to_vector();
  for (size_t i = 0; i < a.size(); ++i) CHECK(a[i] == Approx(f[i] + o[i]).epsilon(1e-13));
  // Only dx requested: dw and dbias untouched.
  Tensor dx = Tensor::empty({6, 5}, DType::F64), keep = dw0.clone();
  linear_backward(x, w, dy, &dx, nullptr, nullptr, false);
  CHECK(keep.to_vector() == dw0.to_vector());
  CHECK(normalized_error(dx, naive_gemm(dy, false, w, false, dx, 1.0, 0.0)) <= 1e-14);
}

TEST_CASE("linear: bf16 with f32 main-grad accumulation and odd shapes", "[gemm][linear][dtype]") {
  // bf16 x, w, dy; dw and dbias accumulated in f32 (Megatron main_grad): bound 1e-6 against f64
  // on the same rounded inputs. bf16 y, dx: bound 6e-3 (gemm rounding plus the bias add rounding).
  const std::array<int64_t, 3> shapes[] = {{7, 13, 5}, {1, 4097, 3}, {300, 24, 40}};
  for (auto [rows, in, out] : shapes) {
    Tensor x = random_tensor({rows, in}, 41).to(DType::BF16), w = random_tensor({out, in}, 42).to(DType::BF16);
    Tensor bias = random_tensor({out}, 43).to(DType::BF16), dy = random_tensor({rows, out}, 44).to(DType::BF16);
    Tensor x64 = x.to(DType::F64), w64 = w.to(DType::F64), b64 = bias.to(DType::F64), dy64 = dy.to(DType::F64);
    Tensor y = Tensor::empty({rows, out}, DType::BF16), y64 = Tensor::empty({rows, out}, DType::F64);
    linear_forward(x, w, &bias, y);
    linear_forward(x64, w64, &b64, y64);
    INFO(rows << "x" << in << "->" << out);
    CHECK(normalized_error(y, y64) <= 6e-3);
    Tensor dw0 = random_tensor({out, in}, 45).to(DType::F32), db0 = random_tensor({out}, 46).to(DType::F32);
    Tensor dw = dw0.clone(), db = db0.clone(), dx = Tensor::empty({rows, in}, DType::BF16);
    Tensor dw64 = dw0.to(DType::F64), db64 = db0.to(DType::F64), dx64 = Tensor::empty({rows, in}, DType::F64);
    linear_backward(x, w, dy, &dx, &dw, &db, true);
    linear_backward(x64, w64, dy64, &dx64, &dw64, &db64, true);
    CHECK(normalized_error(dx, dx64) <= 6e-3);
    CHECK(normalized_error(dw, dw64) <= 1e-6);
    CHECK(normalized_error(db, db64) <= 1e-6);
  }
}

TEST_CASE("gemm: bad arguments are rejected naming the dimension", "[gemm][errors]") {
  auto f32 = [](Shape s) { return Tensor::zeros(s, DType::F32); };
  CHECK_THROWS_WITH(gemm(f32({2, 3}), false, f32({4, 2}), false, f32({2, 2})), Catch::Contains("inner dimension k"));
  CHECK_THROWS_WITH(gemm(f32({2, 3}), true, f32({3, 2}), false, f32({3, 2})), Catch::Contains("inner dimension k"));
  CHECK_THROWS_WITH(gemm(f32({2, 3}), false, f32({3, 4}), false, f32({3, 4})), Catch::Contains("m = 3 rows"));
  CHECK_THROWS_WITH(gemm(f32({2, 3}), false, f32({4, 3}), true, f32({2, 3})), Catch::Contains("n = 3 columns"));
  CHECK_THROWS_WITH(gemm(f32({3, 2, 3}), false, f32({3, 4}), false, f32({2, 2, 4})),
                    Catch::Contains("batch dimension of a is 3"));
  CHECK_THROWS_WITH(gemm(f32({2, 3}), false, f32({2, 3, 4}), false, f32({2, 4})),
                    Catch::Contains("batch dimension of b is 2"));
  CHECK_THROWS_WITH(gemm(f32({6}), false, f32({6, 1}), false, f32({1, 1})), Catch::Contains("a must be 2-d"));
  CHECK_THROWS_WITH(gemm(f32({2, 3}), false, Tensor::zeros({3, 2}, DType::BF16), false, f32({2, 2})),
                    Catch::Contains("same dtype"));
  CHECK_THROWS_WITH(gemm(Tensor::zeros({2, 3}, DType::BF16), false, Tensor::zeros({3, 2}, DType::BF16), false,
                         Tensor::zeros({2, 2}, DType::F16)),
                    Catch::Contains("expected bf16 or f32"));
  CHECK_THROWS_WITH(gemm(Tensor::zeros({2, 3}, DType::I32), false, Tensor::zeros({3, 2}, DType::I32), false,
                         Tensor::zeros({2, 2}, DType::I32)),
                    Catch::Contains("floating"));
  Tensor big = f32({4, 4});
  CHECK_THROWS_WITH(gemm(big.narrow(0, 0, 2), false, f32({4, 2}), false, big.narrow(0, 2, 2).narrow(1, 0, 2)),
                    Catch::Contains("contiguous"));
  Tensor buf = f32({8, 4});
  CHECK_THROWS_WITH(gemm(buf.narrow(0, 0, 4), false, f32({4, 4}), false, buf.narrow(0, 2, 4)),
                    Catch::Contains("must not overlap"));
  // Linear layer.
  CHECK_THROWS_WITH(linear_forward(f32({5, 7}), f32({4, 6}), nullptr, f32({5, 4})), Catch::Contains("in_features"));
  CHECK_THROWS_WITH(linear_forward(f32({5, 7}), f32({4, 7}), nullptr, f32({5, 3})), Catch::Contains("y has shape"));
  Tensor bad_bias = f32({3});
  CHECK_THROWS_WITH(linear_forward(f32({5, 7}), f32({4, 7}), &bad_bias, f32({5, 4})), Catch::Contains("bias has shape"));
  Tensor dw = f32({7, 4}), db16 = Tensor::zeros({4}, DType::F16);
  CHECK_THROWS_WITH(linear_backward(f32({5, 7}), f32({4, 7}), f32({5, 4}), nullptr, &dw, nullptr, false),
                    Catch::Contains("dw has shape"));
  CHECK_THROWS_WITH(linear_backward(f32({5, 7}), f32({4, 7}), f32({5, 4}), nullptr, nullptr, &db16, false),
                    Catch::Contains("dbias has dtype f16"));
}
