// Scalar activation formulas shared by the CPU and CUDA implementations (kernels/activation.h),
// so both backends evaluate the same expressions. T is float or double.
// Reference: Megatron-Core fusions/fused_bias_geglu.py (quick_gelu, quick_geglu_back),
// fusions/fused_bias_swiglu.py (clamped_swiglu, clamped_swiglu_back), activations.py (squared_relu).
#pragma once
#include <cmath>

#include "core/half.h"
#include "kernels/activation.h"

namespace strata::kernels::act {

using std::erf;
using std::exp;
using std::tanh;

template <typename T> STRATA_HD T gelu_tanh(T x) {
  const T k = T(0.7978845608028654);  // sqrt(2/pi)
  T inner = k * (x + T(0.044715) * x * x * x);
  return T(0.5) * x * (T(1) + tanh(inner));
}
template <typename T> STRATA_HD T gelu_tanh_grad(T x) {
  const T k = T(0.7978845608028654);
  T x2 = x * x;
  T inner = k * (x + T(0.044715) * x2 * x);
  T t = tanh(inner);
  T sech2 = T(1) - t * t;
  return T(0.5) * (T(1) + t) + T(0.5) * x * sech2 * k * (T(1) + T(3) * T(0.044715) * x2);
}
template <typename T> STRATA_HD T gelu_erf(T x) {
  return T(0.5) * x * (T(1) + erf(x * T(0.7071067811865476)));
}
template <typename T> STRATA_HD T gelu_erf_grad(T x) {
  T cdf = T(0.5) * (T(1) + erf(x * T(0.7071067811865476)));
  T pdf = exp(T(-0.5) * x * x) * T(0.3989422804014327);  // 1/sqrt(2*pi)
  return cdf + x * pdf;
}
template <typename T> STRATA_HD T sigmoid(T x) { return T(1) / (T(1) + exp(-x)); }
template <typename T> STRATA_HD T silu(T x) { return x * sigmoid(x); }
template <typename T> STRATA_HD T silu_grad(T x) {
  T s = sigmoid(x);
  return s * (T(1) + x * (T(1) - s));
}
// Megatron's quick_gelu: x·σ(1.702·x); its derivative σ·(1 + 1.702·x·(1 - σ)).
template <typename T> STRATA_HD T quick_gelu(T x) { return x * sigmoid(T(1.702) * x); }
template <typename T> STRATA_HD T quick_gelu_grad(T x) {
  T s = sigmoid(T(1.702) * x);
  return s * (T(1) + T(1.702) * x * (T(1) - s));
}
// relu(x)²; its derivative 2·relu(x).
template <typename T> STRATA_HD T squared_relu(T x) { return x > T(0) ? x * x : T(0); }
template <typename T> STRATA_HD T squared_relu_grad(T x) { return x > T(0) ? T(2) * x : T(0); }

// One element of a gated linear unit (kernels::glu_forward): y = gate(a')·(b' + offset), a' = min(a, c),
// b' = clamp(b, -c, c) when clamped. Built on the host from kernels::GluOptions.
template <typename T> struct Glu {
  bool quick_gelu_gate = false;  // false: SiLU
  T offset = T(0);
  bool clamped = false;
  T limit = T(0);  // c

  STRATA_HD T gate(T a) const { return quick_gelu_gate ? quick_gelu(a) : silu(a); }
  STRATA_HD T gate_grad(T a) const { return quick_gelu_gate ? quick_gelu_grad(a) : silu_grad(a); }
  STRATA_HD T gate_in(T a) const { return clamped && a > limit ? limit : a; }
  STRATA_HD T linear_in(T b) const { return !clamped ? b : b > limit ? limit : b < -limit ? -limit : b; }
  STRATA_HD T forward(T a, T b) const { return gate(gate_in(a)) * (linear_in(b) + offset); }
  // g: dy -> da, db; zero where the input was clamped (torch.clamp passes c itself: a <= c, |b| <= c).
  STRATA_HD void backward(T a, T b, T g, T& da, T& db) const {
    const T ac = gate_in(a), bc = linear_in(b);
    const bool pass_a = !clamped || a <= limit, pass_b = !clamped || (b >= -limit && b <= limit);
    da = pass_a ? g * (bc + offset) * gate_grad(ac) : T(0);
    db = pass_b ? g * gate(ac) : T(0);
  }
};
template <typename T> Glu<T> make_glu(const GluOptions& o) {
  return Glu<T>{o.gate == GluGate::QuickGelu, static_cast<T>(o.linear_offset), o.clamp.has_value(),
                static_cast<T>(o.clamp.value_or(0.0))};
}

}  // namespace strata::kernels::act
