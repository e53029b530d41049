// `strata bench mamba` (apps/strata/bench_mamba.h): one MambaMixer on the CPU (or the default
// device), timed forward + backward; with --reference torch, Strata's parameters, input, output
// gradient and its own results (output, dx, every parameter gradient of the first pass) go to a
// safetensors file that scripts/bench/mamba2_torch_ref.py loads, checks against its own autograd
// results, then times; repeats alternate ours and the reference, the median ratio is reported.
#include "apps/strata/bench_mamba.h"

#include "apps/strata/bench_reference.h"

#include <omp.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <sstream>

#include <nlohmann/json.hpp>

#include "apps/strata/bench_train.h"
#include "core/error.h"
#include "core/formats/safetensors.h"
#include "models/layers/mamba_mixer.h"
#include "models/config/mamba_config.h"

namespace strata::app {
namespace {

using nlohmann::json;
using Clock = std::chrono::steady_clock;

// Exit code of the reference script when /usr/bin/python3 has no torch.
constexpr int kNoTorch = 77;
// f32 agreement of ours and the reference (summation orders differ): max |a − b| / max |b|.
constexpr double kTolerance = 2e-4;

ResolvedModelConfig mixer_config(const BenchMambaOptions& o) {
  ModelConfig c;
  c.num_layers = 1;
  c.hidden_size = o.hidden;
  c.num_attention_heads = 1;
  c.mamba_head_dim = o.head_dim;
  c.mamba_state_dim = o.state;
  c.mamba_num_groups = o.groups;
  c.mamba_chunk_size = o.chunk;
  c.normalization = Normalization::RMSNorm;
  c.hidden_dropout = 0.0;
  return ResolvedModelConfig(c);
}

Tensor uniform_tensor(const Shape& shape, std::mt19937_64& rng, DType dtype) {
  std::uniform_real_distribution<double> u(-1.0, 1.0);
  std::vector<double> v(static_cast<size_t>(shape.numel()));
  for (double& x : v) x = u(rng);
  return Tensor::from_vector(v, shape, dtype);
}

std::vector<Parameter*> params_of(layers::MambaMixer& m) {
  std::vector<Parameter*> v;
  m.collect(v);
  return v;
}

double ms_since(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}
double median(std::vector<double> v) {
  if (v.empty()) return 0.0;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

struct OursResult {
  double fwd_ms = 0, bwd_ms = 0, total_ms = 0;
};

// warmup + iters passes of forward and backward; the medians of the timed ones.
OursResult time_ours(layers::MambaMixer& m, const Tensor& x, const Tensor& dy, const BenchMambaOptions& o) {
  std::vector<double> f, b, t;
  for (int i = 0; i < o.warmup + o.iters; ++i) {
    layers::MambaMixer::Saved sv;
    const auto t0 = Clock::now();
    const Tensor y = m.forward(x, nullptr, &sv);
    const double fm = ms_since(t0);
    const auto t1 = Clock::now();
    const Tensor dx = m.backward(sv, dy);
    const double bm = ms_since(t1);
    if (i < o.warmup) continue;
    f.push_back(fm), b.push_back(bm), t.push_back(fm + bm);
  }
  return {median(f), median(b), median(t)};
}

// Parameters, x, dy and our first pass's y, dx and parameter gradients, for the reference's check.
void write_reference_file(const std::string& path, layers::MambaMixer& m, const Tensor& x, const Tensor& dy) {
  std::map<std::string, Tensor> t;
  for (Parameter* p : params_of(m)) {
    p->main_grad.zero_();
    t.emplace(p->name, p->value);
  }
  layers::MambaMixer::Saved sv;
  const Tensor y = m.forward(x, nullptr, &sv);
  const Tensor dx = m.backward(sv, dy);
  for (Parameter* p : params_of(m)) t.emplace("grad." + p->name, p->main_grad.to(p->value.dtype()));
  t.emplace("bench.x", x);
  t.emplace("bench.dy", dy);
  t.emplace("bench.y", y);
  t.emplace("bench.dx", dx);
  formats::write_safetensors(path, t);
}

// Runs the reference; an empty object when torch is missing.
json run_reference(const BenchMambaOptions& o, const std::string& file, int threads) {
  const std::string script = o.torch_script.empty() ? source_tree_script("mamba2_torch_ref.py") : o.torch_script;
  std::ostringstream cmd;
  cmd << "OMP_NUM_THREADS=" << threads << " " << shell_quoted(o.python) << " " << shell_quoted(script) << " --init "
      << shell_quoted(file) << " --heads " << 2 * o.hidden / o.head_dim << " --groups " << o.groups << " --chunk "
      << o.chunk << " --iters " << o.iters << " --warmup " << o.warmup << " --threads " << threads
      << " --tolerance " << kTolerance << " 2>&1";
  const ReferenceRun r = run_reference_command(cmd.str(), "bench mamba");
  if (r.exited && r.exit_code == kNoTorch) {
    std::printf("reference: skipped, %s has no torch (scripts/setup.sh --bench installs python3-torch)\n",
                o.python.c_str());
    return json::object();
  }
  STRATA_CHECK(r.result.is_object(), "bench mamba: the PyTorch reference failed (", r.command, "), exit status ",
               r.status, "; output: ", r.output);
  json j = r.result;
  j["exit_ok"] = r.exited && r.exit_code == 0;
  return j;
}

void check_options(const BenchMambaOptions& o) {
  STRATA_CHECK(o.batch >= 1 && o.seq >= 1 && o.hidden >= 1, "bench mamba: --batch, --seq and --hidden must be >= 1");
  STRATA_CHECK(o.iters >= 1 && o.warmup >= 0 && o.repeat >= 1, "bench mamba: --iters >= 1, --warmup >= 0, --repeat >= 1");
  STRATA_CHECK(o.dtype == "f32" || o.dtype == "f64", "bench mamba: --dtype must be f32 or f64, got '", o.dtype, "'");
  STRATA_CHECK(o.reference.empty() || o.reference == "torch", "bench mamba: --reference must be 'torch', got '",
               o.reference, "'");
  STRATA_CHECK(o.reference.empty() || o.seq % o.chunk == 0, "bench mamba: --reference torch (ssd_minimal) needs "
               "--seq (", o.seq, ") to be a multiple of --chunk (", o.chunk, ")");
}

}  // namespace

int run_mamba_benchmark(const BenchMambaOptions& o) {
  check_options(o);
  const ResolvedModelConfig cfg = mixer_config(o);  // check_mamba_config names the field on a bad shape
  const MambaDims d = mamba_dims(cfg);
  layers::LayerEnv env;
  env.dtype = o.dtype == "f64" ? DType::F64 : DType::F32;
  layers::MambaMixer m("decoder.layers.0.mixer", cfg, env, ParallelGroups{});
  for (Parameter* p : params_of(m)) init_parameter(*p, o.seed);
  std::mt19937_64 rng(o.seed);
  const Tensor x = uniform_tensor({o.seq, o.batch, o.hidden}, rng, env.dtype);
  const Tensor dy = uniform_tensor({o.seq, o.batch, o.hidden}, rng, env.dtype);
  if (!o.save_results.empty()) write_reference_file(o.save_results, m, x, dy);
  const int threads = omp_get_max_threads();
  const int64_t tokens = o.batch * o.seq;
  std::printf("bench mamba: b %lld, s %lld, hidden %lld, d_inner %lld = %lld heads x %lld, state %lld, groups %lld, "
              "chunk %lld, %s, %d threads, %d warm-up + %d timed passes\n",
              (long long)o.batch, (long long)o.seq, (long long)o.hidden, (long long)d.d_inner, (long long)d.heads,
              (long long)d.head_dim, (long long)d.state, (long long)d.groups, (long long)d.chunk, o.dtype.c_str(),
              threads, o.warmup, o.iters);
  json runs = json::array();
  std::vector<double> ratios;
  bool ok = true;
  for (int rep = 0; rep < o.repeat; ++rep) {
    const OursResult r = time_ours(m, x, dy, o);
    std::printf("strata  fwd %8.2f ms  bwd %8.2f ms  fwd+bwd %8.2f ms  %9.0f tokens/s\n", r.fwd_ms, r.bwd_ms,
                r.total_ms, tokens * 1000.0 / r.total_ms);
    json run = {{"strata", {{"fwd_ms", r.fwd_ms}, {"bwd_ms", r.bwd_ms}, {"fwd_bwd_ms", r.total_ms}}}};
    if (o.reference == "torch") {
      const std::string file = (std::filesystem::temp_directory_path() /
                                ("strata_bench_mamba_" + std::to_string(getpid()) + ".safetensors")).string();
      write_reference_file(file, m, x, dy);
      json ref;
      try {
        ref = run_reference(o, file, threads);
      } catch (...) {
        std::filesystem::remove(file);
        throw;
      }
      std::filesystem::remove(file);
      if (!ref.empty()) {
        const double err = ref.value("max_rel_err", 1.0);
        std::printf("torch   fwd %8.2f ms  bwd %8.2f ms  fwd+bwd %8.2f ms  (torch %s)\n", ref.value("fwd_ms", 0.0),
                    ref.value("bwd_ms", 0.0), ref.value("fwd_bwd_ms", 0.0), ref.value("torch", std::string()).c_str());
        std::printf("  check torch vs strata (y, dx, every parameter gradient): max relative error %.2e (%s, worst "
                    "%s)\n", err, err <= kTolerance ? "ok" : "FAIL", ref.value("worst", std::string()).c_str());
        ok = ok && err <= kTolerance && ref.value("exit_ok", false);
        const double ratio = ref.value("fwd_bwd_ms", 0.0) / r.total_ms;
        std::printf("  speed ratio torch / strata (fwd+bwd): %.3f\n", ratio);
        ratios.push_back(ratio);
        run["torch"] = ref;
        run["ratio"] = ratio;
      }
    }
    runs.push_back(run);
    std::fflush(stdout);
  }
  json result = {{"batch", o.batch}, {"seq", o.seq}, {"hidden", o.hidden}, {"heads", d.heads}, {"head_dim", d.head_dim},
                 {"state", d.state}, {"groups", d.groups}, {"chunk", d.chunk}, {"dtype", o.dtype}, {"threads", threads},
                 {"runs", runs}, {"ok", ok}};
  if (!ratios.empty()) {
    result["median_ratio"] = median(ratios);
    std::printf("median speed ratio torch / strata over %zu runs: %.3f\n", ratios.size(), median(ratios));
  }
  if (!o.json_out.empty()) {
    std::ofstream f(o.json_out);
    STRATA_CHECK(f.good(), "bench mamba: cannot write --json ", o.json_out);
    f << result.dump(2) << "\n";
  }
  return ok ? 0 : 1;
}

}  // namespace strata::app
