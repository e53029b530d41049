// `strata bench ops`: device report and op benchmarks (apps/strata/bench_ops.cpp). The op sweep
// against the CPU float64 reference is its own binary, strata_op_sweep (sweep/sweep.h): the
// sweep's old options here (--check, --backend, --json) fail naming it.
// `strata bench train`: training-step throughput, optionally against the PyTorch reference
// (apps/strata/bench_train.cpp).
// `strata bench recompute`: step time and peak allocator bytes under each recompute mode
// (apps/strata/bench_recompute.cpp).
// `strata bench mamba`: the Mamba2 mixer's forward + backward, optionally against the PyTorch
// reference (apps/strata/bench_mamba.cpp).
// `strata bench packed`: attention on a packed sequence against one document, next to the
// Σ doc_len² / seq_len² bound, and a sliding window against full causal attention next to its
// bound (apps/strata/bench_packed.cpp).
#include <cstdio>

#include "apps/strata/bench_mamba.h"
#include "apps/strata/bench_metrics.h"
#include "apps/strata/bench_recompute.h"
#include "apps/strata/bench_ops.h"
#include "apps/strata/bench_packed.h"
#include "apps/strata/bench_train.h"
#include "apps/strata/commands.h"
#include "core/device.h"
#include "core/error.h"
#include "kernels/cpu/blas_core.h"
#include "kernels/cpu/cpu_platform.h"

namespace strata::app {
namespace {

void register_bench_mamba(CLI::App& bench) {
  CLI::App* c = bench.add_subcommand(
      "mamba", "the Mamba2 mixer's forward + backward (ms, tokens/s), optionally against the PyTorch eager "
               "reference of the same chunked scan, checked to compute the same values first");
  auto o = std::make_shared<BenchMambaOptions>();
  c->add_option("--batch", o->batch, "batch size")->capture_default_str();
  c->add_option("--seq", o->seq, "sequence length")->capture_default_str();
  c->add_option("--hidden", o->hidden, "model width (d_inner = 2 x hidden)")->capture_default_str();
  c->add_option("--head-dim", o->head_dim, "mamba_head_dim")->capture_default_str();
  c->add_option("--state", o->state, "mamba_state_dim")->capture_default_str();
  c->add_option("--groups", o->groups, "mamba_num_groups")->capture_default_str();
  c->add_option("--chunk", o->chunk, "mamba_chunk_size")->capture_default_str();
  c->add_option("--dtype", o->dtype, "f32 or f64")->capture_default_str();
  c->add_option("--iters", o->iters, "timed passes")->capture_default_str();
  c->add_option("--warmup", o->warmup, "untimed passes before them")->capture_default_str();
  c->add_option("--repeat", o->repeat, "run ours and the reference back to back this many times")->capture_default_str();
  c->add_option("--reference", o->reference, "torch: also run scripts/bench/mamba2_torch_ref.py");
  c->add_option("--python", o->python, "the Python with torch for --reference torch")->capture_default_str();
  c->add_option("--torch-script", o->torch_script, "the reference script (default: the source tree's)");
  c->add_option("--json", o->json_out, "write the results as JSON to this file");
  c->add_option("--save-results", o->save_results,
                "write the parameters, x, dy and our y, dx and parameter gradients to this safetensors file");
  add_runner(c, [o] { return run_mamba_benchmark(*o); });
}

void register_bench_packed(CLI::App& bench) {
  CLI::App* c = bench.add_subcommand(
      "packed", "attention forward + backward on a sequence packed with --docs documents against the same "
                "sequence as one document: the time ratio next to the bound sum(doc_len^2) / seq_len^2; and a "
                "sliding window (--window) against full causal attention next to its bound");
  auto o = std::make_shared<BenchPackedOptions>();
  c->add_option("--device", o->device, "cpu, cuda or auto")->capture_default_str();
  c->add_option("--seq", o->seq, "sequence length")->capture_default_str();
  c->add_option("--docs", o->docs, "documents in the packed sequence (lengths 3:1:4:1:5:9:2:6)")->capture_default_str();
  c->add_option("--window", o->window,
                "also time a sliding window of this many earlier keys (window_size (W, 0)) against full causal "
                "attention, next to the bound sum(min(W+1, pos+1)) / sum(pos+1); 0: skip")
      ->capture_default_str();
  c->add_option("--batch", o->batch, "samples")->capture_default_str();
  c->add_option("--heads", o->heads, "query heads")->capture_default_str();
  c->add_option("--kv-heads", o->kv_heads, "key/value heads")->capture_default_str();
  c->add_option("--head-dim", o->head_dim, "head dimension")->capture_default_str();
  c->add_option("--dtype", o->dtype, "f32, bf16 or f64")->capture_default_str();
  c->add_option("--iters", o->iters, "timed passes per run")->capture_default_str();
  c->add_option("--warmup", o->warmup, "untimed passes before them")->capture_default_str();
  c->add_option("--repeat", o->repeat, "alternate the two runs this many times")->capture_default_str();
  c->add_option("--json", o->json_out, "write the results as JSON to this file");
  add_runner(c, [o] { return run_packed_benchmark(*o); });
}

void register_bench_recompute(CLI::App& bench) {
  CLI::App* c = bench.add_subcommand(
      "recompute", "activation recompute's cost and saving: the run under none / full uniform / full block / "
                   "selective modes, alternated; step-time ratios, peak allocator bytes, strata plan's estimate");
  auto o = std::make_shared<BenchRecomputeOptions>();
  c->add_option("--config", o->train.config, "the run config (YAML), e.g. configs/bench_hybrid_cpu.yaml")->required();
  c->add_option("--modes", o->modes,
                "none (first), full_uniform[:n], full_block[:n], selective:module[,module] (default: none "
                "full_uniform full_block selective:mlp)");
  c->add_option("--compare-config", o->compare_config,
                "also run this config without recompute and print the tokens/s ratio of the two");
  c->add_option("--iters", o->train.iters, "timed steps per run")->capture_default_str();
  c->add_option("--warmup", o->train.warmup, "untimed steps before them")->capture_default_str();
  c->add_option("--repeat", o->train.repeat, "alternate the runs this many times")->capture_default_str();
  c->add_option("--json", o->train.json_out, "write the results as JSON to this file");
  accept_config_args(c);
  add_runner(c, [o, c] {
    o->train.overrides = config_args(c);
    o->train.own_flags = own_flags(c);
    return run_recompute_benchmark(*o);
  });
}

}  // namespace

void register_bench(CLI::App& app) {
  CLI::App* bench = app.add_subcommand("bench", "benchmarks");
  bench->require_subcommand(1);
  CLI::App* ops = bench->add_subcommand("ops", "device report and op benchmarks (the op sweep: strata_op_sweep)");
  struct Opts {
    bool check = false, quick = false;
    bool no_bench = false;
    std::string backend, filter, json, bench_json;
  };
  auto o = std::make_shared<Opts>();
  // The op sweep's options, kept only to refuse them with the binary that has them.
  ops->add_flag("--check", o->check, "moved: the op sweep is strata_op_sweep, beside strata");
  ops->add_option("--backend", o->backend, "moved to strata_op_sweep (the sweep's backend)");
  ops->add_option("--json", o->json, "moved to strata_op_sweep (the sweep's results)");
  ops->add_flag("--quick", o->quick, "fewer and smaller shapes");
  ops->add_option("--filter", o->filter,
                  "only benchmarks whose printed name contains this (e.g. softmax_fwd); an error when nothing matches");
  ops->add_flag("--no-bench", o->no_bench, "skip the op benchmarks");
  ops->add_option("--bench-json", o->bench_json, "write benchmark results as JSON to this file");
  add_runner(ops, [o] {
    STRATA_CHECK_KIND(ErrorKind::Config, !o->check && o->backend.empty() && o->json.empty(),
                      "bench ops: ", o->check ? "--check" : !o->backend.empty() ? "--backend" : "--json",
                      " belongs to the op sweep, which is no longer part of strata: run strata_op_sweep, built "
                      "beside strata (strata_op_sweep [--quick] [--summary] [--backend cpu|cuda] [--filter NAME] "
                      "[--json FILE])");
    std::printf("%s", device_report().c_str());
    std::printf("cpu numerics: %s\n", kernels::cpu::cpu_platform().describe().c_str());
    if (const std::string note = kernels::cpu::blas_core_restart_note(); !note.empty()) std::printf("  %s\n", note.c_str());
    if (o->no_bench) return 0;
    BenchOpsOptions bo;
    bo.quick = o->quick;
    bo.json_out = o->bench_json;
    bo.filter = o->filter;
    return run_op_benchmarks(bo);
  });

  CLI::App* train = bench->add_subcommand(
      "train", "training-step throughput of the real trainer (tokens/s, step time, peak memory), optionally "
               "against the PyTorch eager reference of the same GPT");
  auto t = std::make_shared<BenchTrainOptions>();
  train->add_option("--config", t->config, "the run config (YAML), e.g. configs/bench_gpt_cpu.yaml")->required();
  train->add_option("--iters", t->iters, "timed steps")->capture_default_str();
  train->add_option("--warmup", t->warmup, "untimed steps before them")->capture_default_str();
  train->add_option("--repeat", t->repeat, "run ours and the reference back to back this many times")
      ->capture_default_str();
  train->add_option("--reference", t->reference, "torch: also run scripts/bench/gpt_train_torch.py");
  train->add_option("--json", t->json_out, "write the results as JSON to this file");
  train->add_flag("--phases", t->phases, "print where the timed steps spend their time (phase timers)");
  train->add_option("--python", t->python, "the Python with torch for --reference torch")->capture_default_str();
  train->add_option("--torch-script", t->torch_script, "the reference script (default: the source tree's)");
  accept_config_args(train);
  add_runner(train, [t, train] {
    t->overrides = config_args(train);
    t->own_flags = own_flags(train);
    return run_train_benchmark(*t);
  });

  CLI::App* metrics = bench->add_subcommand(
      "metrics", "what tensor metrics cost a training step: the run with metrics off, configured but not due, "
                 "and due every step, alternated; ratios and the collectives a due step adds");
  auto m = std::make_shared<BenchMetricsOptions>();
  metrics->add_option("--config", m->train.config, "the run config (YAML), e.g. configs/moe_tiny.yaml")->required();
  metrics->add_option("--metrics", m->metrics, "metric names (docs/metrics.md), e.g. layer-router-health global-param-l2")
      ->required();
  metrics->add_option("--iters", m->train.iters, "timed steps per run")->capture_default_str();
  metrics->add_option("--warmup", m->train.warmup, "untimed steps before them")->capture_default_str();
  metrics->add_option("--repeat", m->train.repeat, "alternate the three runs this many times")->capture_default_str();
  metrics->add_option("--json", m->train.json_out, "write the results as JSON to this file");
  accept_config_args(metrics);
  add_runner(metrics, [m, metrics] {
    m->train.overrides = config_args(metrics);
    m->train.own_flags = own_flags(metrics);
    return run_metrics_benchmark(*m);
  });
  register_bench_mamba(*bench);
  register_bench_recompute(*bench);
  register_bench_packed(*bench);
}

}  // namespace strata::app
