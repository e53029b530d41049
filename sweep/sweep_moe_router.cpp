// Sweep cases for kernels/moe_router.h (router score function + top-k) against the f64 CPU
// reference on the same rounded logits: every score function, pre/post softmax, k from 1 to E,
// scaling, an expert bias (sigmoid / sqrtsoftplus), T = 0; indices exact, probabilities and
// d(logits) within the dtype's bound. Logits lie in [-3, 3] (no sigmoid saturation, so a 16-bit
// tie is a tie in f64 too). Shape column: [T, E, k].
#include "kernels/moe_router.h"
#include "sweep/sweep.h"

using namespace strata;
using namespace strata::kernels;

namespace {
struct RouterCase {
  int64_t tokens, experts, k;
  RouterScore score = RouterScore::Softmax;
  bool pre_softmax = false, bias = false;
  double scale = 1.0;
};

Tensor as_f64(const Tensor& t) { return t.to(Device::cpu()).to(DType::F64); }

void router_case(sweep::Context& c, const RouterCase& r) {
  const MoeRouterTopkOptions o{r.score, r.pre_softmax, r.k, r.scale};
  const Shape shape{r.tokens, r.experts, r.k};
  const Tensor logits = c.input({r.tokens, r.experts}, 31, -3, 3), g = c.input({r.tokens, r.k}, 32);
  const Tensor bias = c.input({r.experts}, 33, -0.3, 0.3).to(DType::F32);
  Tensor p_ref = Tensor::empty({r.tokens, r.k}, DType::F64), i_ref = Tensor::empty({r.tokens, r.k}, DType::I64);
  Tensor d_ref = Tensor::empty({r.tokens, r.experts}, DType::F64);
  moe_router_topk_forward(logits, r.bias ? &bias : nullptr, o, p_ref, i_ref);
  moe_router_topk_backward(logits, i_ref, g, o, d_ref);

  const Tensor lt = c.on_target(logits), gt = c.on_target(g), bt = bias.to(c.device);
  Tensor p = c.empty({r.tokens, r.k}), i = Tensor::empty({r.tokens, r.k}, DType::I64, c.device);
  Tensor d = c.empty({r.tokens, r.experts});
  moe_router_topk_forward(lt, r.bias ? &bt : nullptr, o, p, i);
  moe_router_topk_backward(lt, i_ref.to(c.device), gt, o, d);  // the reference's picks: one comparison each
  std::string what = r.score == RouterScore::Softmax ? (r.pre_softmax ? "softmax_pre" : "softmax")
                     : r.score == RouterScore::Sigmoid ? "sigmoid"
                                                       : "sqrtsoftplus";
  if (r.bias) what += ".bias";
  c.compare(what + ".indices", shape, as_f64(i), as_f64(i_ref), 0.0);
  c.compare(what + ".probs", shape, p, p_ref, c.bound(1e-6, 8e-3, 1e-3));
  c.compare(what + ".dlogits", shape, d, d_ref, c.bound(1e-5, 2e-2, 4e-3));
}
}  // namespace

STRATA_SWEEP_OP("moe_router_topk", {DType::F64, DType::F32, DType::BF16, DType::F16},
                "moe_router_topk_forward moe_router_topk_backward", [](sweep::Context& c) {
                  const RouterScore sm = RouterScore::Softmax, sg = RouterScore::Sigmoid,
                                    sp = RouterScore::SqrtSoftplus;
                  std::vector<RouterCase> cases = {
                      {1, 1, 1},
                      {37, 8, 2},
                      {37, 8, 1},                        // post-softmax top-1: probability 1
                      {37, 8, 2, sm, true},
                      {37, 8, 8, sm, true, false, 2.0},  // k = E
                      {64, 16, 4, sg, false, true, 2.5},
                      {64, 16, 1, sg},
                      {50, 12, 3, sp, false, true},
                      {0, 4, 2},                         // no tokens
                  };
                  if (!c.quick) {
                    cases.push_back({4096, 64, 8, sm});
                    cases.push_back({4096, 256, 8, sg, false, true, 2.5});  // DeepSeek-V3 shape
                    cases.push_back({2048, 160, 6, sm, true});
                    cases.push_back({1024, 40, 40, sp});
                  }
                  for (const RouterCase& r : cases) router_case(c, r);
                });
