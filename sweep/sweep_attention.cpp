// Sweep cases for kernels/attention.h: forward out and lse, backward dq, dk, dv of the target
// (device, dtype) against the f64 CPU reference on the same rounded inputs; odd shapes always
// (s = 1, s = 77, d = 64/128, GQA, offsets, dropout), a realistic one when !quick; plus a check
// that two backward calls on the target are bitwise equal (bound 0).
#include "kernels/attention.h"
#include "sweep/sweep.h"

using namespace strata;
using namespace strata::kernels;

namespace {
const std::vector<DType> kFloat = {DType::F64, DType::F32, DType::BF16, DType::F16};

struct Case {
  int64_t sq, sk, b, hq, hkv, d;
  bool causal = true;
  double dropout = 0;
  int64_t q_off = 0;
  bool repeat = false;  // also check backward determinism
};

void attention_case(sweep::Context& c, const Case& cs) {
  const Shape qs{cs.sq, cs.b, cs.hq, cs.d}, ks{cs.sk, cs.b, cs.hkv, cs.d}, ls{cs.b, cs.hq, cs.sq};
  AttentionParams p;
  p.causal = cs.causal;
  p.dropout_p = cs.dropout;
  p.dropout_key = {2024, 7};
  p.q_position_offset = cs.q_off;
  p.global_seq_len = std::max(cs.sk, cs.q_off + cs.sq);
  Tensor q = c.input(qs, 1), k = c.input(ks, 2), v = c.input(ks, 3), dout = c.input(qs, 4);

  // f64 CPU reference (lse in f64).
  Tensor out_r = Tensor::empty(qs, DType::F64), lse_r = Tensor::empty(ls, DType::F64);
  attention_forward(q, k, v, out_r, lse_r, p);
  Tensor dq_r = Tensor::empty(qs, DType::F64), dk_r = Tensor::empty(ks, DType::F64), dv_r = Tensor::empty(ks, DType::F64);
  attention_backward(q, k, v, out_r, dout, lse_r, dq_r, dk_r, dv_r, p);

  // Target: its own forward outputs feed its backward.
  Tensor qt = c.on_target(q), kt = c.on_target(k), vt = c.on_target(v), dot = c.on_target(dout);
  Tensor out = c.empty(qs), lse = Tensor::empty(ls, DType::F32, c.device);
  attention_forward(qt, kt, vt, out, lse, p);
  Tensor dq = c.empty(qs), dk = c.empty(ks), dv = c.empty(ks);
  attention_backward(qt, kt, vt, out, dot, lse, dq, dk, dv, p);

  const std::string tag = std::string(cs.causal ? "causal" : "full") + (cs.dropout > 0 ? ".drop" : "") +
                          (cs.q_off ? ".offset" : "") + (cs.hq != cs.hkv ? ".gqa" : "");
  const Shape shown{cs.sq, cs.sk, cs.b, cs.hq, cs.hkv, cs.d};  // [sq, sk, b, hq, hkv, d]
  c.compare(tag + ".out", shown, out, out_r, c.bound(1e-5, 1e-2, 2e-3));
  c.compare(tag + ".lse", shown, lse, lse_r, c.bound(1e-6, 1e-3, 1e-3));
  if (cs.sk > 1) {  // with a single key, P = 1 and dq = dk = 0 exactly: nothing to compare
    c.compare(tag + ".dq", shown, dq, dq_r, c.bound(2e-5, 2e-2, 5e-3));
    c.compare(tag + ".dk", shown, dk, dk_r, c.bound(2e-5, 2e-2, 5e-3));
  }
  c.compare(tag + ".dv", shown, dv, dv_r, c.bound(2e-5, 2e-2, 5e-3));
  if (cs.repeat) {
    Tensor dq2 = c.empty(qs), dk2 = c.empty(ks), dv2 = c.empty(ks);
    attention_backward(qt, kt, vt, out, dot, lse, dq2, dk2, dv2, p);
    c.compare(tag + ".dq.repeat", shown, dq2, dq, 0.0);
    c.compare(tag + ".dk.repeat", shown, dk2, dk, 0.0);
    c.compare(tag + ".dv.repeat", shown, dv2, dv, 0.0);
  }
}
}  // namespace

STRATA_SWEEP_OP("attention", kFloat, "attention_forward attention_backward", [](sweep::Context& c) {
  std::vector<Case> cases = {
      {1, 1, 1, 2, 2, 64},                            // s = 1
      {77, 77, 2, 4, 2, 64, true, 0, 0, true},        // odd s, GQA, determinism
      {77, 77, 1, 4, 1, 128, false},                  // non-causal, MQA, d = 128
      {45, 70, 2, 2, 2, 96, true, 0.1, 25},           // offsets (q rows at 25..69), dropout, d = 96
      {33, 33, 1, 2, 2, 256, true},                   // d = 256
      {3, 5, 2, 2, 1, 7, true, 0.2, 2},               // tiny odd d
  };
  if (!c.quick) {
    cases.push_back({1024, 1024, 2, 16, 4, 128, true});       // realistic
    cases.push_back({300, 300, 1, 8, 8, 64, true, 0.1, 0, true});
  }
  for (const Case& cs : cases) attention_case(c, cs);
});
