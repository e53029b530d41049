// `strata bench packed` (apps/strata/bench_packed.h).
#include "apps/strata/bench_packed.h"

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <vector>

#include <nlohmann/json.hpp>

#include "apps/strata/bench_ops.h"
#include "core/device.h"
#include "core/error.h"
#include "core/random.h"
#include "core/tensor.h"
#include "kernels/attention.h"

namespace strata::app {
namespace {

// The tensors of one attention forward + backward.
struct AttentionRun {
  Tensor q, k, v, dout, out, lse, dq, dk, dv;
  kernels::AttentionParams params;
  void pass() const {
    kernels::attention_forward(q, k, v, out, lse, params);
    kernels::attention_backward(q, k, v, out, dout, lse, dq, dk, dv, params);
  }
};

Tensor normal(const Shape& s, DType dt, Device dev, uint64_t seed) {
  Tensor t = Tensor::empty(s, dt, dev);
  fill_normal(t, {seed, 91}, 0.0, 1.0);
  return t;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// lengths: the documents (one: no document_start); window: window_left (-1: none).
AttentionRun make_run(const BenchPackedOptions& o, DType dt, Device dev, const std::vector<int64_t>& lengths,
                      int64_t window = -1) {
  const Shape qs{o.seq, o.batch, o.heads, o.head_dim}, ks{o.seq, o.batch, o.kv_heads, o.head_dim};
  AttentionRun r;
  r.q = normal(qs, dt, dev, 1);
  r.k = normal(ks, dt, dev, 2);
  r.v = normal(ks, dt, dev, 3);
  r.dout = normal(qs, dt, dev, 4);
  r.out = Tensor::empty(qs, dt, dev);
  r.lse = Tensor::empty({o.batch, o.heads, o.seq}, dt == DType::F64 ? DType::F64 : DType::F32, dev);
  r.dq = Tensor::empty(qs, dt, dev);
  r.dk = Tensor::empty(ks, dt, dev);
  r.dv = Tensor::empty(ks, dt, dev);
  std::vector<int64_t> starts;  // [b, s]: each token's document start
  for (int64_t b = 0; b < o.batch; ++b) {
    int64_t start = 0;
    for (int64_t len : lengths) {
      starts.insert(starts.end(), static_cast<size_t>(len), start);
      start += len;
    }
  }
  if (lengths.size() > 1) r.params.document_start = Tensor::from_data(starts, Shape{o.batch, o.seq}, dev);
  r.params.window_left = window;
  return r;
}

// The work bound of a causal sliding window against full causal attention over one sequence:
// Σ_i min(window + 1, i + 1) / Σ_i (i + 1), the keys each position sees.
double window_bound(int64_t seq, int64_t window) {
  double windowed = 0, full = 0;
  for (int64_t i = 0; i < seq; ++i) {
    windowed += static_cast<double>(std::min(window + 1, i + 1));
    full += static_cast<double>(i + 1);
  }
  return windowed / full;
}

// Median time ratio of `run` against `base`, alternated `repeat` times; ms of each in the vectors.
double time_ratio(const BenchPackedOptions& o, Device dev, const AttentionRun& base, const AttentionRun& run,
                  std::vector<double>& base_ms, std::vector<double>& run_ms) {
  std::vector<double> ratios;
  for (int r = 0; r < o.repeat; ++r) {  // alternated, so load from other processes hits both alike
    base_ms.push_back(median_ms(dev, o.warmup, o.iters, [&] { base.pass(); }));
    run_ms.push_back(median_ms(dev, o.warmup, o.iters, [&] { run.pass(); }));
    ratios.push_back(run_ms.back() / base_ms.back());
  }
  return median(ratios);
}

}  // namespace

std::vector<int64_t> packed_document_lengths(int64_t seq, int64_t docs) {
  STRATA_CHECK(docs >= 1 && docs <= seq, "bench packed: --docs ", docs, " must be in [1, --seq ", seq, "]");
  const int64_t weights[] = {3, 1, 4, 1, 5, 9, 2, 6};
  int64_t total = 0;
  for (int64_t i = 0; i < docs; ++i) total += weights[i % 8];
  std::vector<int64_t> out;
  int64_t used = 0;
  for (int64_t i = 0; i < docs; ++i) {
    const int64_t len = i + 1 == docs ? seq - used : std::max<int64_t>(1, seq * weights[i % 8] / total);
    out.push_back(len);
    used += len;
  }
  STRATA_CHECK(out.back() >= 1, "bench packed: --seq ", seq, " is too short for ", docs, " documents");
  return out;
}

int run_packed_benchmark(const BenchPackedOptions& o) {
  const Device dev = resolve_device(o.device);
  const DType dt = o.dtype == "f64" ? DType::F64 : o.dtype == "bf16" ? DType::BF16 : DType::F32;
  STRATA_CHECK(o.dtype == "f32" || o.dtype == "f64" || o.dtype == "bf16", "bench packed: --dtype must be f32, bf16 or f64");
  const std::vector<int64_t> lengths = packed_document_lengths(o.seq, o.docs);
  double bound = 0;
  for (int64_t len : lengths) bound += static_cast<double>(len) * static_cast<double>(len);
  bound /= static_cast<double>(o.seq) * static_cast<double>(o.seq);
  STRATA_CHECK(o.window >= 0, "bench packed: --window ", o.window, " must be >= 0 (0: no window case)");
  const AttentionRun one = make_run(o, dt, dev, {o.seq});
  const AttentionRun packed = make_run(o, dt, dev, lengths);
  std::vector<double> one_ms, packed_ms;
  const double ratio = time_ratio(o, dev, one, packed, one_ms, packed_ms), vs_bound = ratio / bound;
  std::string docs;
  for (int64_t len : lengths) docs += (docs.empty() ? "" : " ") + std::to_string(len);
  std::printf("attention forward + backward, %s %s, seq %lld, batch %lld, heads %lld/%lld, head dim %lld\n",
              dev.str().c_str(), o.dtype.c_str(), static_cast<long long>(o.seq), static_cast<long long>(o.batch),
              static_cast<long long>(o.heads), static_cast<long long>(o.kv_heads), static_cast<long long>(o.head_dim));
  std::printf("  one document:        %10.3f ms\n", median(one_ms));
  std::printf("  %lld documents (%s): %10.3f ms\n", static_cast<long long>(o.docs), docs.c_str(), median(packed_ms));
  std::printf("  time ratio %.4f, bound sum(doc_len^2)/seq_len^2 %.4f, ratio / bound %.3f (target <= 1.5): %s\n",
              ratio, bound, vs_bound, vs_bound <= 1.5 ? "met" : "missed");
  nlohmann::json j = {{"device", dev.str()},     {"dtype", o.dtype},         {"seq", o.seq},
                      {"documents", lengths},    {"one_document_ms", one_ms}, {"packed_ms", packed_ms},
                      {"time_ratio", ratio},     {"bound", bound},           {"ratio_over_bound", vs_bound}};
  bool met = vs_bound <= 1.5;
  if (o.window > 0) {  // sliding window (window_left) against full causal attention, one document
    const AttentionRun windowed = make_run(o, dt, dev, {o.seq}, o.window);
    std::vector<double> full_ms, window_ms;
    const double w_ratio = time_ratio(o, dev, one, windowed, full_ms, window_ms);
    const double w_bound = window_bound(o.seq, o.window), w_vs_bound = w_ratio / w_bound;
    std::printf("  full causal:         %10.3f ms\n", median(full_ms));
    std::printf("  window %lld:          %10.3f ms\n", static_cast<long long>(o.window), median(window_ms));
    std::printf("  time ratio %.4f, bound sum(min(window+1, pos+1))/sum(pos+1) %.4f, ratio / bound %.3f "
                "(target <= 1.5): %s\n",
                w_ratio, w_bound, w_vs_bound, w_vs_bound <= 1.5 ? "met" : "missed");
    j["window"] = {{"window_left", o.window}, {"full_causal_ms", full_ms}, {"window_ms", window_ms},
                   {"time_ratio", w_ratio},   {"bound", w_bound},        {"ratio_over_bound", w_vs_bound}};
    met = met && w_vs_bound <= 1.5;
  }
  if (!o.json_out.empty()) std::ofstream(o.json_out) << j.dump(2) << "\n";
  return met ? 0 : 1;
}

}  // namespace strata::app
