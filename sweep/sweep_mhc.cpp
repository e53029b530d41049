// Sweep cases for kernels/mhc.h: mappings with either norm, the unfused path's gate op, Sinkhorn
// forward/backward, aggregation and merge (with and without the dropout scale, both precision
// modes), learned contraction, stream sum / broadcast — each forward and backward on the target
// against the f64 CPU reference from the same dtype-rounded inputs. The mapping, aggregation and
// merge cases run both op sets of a site on the target (kernels/mhc_composed.h: "fused." the
// use_fused_mhc ops, "unfused." the composition of GEMMs and the gate op) and compare the fused
// outputs with the unfused ones as well ("fused_vs_unfused."). Activations in the swept dtype;
// parameters and mappings in f32 (f64 for the f64 case).
#include "kernels/mhc.h"
#include "kernels/mhc_composed.h"
#include "sweep/sweep.h"

using namespace strata;
using namespace strata::kernels;

namespace {
const std::vector<DType> kMhcTypes = {DType::F64, DType::F32, DType::BF16};

struct MhcShape {
  int64_t T, n, C;
};
std::vector<MhcShape> shapes(const sweep::Context& c) {
  std::vector<MhcShape> s = {{3, 2, 5}, {17, 4, 32}};
  if (!c.quick) s.push_back({256, 4, 512});
  return s;
}
DType map_dtype(const sweep::Context& c) { return c.dtype == DType::F64 ? DType::F64 : DType::F32; }
// A mapping / parameter tensor on the target: f32 (f64) values of the f64 reference input.
Tensor on_target_map(const sweep::Context& c, const Tensor& ref) { return ref.to(map_dtype(c)).to(c.device); }
Tensor ref_of(const sweep::Context& c, const Tensor& ref) { return ref.to(map_dtype(c)).to(DType::F64); }
Tensor zeros_map(const sweep::Context& c, const Shape& s) { return Tensor::zeros(s, map_dtype(c), c.device); }
Tensor zeros64(const Shape& s) { return Tensor::zeros(s, DType::F64); }
const char* path_name(bool fused) { return fused ? "fused." : "unfused."; }

// The target outputs of one op set: fwd h_pre, h_post, h_res_logits, proj, rinv; bwd g_x, g_w, g_alpha, g_bias.
std::vector<Tensor> mappings_on_target(sweep::Context& c, bool fused, const MhcMappingOptions& o,
                                       const std::vector<Tensor>& ref_inputs) {
  const Tensor &x = ref_inputs[0], &w = ref_inputs[1];
  const int64_t n = o.n, K = x.size(1), m = n * n + 2 * n, T = x.size(0);
  const DType dt = map_dtype(c);
  std::vector<Tensor> g = {Tensor::empty({T, n}, dt, c.device), Tensor::empty({T, n}, dt, c.device),
                           Tensor::empty({T, n, n}, dt, c.device), Tensor::empty({T, m}, dt, c.device),
                           Tensor::empty({T}, dt, c.device), zeros_map(c, {T, K}), zeros_map(c, w.shape()),
                           zeros_map(c, {3}), zeros_map(c, {m})};
  const Tensor xt = c.on_target(x), wt = on_target_map(c, w), at = on_target_map(c, ref_inputs[2]);
  const Tensor bt = on_target_map(c, ref_inputs[3]);
  mhc_call(fused, mhc_mappings_forward, mhc_composed::mhc_mappings_forward, xt, wt, at, bt, o, g[0], g[1], g[2],
           g[3], g[4]);
  mhc_call(fused, mhc_mappings_backward, mhc_composed::mhc_mappings_backward, xt, wt, at, bt, g[3], g[4], o,
           on_target_map(c, ref_inputs[4]), on_target_map(c, ref_inputs[5]), on_target_map(c, ref_inputs[6]),
           g[5], g[6], g[7], g[8]);
  return g;
}

void mappings_case(sweep::Context& c, const MhcShape& s, bool inside) {
  const int64_t n = s.n, K = n * s.C, m = n * n + 2 * n, T = s.T;
  const MhcMappingOptions o{n, inside, inside ? 1e-5 : kMhcNormEps};
  const Tensor x = c.input({T, K}, 1), w = ref_of(c, c.input({m, K}, 2, -0.3, 0.3));
  const Tensor alpha = ref_of(c, c.input({3}, 3, 0.5, 2.0)), bias = ref_of(c, c.input({m}, 4));
  const Tensor gpre = ref_of(c, c.input({T, n}, 5)), gpost = ref_of(c, c.input({T, n}, 6));
  const Tensor gres = ref_of(c, c.input({T, n, n}, 7));
  std::vector<Tensor> r = {Tensor::empty({T, n}, DType::F64), Tensor::empty({T, n}, DType::F64),
                           Tensor::empty({T, n, n}, DType::F64), Tensor::empty({T, m}, DType::F64),
                           Tensor::empty({T}, DType::F64), zeros64({T, K}), zeros64({m, K}), zeros64({3}),
                           zeros64({m})};
  mhc_mappings_forward(x, w, alpha, bias, o, r[0], r[1], r[2], r[3], r[4]);
  mhc_mappings_backward(x, w, alpha, bias, r[3], r[4], o, gpre, gpost, gres, r[5], r[6], r[7], r[8]);
  const std::vector<Tensor> in = {x, w, alpha, bias, gpre, gpost, gres};
  const double tol = c.bound(1e-5, 1e-5, 1e-5);  // mappings are f32 computed from the same rounded x
  const Shape sh{T, K};
  const char* names[] = {"fwd.h_pre", "fwd.h_post", "fwd.h_res_logits", nullptr, nullptr,
                         "bwd.g_x",   "bwd.g_w",    "bwd.g_alpha",      "bwd.g_bias"};
  std::vector<Tensor> outs[2];
  for (bool fused : {true, false}) {
    outs[fused] = mappings_on_target(c, fused, o, in);
    for (size_t i = 0; i < r.size(); ++i)
      if (names[i])
        c.compare(std::string(path_name(fused)) + (inside ? "inside." : "outside.") + names[i], sh, outs[fused][i],
                  r[i], tol);
  }
  for (size_t i = 0; i < r.size(); ++i)
    if (names[i])
      c.compare(std::string("fused_vs_unfused.") + (inside ? "inside." : "outside.") + names[i], sh, outs[1][i],
                outs[0][i].to(DType::F64).to(Device::cpu()), tol);
}

void compute_h_case(sweep::Context& c, const MhcShape& s, bool inside) {
  const int64_t n = s.n, K = n * s.C, m = n * n + 2 * n, T = s.T;
  const MhcMappingOptions o{n, inside, inside ? 1e-5 : kMhcNormEps};
  const Tensor proj = ref_of(c, c.input({T, m}, 24, -3.0, 3.0)), ss = ref_of(c, c.input({T}, 25, 0.1, 4.0 * K));
  const Tensor alpha = ref_of(c, c.input({3}, 26, 0.5, 2.0)), bias = ref_of(c, c.input({m}, 27));
  const Tensor gpre = ref_of(c, c.input({T, n}, 28)), gpost = ref_of(c, c.input({T, n}, 29));
  const Tensor gres = ref_of(c, c.input({T, n, n}, 30));
  auto run = [&](DType dt, Device dev, auto&& put) {
    std::vector<Tensor> o6 = {Tensor::empty({T, n}, dt, dev),    Tensor::empty({T, n}, dt, dev),
                              Tensor::empty({T, n, n}, dt, dev), Tensor::empty({T}, dt, dev),
                              Tensor::empty({T, m}, dt, dev),    Tensor::empty({T}, dt, dev),
                              Tensor::zeros({3}, dt, dev),       Tensor::zeros({m}, dt, dev)};
    mhc_compute_h_forward(put(proj), put(ss), put(alpha), put(bias), K, o, o6[0], o6[1], o6[2], o6[3]);
    mhc_compute_h_backward(put(proj), put(ss), put(alpha), put(bias), K, o, put(gpre), put(gpost), put(gres), o6[4],
                           o6[5], o6[6], o6[7]);
    return o6;
  };
  const std::vector<Tensor> r = run(DType::F64, Device::cpu(), [](const Tensor& t) { return t; });
  const std::vector<Tensor> g = run(map_dtype(c), c.device, [&](const Tensor& t) { return on_target_map(c, t); });
  const char* names[] = {"fwd.h_pre", "fwd.h_post", "fwd.h_res_logits", "fwd.rinv",
                         "bwd.g_proj", "bwd.g_sumsq", "bwd.g_alpha",     "bwd.g_bias"};
  for (size_t i = 0; i < r.size(); ++i)
    c.compare(std::string(inside ? "inside." : "outside.") + names[i], Shape{T, K}, g[i], r[i], c.bound(1e-5, 1e-5, 1e-5));
}

void sinkhorn_case(sweep::Context& c, const MhcShape& s) {
  const int64_t T = s.T, n = s.n;
  const Tensor L = ref_of(c, c.input({T, n, n}, 8, -3.0, 3.0)), g = ref_of(c, c.input({T, n, n}, 9));
  Tensor r = Tensor::empty({T, n, n}, DType::F64), rg = Tensor::empty({T, n, n}, DType::F64);
  mhc_sinkhorn_forward(L, 20, kMhcSinkhornEps, r);
  mhc_sinkhorn_backward(L, 20, kMhcSinkhornEps, g, rg);
  Tensor o = zeros_map(c, {T, n, n}), og = zeros_map(c, {T, n, n});
  mhc_sinkhorn_forward(on_target_map(c, L), 20, kMhcSinkhornEps, o);
  mhc_sinkhorn_backward(on_target_map(c, L), 20, kMhcSinkhornEps, on_target_map(c, g), og);
  c.compare("fwd", Shape{T, n, n}, o, r, c.bound(1e-5, 1e-5, 1e-5));
  c.compare("bwd", Shape{T, n, n}, og, rg, c.bound(1e-4, 1e-4, 1e-4));
}

void streams_case(sweep::Context& c, const MhcShape& s, bool keep, bool fused) {
  const int64_t T = s.T, n = s.n, C = s.C, K = n * C;
  const Tensor x = c.input({T, K}, 10), y = c.input({T, C}, 11), b = c.input({C}, 12), gagg = c.input({T, C}, 13);
  const Tensor gout = c.input({T, K}, 14), hp = ref_of(c, c.input({T, n}, 15, 0.2, 1.0));
  const Tensor hq = ref_of(c, c.input({T, n}, 16, 0.0, 2.0)), hr = ref_of(c, c.input({T, n, n}, 17, 0.0, 0.6));
  const Tensor ps = ref_of(c, c.input({T, K}, 18, 0.0, 1.2));
  const double tol = c.bound(1e-5, 2e-2, 2e-2);
  const std::string p = std::string(path_name(fused)) + (keep ? "fp32_mappings." : "act_mappings.");
  // Aggregation.
  Tensor ra = Tensor::empty({T, C}, DType::F64), a = c.empty({T, C});
  mhc_aggregate_forward(x, hp, true, ra);
  mhc_call(fused, mhc_aggregate_forward, mhc_composed::mhc_aggregate_forward, c.on_target(x), on_target_map(c, hp),
           keep, a);
  c.compare(p + "aggregate.fwd", Shape{T, K}, a, ra, tol);
  Tensor rgx = zeros64({T, K}), rgh = Tensor::empty({T, n}, DType::F64);
  mhc_aggregate_backward(x, hp, true, gagg, rgx, rgh);
  Tensor gx = zeros_map(c, {T, K}), gh = zeros_map(c, {T, n});
  mhc_call(fused, mhc_aggregate_backward, mhc_composed::mhc_aggregate_backward, c.on_target(x), on_target_map(c, hp),
           keep, c.on_target(gagg), gx, gh);
  c.compare(p + "aggregate.bwd.g_x", Shape{T, K}, gx, rgx, tol);
  c.compare(p + "aggregate.bwd.g_h_pre", Shape{T, K}, gh, rgh, tol);
  // Merge, without and with the dropout scale.
  for (bool scaled : {false, true}) {
    const std::string q = p + (scaled ? "merge_scaled." : "merge.");
    const Tensor sr = scaled ? ps : Tensor(), st = scaled ? on_target_map(c, ps) : Tensor();
    Tensor ro = Tensor::empty({T, K}, DType::F64), out = c.empty({T, K});
    mhc_merge_forward(x, hr, hq, y, b, sr, true, ro);
    mhc_call(fused, mhc_merge_forward, mhc_composed::mhc_merge_forward, c.on_target(x), on_target_map(c, hr),
             on_target_map(c, hq), c.on_target(y), c.on_target(b), st, keep, out);
    c.compare(q + "fwd", Shape{T, K}, out, ro, tol);
    Tensor r1 = zeros64({T, K}), r2 = Tensor::empty({T, n, n}, DType::F64), r3 = Tensor::empty({T, n}, DType::F64);
    Tensor r4 = Tensor::empty({T, C}, DType::F64), r5 = zeros64({C});
    mhc_merge_backward(x, hr, hq, y, b, sr, true, gout, r1, r2, r3, r4, r5);
    Tensor g1 = zeros_map(c, {T, K}), g2 = zeros_map(c, {T, n, n}), g3 = zeros_map(c, {T, n});
    Tensor g4 = zeros_map(c, {T, C}), g5 = zeros_map(c, {C});
    mhc_call(fused, mhc_merge_backward, mhc_composed::mhc_merge_backward, c.on_target(x), on_target_map(c, hr),
             on_target_map(c, hq), c.on_target(y), c.on_target(b), st, keep,
             c.on_target(gout), g1, g2, g3, g4, g5);
    c.compare(q + "bwd.g_x", Shape{T, K}, g1, r1, tol), c.compare(q + "bwd.g_h_res", Shape{T, K}, g2, r2, tol);
    c.compare(q + "bwd.g_h_post", Shape{T, K}, g3, r3, tol), c.compare(q + "bwd.g_y", Shape{T, K}, g4, r4, tol);
    c.compare(q + "bwd.g_bias", Shape{T, K}, g5, r5, tol);
  }
}

void contract_case(sweep::Context& c, const MhcShape& s) {
  const int64_t T = s.T, n = s.n, C = s.C, K = n * C;
  const double eps = 1e-5, tol = c.bound(1e-5, 2e-2, 2e-2);
  const Tensor x = c.input({T, K}, 19), g = c.input({T, C}, 20), fn = ref_of(c, c.input({n, K}, 21, -0.2, 0.2));
  const Tensor base = ref_of(c, c.input({n}, 22)), scale = ref_of(c, c.input({1}, 23, 0.5, 1.5));
  Tensor ro = Tensor::empty({T, C}, DType::F64), out = c.empty({T, C});
  mhc_contract_forward(x, fn, base, scale, eps, ro);
  mhc_contract_forward(c.on_target(x), on_target_map(c, fn), on_target_map(c, base), on_target_map(c, scale), eps, out);
  c.compare("learned.fwd", Shape{T, K}, out, ro, tol);
  Tensor r1 = zeros64({T, K}), r2 = zeros64({n, K}), r3 = zeros64({n}), r4 = zeros64({1});
  mhc_contract_backward(x, fn, base, scale, eps, g, r1, r2, r3, r4);
  Tensor g1 = zeros_map(c, {T, K}), g2 = zeros_map(c, {n, K}), g3 = zeros_map(c, {n}), g4 = zeros_map(c, {1});
  mhc_contract_backward(c.on_target(x), on_target_map(c, fn), on_target_map(c, base), on_target_map(c, scale), eps,
                        c.on_target(g), g1, g2, g3, g4);
  c.compare("learned.bwd.g_x", Shape{T, K}, g1, r1, tol), c.compare("learned.bwd.g_fn", Shape{T, K}, g2, r2, tol);
  c.compare("learned.bwd.g_base", Shape{T, K}, g3, r3, tol);
  c.compare("learned.bwd.g_scale", Shape{T, K}, g4, r4, tol);
  Tensor rs = Tensor::empty({T, C}, DType::F64), sum = c.empty({T, C});
  mhc_stream_sum(x, n, 1.0 / n, rs);
  mhc_stream_sum(c.on_target(x), n, 1.0 / n, sum);
  c.compare("mean.sum", Shape{T, K}, sum, rs, c.bound(1e-6, 1e-2, 1e-2));
  Tensor rb = Tensor::empty({T, K}, DType::F64), bc = c.empty({T, K});
  mhc_stream_broadcast(g, n, 1.0, rb);
  mhc_stream_broadcast(c.on_target(g), n, 1.0, bc);
  c.compare("expand.broadcast", Shape{T, K}, bc, rb, c.bound(1e-7, 1e-7, 1e-7));
}
}  // namespace

STRATA_SWEEP_OP("mhc_mappings", kMhcTypes, "mhc_mappings_forward mhc_mappings_backward", [](sweep::Context& c) {
  for (const MhcShape& s : shapes(c))
    for (bool inside : {false, true}) mappings_case(c, s, inside);
});

STRATA_SWEEP_OP("mhc_compute_h", kMhcTypes, "mhc_compute_h_forward mhc_compute_h_backward", [](sweep::Context& c) {
  for (const MhcShape& s : shapes(c))
    for (bool inside : {false, true}) compute_h_case(c, s, inside);
});

STRATA_SWEEP_OP("mhc_sinkhorn", kMhcTypes, "mhc_sinkhorn_forward mhc_sinkhorn_backward", [](sweep::Context& c) {
  for (const MhcShape& s : shapes(c)) sinkhorn_case(c, s);
});

STRATA_SWEEP_OP("mhc_streams", kMhcTypes,
                "mhc_aggregate_forward mhc_aggregate_backward mhc_merge_forward mhc_merge_backward",
                [](sweep::Context& c) {
  for (const MhcShape& s : shapes(c))
    for (bool keep : {true, false})
      for (bool fused : {true, false}) streams_case(c, s, keep, fused);
});

STRATA_SWEEP_OP("mhc_contract", kMhcTypes,
                "mhc_contract_forward mhc_contract_backward mhc_stream_sum mhc_stream_broadcast",
                [](sweep::Context& c) {
  for (const MhcShape& s : shapes(c)) contract_case(c, s);
});
