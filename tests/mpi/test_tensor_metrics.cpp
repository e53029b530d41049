// Tensor metrics under mpirun on 2 CPU ranks ([tensor_metrics2], ctest mpi_tensor_metrics_np2):
// every registered metric (router metrics on the MoE config only), due at every iteration, gives
// the single-rank value within 1e-6 relative at TP2, TP2+SP, PP2, PP2×VPP2, DP2, DP2 with the
// distributed optimizer, CP2 and (MoE) EP2, on a GPT and an MoE config; and observation — due,
// configured but not due, or none — leaves the losses bit-identical.
// Two allowances, both about the inputs rather than the reductions:
//  - statistics that are differences of O(1) terms (the router's loss gap, imbalances near 0)
//    carry the f32 resolution of those terms: |layout − single| ≤ 1e-6·|single| + 1e-7;
//  - layer-router-logits-sampled-median is Megatron's per-shard sample (each rank samples its
//    own tokens with the BLAKE2b-strided rule), so where tokens are split over ranks (dp, cp,
//    sp) the sample itself differs: compared only where every rank holds its layers' whole
//    token population (TP without SP, PP, PP×VPP).
// Reference: megatron/training/tensor_metrics/observer.py (which refuses pp > 1 and, for the router
// diagnostics, sequence-split layouts; Strata computes them exactly).
#include <cmath>
#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include "layout_check.h"
#include "training/observability/tensor_metrics/registry.h"

namespace strata {
namespace {

using mpitest::kVocab;
using mpitest::layout_config;
using mpitest::train_layout;

const std::vector<std::string> kMoe = {"model.add_bias_linear=false", "model.num_experts=4",
                                       "model.moe_ffn_hidden_size=16", "model.moe_router_topk=2",
                                       "model.moe_aux_loss_coeff=0.01", "model.moe_layer_freq=[0, 1, 1, 0]"};

// Every metric the model can feed, due at every iteration.
std::string all_metrics(bool moe, bool mhc) {
  std::string s = "logging.tensor_metrics=[";
  bool first = true;
  for (const tensor_metrics::MetricFactory& f : tensor_metrics::tensor_metric_factories()) {
    bool router = false, mtp = false;
    for (const std::string& k : f.make()->source_kinds()) router |= k.rfind("router_", 0) == 0, mtp |= k == "mtp_logits";
    if (mtp || (router && !moe) || (f.name.rfind("layer-mhc-", 0) == 0 && !mhc)) continue;
    s += (first ? "" : ", ") + f.name + ":1";
    first = false;
  }
  return s + "]";
}

std::map<std::string, double> run_metrics(const std::vector<std::string>& opts, const ParallelGroups& groups,
                                          int world, std::vector<double>* losses = nullptr, int64_t* collectives = nullptr) {
  MemoryMetricsSink sink;
  const mpitest::LayoutRun r = train_layout(layout_config(opts, world), groups, kVocab, false, {}, &sink);
  if (losses) *losses = r.losses;
  std::map<std::string, double> out;
  for (const auto& s : sink.scalars)
    if (s.tag.rfind("tensor-metrics/", 0) == 0) out[s.tag + "@" + std::to_string(s.step)] = s.value;
  if (collectives)
    for (const auto& rec : sink.records)
      if (rec.contains("tensor-metrics-collectives")) *collectives = rec["tensor-metrics-collectives"].get<int64_t>();
  return out;
}

// Whether the layout splits a layer's tokens over ranks (dp, cp or sequence parallelism).
bool splits_tokens(const ResolvedConfig& cfg) {
  const ParallelConfig& p = *cfg.parallel;
  return cfg.data_parallel_size() > 1 || p.context_parallel_size > 1 ||
         (p.sequence_parallel && p.tensor_model_parallel_size > 1);
}

// mhc: with 3 mHC residual streams (and the mHC metrics).
void check_metrics(std::vector<std::string> layout, bool moe, bool mhc = false) {
  const int world = mpitest::world().size();
  std::vector<std::string> common = moe ? kMoe : std::vector<std::string>{};
  common.push_back("training.train_iters=2");
  if (mhc) common.insert(common.end(), {"model.enable_hyper_connections=true", "model.num_residual_streams=3"});
  common.push_back(all_metrics(moe, mhc));
  std::vector<std::string> par = common;
  par.insert(par.end(), layout.begin(), layout.end());
  std::vector<std::string> base_opts = common;
  for (const auto& s : layout)
    if (s.rfind("parallel.", 0) != 0) base_opts.push_back(s);
  const std::map<std::string, double> base = run_metrics(base_opts, ParallelGroups::single_process(), 1);
  const ResolvedConfig par_cfg = layout_config(par, world);
  const ParallelGroups groups = build_parallel_groups(*par_cfg.parallel, mpitest::world_comm());
  int64_t collectives = 0;
  const std::map<std::string, double> got = run_metrics(par, groups, world, nullptr, &collectives);
  const bool sampled_differs = splits_tokens(par_cfg);
  if (groups.global_rank != groups.world_size - 1) return;  // the logging rank holds the results
  REQUIRE(base.size() > 20);
  double worst = 0.0;
  std::string worst_tag;
  int compared = 0;
  for (const auto& [tag, b] : base) {
    INFO(tag);
    REQUIRE(got.count(tag) == 1);
    if (sampled_differs && tag.find("sampled-median") != std::string::npos) continue;
    const double g = got.at(tag), diff = std::abs(g - b);
    if (diff > 1e-7 && diff / std::abs(b) > worst) worst = diff / std::abs(b), worst_tag = tag;
    INFO("layout " << g << " single rank " << b);
    CHECK(diff <= 1e-6 * std::abs(b) + 1e-7);
    ++compared;
  }
  CHECK(got.size() == base.size());
  std::string name;
  for (const auto& s : layout) name += " " + s.substr(s.find('.') + 1);
  std::printf("  tensor metrics%s%s: %d of %zu values compared, worst relative error above the 1e-7 floor %.3g (%s); "
              "%lld collectives per due step\n",
              moe ? " (MoE)" : "", name.c_str(), compared, base.size(), worst, worst_tag.c_str(),
              static_cast<long long>(collectives));
}

const std::vector<std::vector<std::string>> kLayouts = {
    {"parallel.tensor_model_parallel_size=2"},
    {"parallel.tensor_model_parallel_size=2", "parallel.sequence_parallel=true"},
    {"parallel.pipeline_model_parallel_size=2"},
    {"parallel.pipeline_model_parallel_size=2", "parallel.virtual_pipeline_model_parallel_size=2"},
    {},  // DP2
    {"parallel.use_distributed_optimizer=true"},
    {"parallel.context_parallel_size=2"},
};

TEST_CASE("tensor metrics: every GPT metric at TP2, TP2+SP, PP2, PP2xVPP2, DP2, DP2 distopt, CP2 equals one rank",
          "[tensor_metrics2]") {
  for (const auto& layout : kLayouts) check_metrics(layout, false);
}

TEST_CASE("tensor metrics: every MoE metric at TP2+SP, PP2, PP2xVPP2, DP2, DP2 distopt, CP2, EP2 equals one rank",
          "[tensor_metrics2]") {
  for (const auto& layout : kLayouts)
    if (layout.size() != 1 || layout[0] != "parallel.tensor_model_parallel_size=2") check_metrics(layout, true);
  check_metrics({"parallel.expert_model_parallel_size=2"}, true);
}

TEST_CASE("tensor metrics: every metric of an mHC GPT at TP2, TP2+SP, PP2, PP2xVPP2, DP2, DP2 distopt, CP2 equals one rank",
          "[tensor_metrics2][mhc]") {
  for (const auto& layout : kLayouts) check_metrics(layout, false, /*mhc=*/true);
}

TEST_CASE("tensor metrics: losses are bit-identical with metrics due, configured but not due, and off",
          "[tensor_metrics2]") {
  const int world = mpitest::world().size();
  const std::vector<std::string> layout = {"parallel.pipeline_model_parallel_size=2", "training.train_iters=3"};
  const ParallelGroups groups = build_parallel_groups(*layout_config(layout, world).parallel, mpitest::world_comm());
  auto losses = [&](const std::string& metrics) {
    std::vector<std::string> o = kMoe;
    o.insert(o.end(), layout.begin(), layout.end());
    if (!metrics.empty()) o.push_back(metrics);
    std::vector<double> l;
    run_metrics(o, groups, world, &l);
    return l;
  };
  const std::vector<double> off = losses("");
  CHECK(losses(all_metrics(true, false)) == off);
  CHECK(losses("logging.tensor_metrics=[layer-router-health:1000, global-param-l2:1000]") == off);
}

}  // namespace
}  // namespace strata
