// Shared helpers for unit tests: random tensors, error measures, finite-difference gradients, a fixed batch.
#pragma once
#include <catch2/catch.hpp>

#include <cmath>
#include <functional>
#include <vector>

#include "core/random.h"
#include "core/tensor.h"
#include "models/batch.h"

namespace strata::test {

// Uniform in [low, high) in f64 on the CPU, then cast to dtype.
inline Tensor random_tensor(const Shape& shape, uint64_t seed, double low = -1.0, double high = 1.0,
                            DType dtype = DType::F64) {
  Tensor t = Tensor::empty(shape, DType::F64);
  fill_uniform(t, philox::Key{seed, 1234}, low, high);
  return t.to(dtype);
}

// ||a - b||_2 / max(||b||_2, tiny): the normalized error used across tests and the sweep.
inline double normalized_error(const Tensor& a, const Tensor& b) {
  std::vector<double> x = a.to_vector(), y = b.to_vector();
  REQUIRE(x.size() == y.size());
  double num = 0, den = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    num += (x[i] - y[i]) * (x[i] - y[i]);
    den += y[i] * y[i];
  }
  return std::sqrt(num) / std::max(std::sqrt(den), 1e-300);
}

inline double max_abs_diff(const Tensor& a, const Tensor& b) {
  std::vector<double> x = a.to_vector(), y = b.to_vector();
  REQUIRE(x.size() == y.size());
  double m = 0;
  for (size_t i = 0; i < x.size(); ++i) m = std::max(m, std::abs(x[i] - y[i]));
  return m;
}

// sum(t * w) in f64.
inline double dot(const Tensor& t, const Tensor& w) {
  std::vector<double> x = t.to_vector(), y = w.to_vector();
  double s = 0;
  for (size_t i = 0; i < x.size(); ++i) s += x[i] * y[i];
  return s;
}

// Central finite differences of the scalar L(x) = loss() with respect to every element of x
// (an f64 CPU tensor, perturbed in place): dL/dx_i ≈ (L(x+h e_i) - L(x-h e_i)) / 2h.
inline Tensor numeric_gradient(const Tensor& x, const std::function<double()>& loss, double h = 1e-6) {
  REQUIRE(x.dtype() == DType::F64);
  REQUIRE(x.is_contiguous());
  Tensor g = Tensor::zeros(x.shape(), DType::F64);
  double* xp = x.data<double>();
  double* gp = g.data<double>();
  for (int64_t i = 0; i < x.numel(); ++i) {
    double orig = xp[i];
    xp[i] = orig + h;
    double lp = loss();
    xp[i] = orig - h;
    double lm = loss();
    xp[i] = orig;
    gp[i] = (lp - lm) / (2 * h);
  }
  return g;
}

// Asserts that an analytic gradient matches finite differences within `tol` normalized error.
inline void check_gradient(const char* what, const Tensor& analytic, const Tensor& numeric, double tol) {
  double err = normalized_error(analytic, numeric);
  INFO(what << ": normalized error " << err << " (bound " << tol << ")");
  CHECK(err <= tol);
}

// A [b, s] batch with tokens (7i + 3) mod vocab and labels (11i + 5) mod vocab (i the flat index)
// and every token counted: a fixed, non-trivial micro-batch for model tests.
inline Batch fixed_batch(int64_t b, int64_t s, int64_t vocab) {
  std::vector<int64_t> tok(static_cast<size_t>(b * s)), lab(tok.size());
  for (size_t i = 0; i < tok.size(); ++i) {
    tok[i] = static_cast<int64_t>((i * 7 + 3) % static_cast<size_t>(vocab));
    lab[i] = static_cast<int64_t>((i * 11 + 5) % static_cast<size_t>(vocab));
  }
  Batch batch;
  batch.tokens = Tensor::from_data(tok, Shape{b, s});
  batch.labels = Tensor::from_data(lab, Shape{b, s});
  batch.loss_mask = Tensor::full({b, s}, 1.0, DType::F32);
  return batch;
}

// A [b, s] batch of pseudo-random tokens and labels in [0, vocab) from an LCG seeded by `seed`,
// every token counted.
inline Batch random_batch(int64_t b, int64_t s, int64_t vocab, uint64_t seed) {
  std::vector<int64_t> tok(static_cast<size_t>(b * s)), lab(tok.size());
  uint64_t x = seed * 6364136223846793005ull + 1442695040888963407ull;
  auto next = [&x, vocab]() {
    x = x * 6364136223846793005ull + 1442695040888963407ull;
    return static_cast<int64_t>((x >> 33) % static_cast<uint64_t>(vocab));
  };
  for (auto& t : tok) t = next();
  for (auto& t : lab) t = next();
  Batch batch;
  batch.tokens = Tensor::from_data(tok, Shape{b, s});
  batch.labels = Tensor::from_data(lab, Shape{b, s});
  batch.loss_mask = Tensor::full({b, s}, 1.0, DType::F32);
  return batch;
}

// (f(x + h) − f(x − h)) / 2h for element i of x (restored afterwards): the finite-difference
// derivative the gradient tests compare main_grad with.
inline double central_difference(double* x, int64_t i, double h, const std::function<double()>& f) {
  const double orig = x[i];
  x[i] = orig + h;
  const double lp = f();
  x[i] = orig - h;
  const double lm = f();
  x[i] = orig;
  return (lp - lm) / (2 * h);
}

}  // namespace strata::test
