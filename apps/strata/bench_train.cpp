// `strata bench train` (apps/strata/bench_train.h): runs warmup + iters steps of the real trainer
// through training::run_training with a sink that records each iteration's time, then (with
// --reference torch) scripts/bench/gpt_train_torch.py with the same model (dense or MoE:
// bench_train_moe.h), batch, optimizer and thread count, started from Strata's initial parameters
// and batches, and prints both, their ratio and how far their losses of the first steps differ.
// Repeats alternate ours and the reference so that load from other processes hits both alike; the
// median ratio is reported. With the reference on the CPU it also reports the model's FLOP rate
// against the machine's SGEMM rate (scripts/bench/sgemm_rate.py).
#include "apps/strata/bench_train.h"

#include "apps/strata/bench_ops.h"
#include "apps/strata/bench_reference.h"
#include "apps/strata/bench_train_moe.h"
#include "apps/strata/commands.h"

#include <sys/resource.h>
#include <unistd.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <sstream>

#include <nlohmann/json.hpp>

#include "core/allocator.h"
#include "core/device.h"
#include "kernels/gemm.h"
#include "parallel/distributed.h"
#include "core/error.h"
#include "core/phase_timer.h"
#include "core/random.h"
#include "data/tokenizer.h"
#include "training/config/config.h"
#include "training/observability/metrics_log.h"
#include "training/run.h"

namespace strata::app {
namespace {

using nlohmann::json;

// Records "iteration-time" (seconds) of every iteration.
class StepTimeSink : public MetricsSink {
 public:
  void add_scalar(const std::string& tag, double value, int64_t step) override {
    if (tag == "iteration-time") ms.push_back(value * 1000.0);
  }
  std::vector<double> ms;
};

}  // namespace

// The config of the benchmark: the user's, with train_iters = warmup + iters, a log line every
// step (the sink needs every iteration's time), no evaluation, checkpoints or metric files, and
// mock data when the config names no data.
ResolvedConfig bench_config(const BenchTrainOptions& o) {
  std::vector<std::string> no_effect;
  StrataConfig cfg = StrataConfig::load(o.config, o.overrides, &no_effect, o.own_flags);
  report_no_effect_flags(no_effect);
  cfg.training.train_iters = o.warmup + o.iters;
  cfg.training.eval_iters = 0;
  cfg.training.exit_interval.reset();
  cfg.training.exit_duration_in_mins.reset();
  cfg.logging.log_interval = 1;
  cfg.logging.tensorboard_dir.reset();
  cfg.logging.metrics_jsonl.reset();
  cfg.checkpoint.save.reset();
  cfg.checkpoint.load.reset();
  cfg.checkpoint.save_interval.reset();
  if (cfg.data.data_path.empty()) cfg.data.mock_data = true;
  // Under mpirun every rank benchmarks its part of the layout (the world size is the launched one).
  const int64_t world = launched_world_size().value_or(1);
  const ResolvedConfig resolved = cfg.validate(world);
  if (resolved.model->vocab_size) return resolved;
  return resolved.with_vocab_size(data::build_tokenizer(*resolved.data)->vocab_size());
}

namespace {

int64_t peak_rss_bytes() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<int64_t>(u.ru_maxrss) * 1024;
}

// init_file not empty: the run writes its initial parameters and batches there (the reference's start).
// One step's GEMMs as [batch, m, n, k, transpose_a, transpose_b, broadcast_a, broadcast_b, count]
// rows, one per distinct f32 shape (the SGEMM reference times each with torch.matmul).
json gemm_shape_counts(const std::vector<kernels::RecordedGemm>& gemms) {
  std::map<std::vector<int64_t>, int64_t> counts;
  for (const kernels::RecordedGemm& g : gemms) {
    if (g.dtype != DType::F32) continue;
    const kernels::GemmDims& d = g.dims;
    ++counts[{d.batch, d.m, d.n, d.k, g.transpose_a, g.transpose_b, d.broadcast_a, d.broadcast_b}];
  }
  json rows = json::array();
  for (const auto& [shape, count] : counts) {
    json row(shape);
    row.push_back(count);
    rows.push_back(row);
  }
  return rows;
}

json run_ours(const ResolvedConfig& cfg, const BenchTrainOptions& o, const std::string& init_file) {
  const Device device = resolve_device(cfg.training->device);
  StepTimeSink sink;
  std::ostringstream quiet;  // the per-iteration log lines
  training::RunHooks hooks;
  hooks.sinks = {&sink};
  hooks.log_stream = &quiet;
  double flops_per_token = 0;  // model FLOPs, forward + backward (training/run.h)
  hooks.before_training = [&](const std::vector<Parameter*>& params, BatchSource& source) {
    flops_per_token = training::model_flops_per_token(cfg, params);
    if (!init_file.empty()) write_reference_init(init_file, params, source, o.warmup + o.iters);
  };
  reset_peak_memory_stats(device);
  phase_timer::reset();
  // The phase timers skip the warm-up steps: enabled from the first timed step by the sink's count.
  struct PhaseSwitch : MetricsSink {
    int warmup;
    explicit PhaseSwitch(int w) : warmup(w) {}
    void add_scalar(const std::string& tag, double, int64_t step) override {
      if (tag == "iteration-time" && step == warmup) {
        phase_timer::reset();
        phase_timer::set_enabled(true);
      }
    }
  } phase_switch(o.warmup);
  if (o.phases) {
    hooks.sinks.push_back(&phase_switch);
    if (o.warmup == 0) phase_timer::set_enabled(true);
  }
  // The GEMMs of the first timed step, for the SGEMM reference (compare_with_sgemm_rate).
  struct GemmRecorder : MetricsSink {
    int warmup;
    explicit GemmRecorder(int w) : warmup(w) {}
    void add_scalar(const std::string& tag, double, int64_t step) override {
      if (tag != "iteration-time") return;
      if (step == warmup) kernels::record_gemm_shapes(true);
      if (step == warmup + 1) kernels::record_gemm_shapes(false);
    }
  } gemm_recorder(o.warmup);
  hooks.sinks.push_back(&gemm_recorder);
  if (o.warmup == 0) kernels::record_gemm_shapes(true);
  const TrainResult r = training::run_training(cfg, hooks);
  phase_timer::set_enabled(false);
  kernels::record_gemm_shapes(false);
  STRATA_CHECK(r.exit_code == 0, "bench train: training exited with code ", r.exit_code);
  // Under mpirun only the last rank logs the iteration times (and times the phases).
  if (sink.ms.empty() && launched_world_size().value_or(1) > 1) return json{{"impl", "strata"}, {"metrics_rank", false}};
  STRATA_CHECK(static_cast<int>(sink.ms.size()) == o.warmup + o.iters, "bench train: expected ",
               o.warmup + o.iters, " iteration times, got ", sink.ms.size());
  const std::vector<double> timed(sink.ms.begin() + o.warmup, sink.ms.end());
  const StepTimes st = step_time_stats(timed);
  const int64_t tokens = cfg.training->global_batch_size.value_or(cfg.training->micro_batch_size) * cfg.model->seq_length;
  const MemoryStats mem = memory_stats(device);
  json j = {{"impl", "strata"},
            {"device", device.str()},
            {"threads", omp_get_max_threads()},
            {"tokens_per_step", tokens},
            {"iters", o.iters},
            {"warmup", o.warmup},
            {"median_ms", st.median_ms},
            {"p90_ms", st.p90_ms},
            {"mean_ms", st.mean_ms},
            {"tokens_per_second", st.median_ms > 0 ? tokens * 1000.0 / st.median_ms : 0.0},
            {"peak_allocated_bytes", mem.max_allocated_bytes},
            {"recompute", recompute_mode_text(cfg.model)},
            {"initial_loss", r.losses.empty() ? NAN : r.losses.front()},
            {"final_loss", r.losses.empty() ? NAN : r.losses.back()},
            {"losses", r.losses},
            {"step_ms", timed}};
  // One process sees every parameter; a pipeline stage would count only its own.
  if (flops_per_token > 0 && launched_world_size().value_or(1) == 1) {
    j["model_flops_per_token"] = flops_per_token;
    j["model_gflops_per_second"] = st.median_ms > 0 ? flops_per_token * tokens / (st.median_ms * 1e6) : 0.0;
  }
  if (device.is_cpu()) j["peak_rss_bytes"] = peak_rss_bytes();
  j["gemm_shapes"] = gemm_shape_counts(kernels::recorded_gemm_shapes());
  if (o.phases) {
    json ph = json::array();
    for (const auto& t : phase_timer::totals())
      ph.push_back({{"phase", t.name}, {"ms_per_step", t.ms / std::max(1, o.iters)}, {"calls_per_step",
                    static_cast<double>(t.calls) / std::max(1, o.iters)}});
    j["phases"] = ph;
  }
  return j;
}

// The reference models only the GPT-2-style architecture (GeLU or SwiGLU MLPs, dense or MoE) in
// fp32 without dropout.
void check_torch_reference_applies(const ResolvedConfig& cfg, const BenchTrainOptions& o) {
  const ResolvedModelConfig& m = cfg.model;
  check_moe_reference_applies(cfg);
  STRATA_CHECK(m->normalization == Normalization::LayerNorm && !m->qk_layernorm &&
                   m->position_embedding_type == PositionEmbeddingType::LearnedAbsolute &&
                   !m->untie_embeddings_and_output_weights && !m->apply_layernorm_1p &&
                   m.query_groups() == m->num_attention_heads,
               "bench train --reference torch: the PyTorch reference is the GPT-2-style model (model.normalization "
               "LayerNorm, no qk_layernorm/GQA, position_embedding_type learned_absolute, tied output); ", o.config,
               " asks for another architecture");
  const MlpActivation& act = m.activation();
  STRATA_CHECK(act.kind != MlpActivationKind::QuickGeglu && act.kind != MlpActivationKind::SquaredRelu &&
                   act.linear_offset == 0.0 && !act.clamp,
               "bench train --reference torch: the PyTorch reference's MLP is GeLU or SwiGLU without an offset or "
               "clamp; ", o.config, " asks for ", to_string(act.kind),
               act.linear_offset != 0.0 || act.clamp ? " with model.glu_linear_offset / activation_func_clamp_value" : "");
  STRATA_CHECK(m->hidden_dropout == 0.0 && m->attention_dropout == 0.0,
               "bench train --reference torch: set model.hidden_dropout=0 and model.attention_dropout=0 (the "
               "reference has no dropout)");
  STRATA_CHECK(cfg.training->precision == Precision::Fp32, "bench train --reference torch: training.precision must be fp32");
}

json run_torch(const ResolvedConfig& cfg, const BenchTrainOptions& o, int threads, const std::string& init_file) {
  const ResolvedModelConfig& m = cfg.model;
  const int64_t padded = padded_vocab_size(*m->vocab_size, m->make_vocab_size_divisible_by, 1);
  const std::string script = o.torch_script.empty() ? source_tree_script("gpt_train_torch.py") : o.torch_script;
  std::ostringstream cmd;
  cmd << "OMP_NUM_THREADS=" << threads << " " << shell_quoted(o.python) << " " << shell_quoted(script)
      << " --layers " << m->num_layers << " --hidden " << m->hidden_size << " --heads " << m->num_attention_heads
      << " --ffn " << m.ffn() << " --vocab " << padded << " --real-vocab " << *m->vocab_size << " --seq "
      << m->seq_length << " --max-positions " << m.max_positions() << " --batch "
      << cfg.training->global_batch_size.value_or(cfg.training->micro_batch_size) << " --eps " << m->layernorm_epsilon
      << (m->openai_gelu ? " --tanh-gelu" : "") << (m->swiglu ? " --swiglu" : "")
      << (m->add_bias_linear ? "" : " --no-bias-linear") << " --init-std " << m->init_method_std << " --lr "
      << cfg.optimizer->lr.value_or(1e-4) << " --beta1 " << cfg.optimizer->adam_beta1 << " --beta2 "
      << cfg.optimizer->adam_beta2 << " --adam-eps " << cfg.optimizer->adam_eps << " --weight-decay "
      << cfg.optimizer->weight_decay << " --clip-grad " << cfg.optimizer->clip_grad << " --iters " << o.iters
      << " --warmup " << o.warmup << " --threads " << threads << " --seed " << cfg.training->seed << " --device "
      << shell_quoted(resolve_device(cfg.training->device).str()) << " --init-from " << shell_quoted(init_file)
      << moe_reference_args(cfg);
  const ReferenceRun r = run_reference_command(cmd.str(), "bench train");
  STRATA_CHECK(r.status == 0, "bench train: the PyTorch reference failed (", r.command, "), exit status ", r.status,
               "; output: ", r.output, " (is python3-torch installed? scripts/setup.sh --bench)");
  STRATA_CHECK(r.result.is_object(), "bench train: cannot parse the PyTorch reference's output '", r.output, "'");
  return r.result;
}

void print_result(const json& j) {
  std::printf("%-7s %8.1f ms/step median  %8.1f p90  %9.0f tokens/s  initial loss %.4f", j["impl"].get<std::string>().c_str(),
              j["median_ms"].get<double>(), j["p90_ms"].get<double>(), j["tokens_per_second"].get<double>(),
              j["initial_loss"].get<double>());
  if (j.contains("model_gflops_per_second")) std::printf("  %.1f model GFLOP/s", j["model_gflops_per_second"].get<double>());
  const bool on_gpu = j.contains("device") && j["device"].get<std::string>().rfind("cuda", 0) == 0;
  if (j.contains("peak_rss_bytes") && !on_gpu)
    std::printf("  peak RSS %.0f MiB", j["peak_rss_bytes"].get<double>() / 1048576.0);
  if (j.contains("peak_allocated_bytes") && (j["impl"] == "strata" || on_gpu))
    std::printf("  peak allocated %.0f MiB", j["peak_allocated_bytes"].get<double>() / 1048576.0);
  if (j.contains("recompute") && j["recompute"] != "none")
    std::printf("  (recompute %s)", j["recompute"].get<std::string>().c_str());
  std::printf("\n");
}

// The dispatch phases of an MoE step with their share of the mean step time: the layer's
// dispatch / combine scopes (permute + all-to-all + unpermute, names containing "/moe/dispatch" or
// "/moe/combine") and the permute kernels' scopes ("moe/permute/..."). The total sums the layer's
// scopes when there are any (they contain the kernels'), else the kernels'.
void print_dispatch_share(const json& ours) {
  const double step = ours["mean_ms"].get<double>();
  double layer = 0, kernel = 0;
  bool any = false;
  auto share = [step](double ms) { return step > 0 ? 100.0 * ms / step : 0.0; };
  for (const auto& ph : ours["phases"]) {
    const std::string name = ph["phase"].get<std::string>();
    const bool is_layer = name.find("/moe/dispatch") != std::string::npos || name.find("/moe/combine") != std::string::npos;
    if (!is_layer && name.find("moe/permute") == std::string::npos) continue;
    const double ms = ph["ms_per_step"].get<double>();
    std::printf("    dispatch share %-36s %6.2f%% of the step\n", name.c_str(), share(ms));
    (is_layer ? layer : kernel) += ms;
    any = true;
  }
  if (any)
    std::printf("    dispatch share, total (%s scopes): %.2f ms/step, %.2f%% of the %.1f ms step\n",
                layer > 0 ? "dispatch/combine" : "moe/permute", layer > 0 ? layer : kernel,
                share(layer > 0 ? layer : kernel), step);
}

// Peak memory of ours over the reference's: process RSS on the CPU, the allocators' peaks on a
// GPU; 0 when either side lacks the number.
double peak_memory_ratio(const json& ours, const json& ref) {
  const bool gpu = ours.value("device", std::string()).rfind("cuda", 0) == 0;
  const char* field = gpu ? "peak_allocated_bytes" : "peak_rss_bytes";
  const double a = ours.value(field, 0.0), b = ref.value(field, 0.0);
  return a > 0 && b > 0 ? a / b : 0.0;
}

// Both sides start from Strata's parameters and batches: their losses of the first steps agree to
// f32 rounding (summation orders differ; Adam's first steps amplify that a little).
constexpr double kLossTolerance = 2e-3;
bool compare_losses(const json& ours, const json& ref) {
  const auto a = ours["losses"].get<std::vector<double>>(), b = ref["losses"].get<std::vector<double>>();
  const size_t n = std::min<size_t>({a.size(), b.size(), 3});
  double worst = 0;
  std::printf("  losses strata / torch:");
  for (size_t i = 0; i < n; ++i) {
    std::printf("  step %zu %.5f / %.5f", i + 1, a[i], b[i]);
    worst = std::max(worst, std::abs(a[i] - b[i]));
  }
  std::printf("  (max |diff| %.2e)\n", worst);
  if (!(worst <= kLossTolerance) || n == 0) {
    std::printf("  FAIL: the losses of the first steps differ by %.2e (> %.0e)\n", worst, kLossTolerance);
    return false;
  }
  return true;
}

// Strata's GEMM rate on one step's recorded GEMMs (gemm_shape_counts): each distinct shape run with
// kernels::gemm on random f32 operands, the median of 10 after a warm-up, weighted by its count; the
// method scripts/bench/sgemm_rate.py uses for torch.matmul, so the two rates compare.
double replayed_gemm_gflops(const json& shapes) {
  double flop = 0, seconds = 0;
  for (const json& row : shapes) {
    const auto v = row.get<std::vector<int64_t>>();
    const int64_t batch = v[0], m = v[1], n = v[2], k = v[3], count = v[8];
    const bool ta = v[4], tb = v[5], ba = v[6], bb = v[7];
    const auto operand = [&](int64_t rows, int64_t cols, bool transposed, bool broadcast) {
      Shape shape = transposed ? Shape{cols, rows} : Shape{rows, cols};
      if (batch > 1 && !broadcast) shape = Shape{batch, shape[0], shape[1]};
      Tensor t = Tensor::empty(shape, DType::F32);
      fill_uniform(t, philox::Key{static_cast<uint64_t>(rows), static_cast<uint64_t>(cols)}, -1, 1);
      return t;
    };
    const Tensor a = operand(m, k, ta, ba), b = operand(k, n, tb, bb);
    const Tensor c = Tensor::empty(batch > 1 ? Shape{batch, m, n} : Shape{m, n}, DType::F32);
    const double ms = median_ms(Device::cpu(), 1, 10, [&] { kernels::gemm(a, ta, b, tb, c); });
    seconds += static_cast<double>(count) * ms / 1e3;
    flop += static_cast<double>(count) * 2.0 * batch * m * n * k;
  }
  return seconds > 0 ? flop / seconds / 1e9 : 0.0;
}

// The model FLOP rate against the machine's SGEMM rate (scripts/bench/sgemm_rate.py, run once after
// the repeats at the same thread count): torch.matmul on the first timed step's own f32 GEMMs (the
// ceiling of a step whose other work were free), and on square sizes for scale.
void compare_with_sgemm_rate(const BenchTrainOptions& o, int threads, const json& runs, json& result) {
  std::vector<double> rates;
  for (const json& run : runs)
    if (run["strata"].contains("model_gflops_per_second")) rates.push_back(run["strata"]["model_gflops_per_second"]);
  if (rates.empty() || !runs[0]["strata"].contains("gemm_shapes")) return;
  std::sort(rates.begin(), rates.end());
  const std::string shapes_file = (std::filesystem::temp_directory_path() /
                                   ("strata_bench_gemms_" + std::to_string(getpid()) + ".json")).string();
  std::ofstream(shapes_file) << runs[0]["strata"]["gemm_shapes"].dump() << "\n";
  // Beside the reference script (--torch-script), else in the source tree.
  const std::string sgemm_script =
      o.torch_script.empty() ? source_tree_script("sgemm_rate.py")
                             : (std::filesystem::path(o.torch_script).parent_path() / "sgemm_rate.py").string();
  const ReferenceRun r = run_reference_command(
      "OMP_NUM_THREADS=" + std::to_string(threads) + " " + shell_quoted(o.python) + " " +
          shell_quoted(sgemm_script) + " --threads " + std::to_string(threads) +
          " --shapes-file " + shell_quoted(shapes_file),
      "bench train");
  std::filesystem::remove(shapes_file);
  STRATA_CHECK(r.status == 0 && r.result.is_object(), "bench train: the SGEMM reference failed (", r.command,
               "): ", r.output);
  const double ours = rates[rates.size() / 2], step = r.result["step_gflops"].get<double>();
  std::printf("machine SGEMM rate (torch.matmul, f32, %d threads): %.1f GFLOP/s on this step's %lld GEMMs "
              "(%.2f GFLOP), %.1f at best on square sizes %s\n",
              threads, step, (long long)r.result["step_gemms"].get<int64_t>(), r.result["step_gflop"].get<double>(),
              r.result["gflops"].get<double>(), r.result["sizes"].dump().c_str());
  const double replayed = replayed_gemm_gflops(runs[0]["strata"]["gemm_shapes"]);
  std::printf("strata's GEMMs (kernels::gemm) on the same shapes: %.1f GFLOP/s = %.1f%% of torch.matmul's\n", replayed,
              100.0 * replayed / step);
  std::printf("strata's whole step (model FLOPs / step time): %.1f GFLOP/s (median) = %.1f%% of the step's SGEMM "
              "rate\n",
              ours, 100.0 * ours / step);
  result["sgemm"] = r.result;
  result["gemm_gflops"] = replayed;
  result["gemm_fraction"] = replayed / step;
  result["step_fraction"] = ours / step;
}
}  // namespace

// Next to the build directory of this binary (build/strata -> ../scripts), else at __FILE__'s tree
// when that path is absolute (ccache's base_dir makes it relative, and then it would name whatever
// tree the current directory is in), else relative to the current directory.
StepTimes step_time_stats(std::vector<double> ms) {
  StepTimes s;
  if (ms.empty()) return s;
  std::sort(ms.begin(), ms.end());
  s.median_ms = ms[ms.size() / 2];
  const size_t rank = static_cast<size_t>(std::ceil(0.9 * static_cast<double>(ms.size())));
  s.p90_ms = ms[std::min(ms.size() - 1, rank == 0 ? 0 : rank - 1)];
  double sum = 0;
  for (double v : ms) sum += v;
  s.mean_ms = sum / static_cast<double>(ms.size());
  return s;
}

int run_train_benchmark(const BenchTrainOptions& o) {
  STRATA_CHECK(!o.config.empty(), "bench train: --config FILE is required");
  STRATA_CHECK(o.iters >= 1, "bench train: --iters must be >= 1, got ", o.iters);
  STRATA_CHECK(o.warmup >= 0, "bench train: --warmup must be >= 0, got ", o.warmup);
  STRATA_CHECK(o.repeat >= 1, "bench train: --repeat must be >= 1, got ", o.repeat);
  STRATA_CHECK(o.reference.empty() || o.reference == "torch", "bench train: --reference must be 'torch', got '",
               o.reference, "'");
  const ResolvedConfig cfg = bench_config(o);
  STRATA_CHECK(o.reference.empty() || launched_world_size().value_or(1) == 1,
               "bench train: --reference torch compares one process; run it without mpirun");
  if (o.reference == "torch") check_torch_reference_applies(cfg, o);
  const int threads = omp_get_max_threads();
  const ResolvedModelConfig& m = cfg.model;
  std::printf("bench train: %s, %lld layers, hidden %lld, %lld heads, vocab %lld, seq %lld, batch %lld, %s, "
              "%d threads, %d warm-up + %d timed steps%s\n",
              o.config.c_str(), (long long)m->num_layers, (long long)m->hidden_size, (long long)m->num_attention_heads,
              (long long)*m->vocab_size, (long long)m->seq_length,
              (long long)cfg.training->global_batch_size.value_or(cfg.training->micro_batch_size),
              cfg.training->precision == Precision::Bf16 ? "bf16" : "fp32", threads, o.warmup, o.iters,
              cfg.data->mock_data ? ", mock data" : "");

  json runs = json::array();
  std::vector<double> ratios;
  bool ok = true;
  const double ln_vocab = std::log(static_cast<double>(padded_vocab_size(*m->vocab_size, m->make_vocab_size_divisible_by, 1)));
  auto check_initial_loss = [&](const json& j) {
    const double l0 = j["initial_loss"].get<double>();
    // Init std 0.02 gives logits of std ~0.3: the initial loss is ln(V) + O(0.1).
    if (!(std::abs(l0 - ln_vocab) < 0.25)) {
      std::printf("  FAIL: %s initial loss %.4f is not within 0.25 of ln(padded vocab) = %.4f\n",
                  j["impl"].get<std::string>().c_str(), l0, ln_vocab);
      ok = false;
    }
  };
  bool metrics_rank = true;
  for (int rep = 0; rep < o.repeat; ++rep) {
    if (o.repeat > 1) std::printf("repeat %d/%d\n", rep + 1, o.repeat);
    const std::string init_file =
        o.reference == "torch" ? (std::filesystem::temp_directory_path() /
                                  ("strata_bench_init_" + std::to_string(getpid()) + ".safetensors")).string()
                               : std::string();
    std::fprintf(stderr, "bench train: timing Strata (%d warm-up + %d timed steps)\n", o.warmup, o.iters);
    json ours = run_ours(cfg, o, init_file);
    if (!ours.value("metrics_rank", true)) {  // a rank without the metrics: nothing to print or write
      metrics_rank = false;
      continue;
    }
    print_result(ours);
    check_initial_loss(ours);
    if (o.phases && ours.contains("phases")) {
      for (const auto& ph : ours["phases"])
        std::printf("    %-36s %8.2f ms/step  (%g calls)\n", ph["phase"].get<std::string>().c_str(),
                    ph["ms_per_step"].get<double>(), ph["calls_per_step"].get<double>());
      if (m->is_moe()) print_dispatch_share(ours);
    }
    json run = {{"strata", ours}};
    if (o.reference == "torch") {
      json ref;
      try {
        ref = run_torch(cfg, o, threads, init_file);
      } catch (...) {
        std::filesystem::remove(init_file);
        throw;
      }
      std::filesystem::remove(init_file);
      print_result(ref);
      check_initial_loss(ref);
      ok = compare_losses(ours, ref) && ok;
      const double ratio = ref["median_ms"].get<double>() / ours["median_ms"].get<double>();
      std::printf("  throughput ratio strata / torch: %.3f\n", ratio);
      ratios.push_back(ratio);
      run["torch"] = ref;
      run["ratio"] = ratio;
      const double mem = peak_memory_ratio(ours, ref);
      if (mem > 0) {
        std::printf("  peak memory ratio strata / torch: %.3f\n", mem);
        run["memory_ratio"] = mem;
      }
    }
    runs.push_back(run);
    std::fflush(stdout);
  }
  json result = {{"config", o.config}, {"threads", threads}, {"ln_vocab", ln_vocab}, {"runs", runs}};
  if (!ratios.empty()) {
    std::vector<double> r = ratios;
    std::sort(r.begin(), r.end());
    result["median_ratio"] = r[r.size() / 2];
    std::printf("median throughput ratio strata / torch over %zu runs: %.3f\n", r.size(), r[r.size() / 2]);
  }
  if (o.reference == "torch" && metrics_rank && resolve_device(cfg.training->device).is_cpu())
    compare_with_sgemm_rate(o, threads, runs, result);
  result["ok"] = ok;
  if (!o.json_out.empty() && metrics_rank) {
    std::ofstream f(o.json_out);
    STRATA_CHECK(f.good(), "bench train: cannot write --json ", o.json_out);
    f << result.dump(2) << "\n";
  }
  return ok ? 0 : 1;
}

}  // namespace strata::app
