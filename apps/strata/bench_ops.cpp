// Op benchmarks (apps/strata/bench_ops.h). Each line: op, device, shape, median time, achieved
// rate, and the reference measured in the same run with the ratio:
//   GEMM      our kernels::gemm vs the raw library call (cblas_sgemm on CPU, cublasLtMatmul on GPU)
//   attention forward+backward TFLOP/s (reference: PyTorch SDPA, run by scripts/gpu_check.sh)
//   memory-bound ops (layernorm, softmax, cross-entropy) GB/s vs a device-to-device copy
#include "apps/strata/bench_ops.h"

#include <cblas.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <functional>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/device.h"
#include "core/random.h"
#include "core/stream.h"
#include "core/tensor.h"
#include "kernels/attention.h"
#include "kernels/gemm.h"
#include "kernels/norm.h"
#include "kernels/softmax.h"
#if STRATA_WITH_CUDA
#include "kernels/cuda/cublaslt_baseline.h"
#endif

namespace strata::app {

double median_ms(Device dev, int warmup, int iters, const std::function<void()>& fn) {
  for (int i = 0; i < warmup; ++i) fn();
  synchronize(dev);
  std::vector<double> t;
  for (int i = 0; i < iters; ++i) {
    Event a(dev, true), b(dev, true);
    Stream s = Stream::current(dev);
    a.record(s);
    fn();
    b.record(s);
    b.synchronize();
    t.push_back(a.elapsed_ms(b));
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

namespace {

Tensor randn(const Shape& s, DType dt, Device dev, uint64_t seed) {
  Tensor t = Tensor::empty(s, dt, dev);
  fill_normal(t, {seed, 77}, 0.0, 1.0);
  return t;
}

struct Row {  // one benchmark line
  std::string op, device, shape, unit;
  double ms = 0, rate = 0, ref_rate = 0;
  std::string ref = "";
};

void print_row(const Row& r) {
  std::printf("%-22s %-7s %-30s %10.3f ms %10.2f %-7s", r.op.c_str(), r.device.c_str(), r.shape.c_str(), r.ms,
              r.rate, r.unit.c_str());
  if (r.ref_rate > 0)
    std::printf("  ref %-18s %10.2f  ratio %.3f", r.ref.c_str(), r.ref_rate, r.rate / r.ref_rate);
  std::printf("\n");
}

std::vector<Row> bench_gemm(Device dev, bool quick) {
  std::vector<Row> rows;
  if (dev.is_cpu()) {
    int64_t n = quick ? 256 : 1024;
    Tensor a = randn({n, n}, DType::F32, dev, 1), b = randn({n, n}, DType::F32, dev, 2), c = Tensor::empty({n, n}, DType::F32, dev);
    double flops = 2.0 * n * n * n;
    Row r{"gemm", dev.str(), std::to_string(n) + "^3 f32", "GFLOP/s", 0, 0, 0, ""};
    r.ms = median_ms(dev, 2, quick ? 3 : 10, [&] { kernels::gemm(a, false, b, false, c); });
    r.rate = flops / r.ms / 1e6;
    double raw = median_ms(dev, 2, quick ? 3 : 10, [&] {
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0f, a.data<float>(), n, b.data<float>(), n,
                  0.0f, c.data<float>(), n);
    });
    r.ref = "cblas_sgemm";
    r.ref_rate = flops / raw / 1e6;
    rows.push_back(r);
    return rows;
  }
#if STRATA_WITH_CUDA
  int64_t n = quick ? 2048 : 8192;
  Tensor a = randn({n, n}, DType::BF16, dev, 1), b = randn({n, n}, DType::BF16, dev, 2), c = Tensor::empty({n, n}, DType::BF16, dev);
  double flops = 2.0 * n * n * n;
  Row r{"gemm", dev.str(), std::to_string(n) + "^3 bf16", "TFLOP/s", 0, 0, 0, ""};
  r.ms = median_ms(dev, 3, 20, [&] { kernels::gemm(a, false, b, false, c); });
  r.rate = flops / r.ms / 1e9;
  double raw = kernels::cuda::bench_raw_cublaslt_bf16(n, n, n, 20);
  r.ref = "cublasLtMatmul";
  r.ref_rate = flops / raw / 1e9;
  rows.push_back(r);
#endif
  return rows;
}

std::vector<Row> bench_attention(Device dev, bool quick) {
  std::vector<Row> rows;
  bool gpu = dev.is_cuda();
  int64_t s = gpu ? (quick ? 1024 : 4096) : (quick ? 128 : 512), b = gpu ? 2 : 1, h = gpu ? 32 : 4, d = gpu ? 128 : 64;
  DType dt = gpu ? DType::BF16 : DType::F32;
  Tensor q = randn({s, b, h, d}, dt, dev, 3), k = randn({s, b, h, d}, dt, dev, 4), v = randn({s, b, h, d}, dt, dev, 5);
  Tensor o = Tensor::empty({s, b, h, d}, dt, dev), lse = Tensor::empty({b, h, s}, DType::F32, dev);
  Tensor dout = randn({s, b, h, d}, dt, dev, 6);
  Tensor dq = Tensor::empty(q.shape(), dt, dev), dk = Tensor::empty(k.shape(), dt, dev), dv = Tensor::empty(v.shape(), dt, dev);
  kernels::AttentionParams p;
  p.causal = true;
  // causal: half of the 4·b·h·s²·d forward FLOPs; backward 2.5× forward (FlashAttention-2 convention)
  double fwd_flops = 4.0 * b * h * s * s * d / 2;
  std::string shape = "b" + std::to_string(b) + " s" + std::to_string(s) + " h" + std::to_string(h) + " d" +
                      std::to_string(d) + " " + dtype_name(dt) + " causal";
  double scale = gpu ? 1e9 : 1e6;
  const char* unit = gpu ? "TFLOP/s" : "GFLOP/s";
  Row f{"attention_fwd", dev.str(), shape, unit, 0, 0, 0, ""};
  f.ms = median_ms(dev, 2, gpu ? 10 : 3, [&] { kernels::attention_forward(q, k, v, o, lse, p); });
  f.rate = fwd_flops / f.ms / scale;
  rows.push_back(f);
  Row fb{"attention_fwd_bwd", dev.str(), shape, unit, 0, 0, 0, ""};
  fb.ms = median_ms(dev, 2, gpu ? 10 : 3, [&] {
    kernels::attention_forward(q, k, v, o, lse, p);
    kernels::attention_backward(q, k, v, o, dout, lse, dq, dk, dv, p);
  });
  fb.rate = 3.5 * fwd_flops / fb.ms / scale;
  rows.push_back(fb);
  return rows;
}

std::vector<Row> bench_memory_bound(Device dev, bool quick) {
  std::vector<Row> rows;
  bool gpu = dev.is_cuda();
  int64_t n = gpu ? (quick ? 4096 : 16384) : (quick ? 512 : 2048), h = gpu ? 8192 : 2048;
  DType dt = gpu ? DType::BF16 : DType::F32;
  Tensor x = randn({n, h}, dt, dev, 7), y = Tensor::empty({n, h}, dt, dev);
  double bytes = 2.0 * x.nbytes();  // read x, write y
  double copy_ms = median_ms(dev, 2, 10, [&] { y.copy_(x); });
  double copy_gbs = bytes / copy_ms / 1e6;
  Tensor gamma = Tensor::full({h}, 1.0, dt, dev), beta = Tensor::zeros({h}, dt, dev);
  Tensor mean = Tensor::empty({n}, DType::F32, dev), rstd = Tensor::empty({n}, DType::F32, dev);
  std::string shape = std::to_string(n) + "x" + std::to_string(h) + " " + dtype_name(dt);
  Row ln{"layernorm_fwd", dev.str(), shape, "GB/s", 0, 0, 0, ""};
  ln.ms = median_ms(dev, 2, 10, [&] { kernels::layernorm_forward(x, gamma, beta, y, mean, rstd); });
  ln.rate = bytes / ln.ms / 1e6;
  ln.ref = "device copy";
  ln.ref_rate = copy_gbs;
  rows.push_back(ln);
  Row sm{"softmax_fwd", dev.str(), shape, "GB/s", 0, 0, 0, ""};
  sm.ms = median_ms(dev, 2, 10, [&] { kernels::softmax_forward(x, y); });
  sm.rate = bytes / sm.ms / 1e6;
  sm.ref = "device copy";
  sm.ref_rate = copy_gbs;
  rows.push_back(sm);
  return rows;
}

// The benchmark families and the op names (first column) their rows print.
struct BenchFamily {
  std::vector<Row> (*run)(Device, bool);
  std::vector<std::string> ops;
};
const std::vector<BenchFamily>& bench_families() {
  static const std::vector<BenchFamily> f = {{bench_gemm, {"gemm"}},
                                             {bench_attention, {"attention_fwd", "attention_fwd_bwd"}},
                                             {bench_memory_bound, {"layernorm_fwd", "softmax_fwd"}}};
  return f;
}

bool matches(const std::string& op, const std::string& filter) {
  return filter.empty() || op.find(filter) != std::string::npos;
}

}  // namespace

int run_op_benchmarks(const BenchOpsOptions& opts) {
  std::vector<std::string> names;
  bool any = false;
  for (const BenchFamily& f : bench_families())
    for (const std::string& op : f.ops) {
      names.push_back(op);
      any = any || matches(op, opts.filter);
    }
  if (!any) {
    std::string list;
    for (const std::string& n : names) list += (list.empty() ? "" : ", ") + n;
    std::fprintf(stderr, "strata: error: bench ops: --filter '%s' matches no benchmark (names: %s)\n",
                 opts.filter.c_str(), list.c_str());
    return 1;
  }
  std::vector<Device> devices = {Device::cpu()};
  if (cuda_device_count() > 0) devices.push_back(Device::cuda(0));
  std::vector<Row> all;
  std::printf("%-22s %-7s %-30s %13s %18s\n", "op", "device", "shape", "median", "rate");
  for (Device dev : devices) {
    for (const BenchFamily& f : bench_families()) {
      bool wanted = false;
      for (const std::string& op : f.ops) wanted = wanted || matches(op, opts.filter);
      if (!wanted) continue;  // not measured at all
      for (const Row& r : f.run(dev, opts.quick || dev.is_cpu())) {
        if (!matches(r.op, opts.filter)) continue;
        print_row(r);
        all.push_back(r);
      }
    }
  }
  if (!opts.json_out.empty()) {
    nlohmann::json j = nlohmann::json::array();
    for (const Row& r : all)
      j.push_back({{"op", r.op}, {"device", r.device}, {"shape", r.shape}, {"ms", r.ms}, {"rate", r.rate},
                   {"unit", r.unit}, {"ref", r.ref}, {"ref_rate", r.ref_rate}});
    std::ofstream(opts.json_out) << j.dump(1) << "\n";
  }
  return 0;
}

}  // namespace strata::app
