// `strata plan --config FILE --world-size N [section.field=value ...] [--json] [--rank R]`:
// validates the run config for N ranks exactly as `strata train` does (no MPI, nothing
// allocated), then prints the layout — the grid (tp, cp, ep, dp, pp, vpp, sp), the layers of
// every pipeline stage and virtual chunk, the parameters and a memory estimate per rank (weights,
// f32 main params, f32 grads, Adam state, activations with and without full recompute; MoE
// models: expert parameters per EP/ETP rank and the all-to-all bytes per step; hybrid models: the
// activations of each layer symbol; MTP depths and mHC sites counted) and the
// pipeline bubble — as text or JSON; with --rank R also that rank's coordinates and groups.
// The arithmetic is parallel/memory_plan.h and parallel/rank_grid.h; see docs/parallelism.md.
// Reference: megatron/training/theoretical_memory_usage.py (report_theoretical_memory).
#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "apps/strata/commands.h"
#include "core/error.h"
#include "data/tokenizer.h"
#include "training/planning/memory_plan.h"
#include "parallel/rank_grid.h"
#include "training/config/config.h"

namespace strata::app {
namespace {

using nlohmann::ordered_json;

std::string bytes_text(int64_t b) {
  char buf[64];
  const double x = static_cast<double>(b);
  if (x >= 1024.0 * 1024 * 1024) std::snprintf(buf, sizeof buf, "%.2f GiB", x / (1024.0 * 1024 * 1024));
  else if (x >= 1024.0 * 1024) std::snprintf(buf, sizeof buf, "%.2f MiB", x / (1024.0 * 1024));
  else if (x >= 1024.0) std::snprintf(buf, sizeof buf, "%.2f KiB", x / 1024.0);
  else std::snprintf(buf, sizeof buf, "%lld B", static_cast<long long>(b));
  return buf;
}

std::string count_text(int64_t n) {
  char buf[64];
  const double x = static_cast<double>(n);
  if (x >= 1e9) std::snprintf(buf, sizeof buf, "%.3fB", x / 1e9);
  else if (x >= 1e6) std::snprintf(buf, sizeof buf, "%.3fM", x / 1e6);
  else std::snprintf(buf, sizeof buf, "%lld", static_cast<long long>(n));
  return buf;
}

std::string chunks_text(const std::vector<LayerRange>& chunks) {
  std::string s;
  for (size_t i = 0; i < chunks.size(); ++i) {
    if (i) s += " | ";
    const auto& c = chunks[i];
    if (c.count == 0) s += "none";
    else if (c.count == 1) s += std::to_string(c.first);
    else s += std::to_string(c.first) + "-" + std::to_string(c.first + c.count - 1);
  }
  return s;
}

// This rank's coordinates and the group of each kind holding it.
ordered_json rank_json(const RankGrid& grid, int rank) {
  const RankCoordinates c = grid.coordinates(rank);
  ordered_json j{{"rank", rank},
                 {"tp_rank", c.tp_rank},
                 {"cp_rank", c.cp_rank},
                 {"dp_rank", c.dp_rank},
                 {"pp_rank", c.pp_rank},
                 {"expert_tp_rank", c.expert_tp_rank},
                 {"ep_rank", c.ep_rank},
                 {"expert_dp_rank", c.expert_dp_rank}};
  ordered_json groups = ordered_json::object();
  for (int k = 0; k < kNumGroupKinds; ++k) {
    const auto kind = static_cast<GroupKind>(k);
    groups[group_kind_name(kind)] =
        grid.group_index(kind, rank) < 0 ? ordered_json(nullptr) : ordered_json(grid.group_of(kind, rank));
  }
  j["groups"] = groups;
  return j;
}

ordered_json plan_json(const LayoutPlan& p) {
  auto params = [](const ParameterCount& c) {
    return ordered_json{
        {"total", c.total()}, {"sharded", c.sharded}, {"replicated", c.replicated}, {"expert", c.expert}};
  };
  ordered_json j;
  j["world_size"] = p.world_size;
  j["grid"] = {{"order", "tp-cp-ep-dp-pp"}, {"tp", p.tp}, {"cp", p.cp},   {"ep", p.ep},
               {"etp", p.etp},              {"dp", p.dp}, {"pp", p.pp},   {"vpp", p.vpp},
               {"sequence_parallel", p.sequence_parallel}};
  j["batch"] = {{"global_batch_size", p.global_batch_size},
                {"micro_batch_size", p.micro_batch_size},
                {"num_micro_batches", p.num_micro_batches}};
  j["precision"] = p.bf16 ? "bf16" : "fp32";
  j["distributed_optimizer"] = p.distributed_optimizer;
  j["model_parameters"] = p.model_parameters;
  j["padded_vocab_size"] = p.padded_vocab;
  j["activation_bytes_per_layer"] = {{"no_recompute", p.activations.per_layer},
                                     {"full_recompute", p.activations.per_layer_recompute},
                                     {"output_layer", p.activations.output_layer}};
  if (!p.hybrid_layer_kinds.empty()) {
    ordered_json kinds;
    for (const auto& k : p.hybrid_layer_kinds)
      kinds[std::string(1, k.symbol)] = {{"no_recompute", k.per_layer}, {"full_recompute", k.per_layer_recompute}};
    j["hybrid_activation_bytes_per_layer"] = kinds;
  }
  j["generation_cache_bytes_per_token"] = p.generation_cache_bytes_per_token;
  j["recompute"] = p.recompute;  // the config's mode; stages' activations_configured
  j["pipeline_bubble_fraction"] = p.bubble_fraction;
  if (p.num_experts > 0)
    j["moe"] = {{"num_experts", p.num_experts},
                {"topk", p.topk},
                {"local_experts", p.local_experts},
                {"expert_dp", p.expert_dp},
                {"all_to_all_bytes_per_layer_micro_batch", p.all_to_all_bytes_per_layer}};
  ordered_json stages = ordered_json::array();
  for (const auto& s : p.stages) {
    ordered_json chunks = ordered_json::array();
    for (const auto& c : s.chunks) chunks.push_back({{"first_layer", c.first}, {"num_layers", c.count}});
    const MemoryEstimate& m = s.memory;
    stages.push_back({{"stage", s.stage},
                      {"chunks", chunks},
                      {"embedding", s.has_embedding},
                      {"output_layer", s.has_output_layer},
                      {"parameters_per_rank", params(s.parameters)},
                      {"in_flight", s.in_flight},
                      {"moe_layers", s.moe_layers},
                      {"all_to_all_bytes_per_step", s.all_to_all_bytes_per_step},
                      {"memory_bytes_per_rank",
                       {{"weights", m.weights},
                        {"main_params", m.main_params},
                        {"grads", m.grads},
                        {"optimizer", m.optimizer},
                        {"activations", m.activations},
                        {"activations_full_recompute", m.activations_recompute},
                        {"activations_configured", m.activations_configured},
                        {"total", m.total()},
                        {"total_full_recompute", m.total_recompute()}}}});
  }
  j["stages"] = stages;
  j["peak_bytes_per_rank"] = {{"no_recompute", p.peak_stage(false).memory.total()},
                              {"full_recompute", p.peak_stage(true).memory.total_recompute()}};
  return j;
}

// The resolved config with model.vocab_size from the tokenizer when the config leaves it null.
ResolvedConfig with_tokenizer_vocab(const ResolvedConfig& cfg) {
  if (cfg.model->vocab_size) return cfg;
  try {
    return cfg.with_vocab_size(data::build_tokenizer(*cfg.data)->vocab_size());
  } catch (const config::ConfigError&) {
    throw;
  } catch (const Error& e) {
    STRATA_THROW("strata plan: model.vocab_size is null and the tokenizer could not be built (", e.message(),
                 "); set model.vocab_size=N to plan without the tokenizer files");
  }
}

void print_text(const std::string& config, const LayoutPlan& p, const ModelConfig& m) {
  std::printf("strata plan: %s on %lld ranks (valid)\n\n", config.c_str(), static_cast<long long>(p.world_size));
  std::printf("grid (Megatron order tp-cp-ep-dp-pp): tp %lld  cp %lld  ep %lld  dp %lld  pp %lld  vpp %lld  sp %s\n",
              (long long)p.tp, (long long)p.cp, (long long)p.ep, (long long)p.dp, (long long)p.pp, (long long)p.vpp,
              p.sequence_parallel ? "on" : "off");
  std::printf("expert grid (tp-ep-dp-pp): etp %lld  ep %lld  expert dp %lld\n", (long long)p.etp, (long long)p.ep,
              (long long)(p.world_size / (p.etp * p.ep * p.pp)));
  std::printf("model: %s parameters, %lld layers, hidden %lld, vocab padded to %lld at tp %lld\n",
              count_text(p.model_parameters).c_str(), (long long)m.num_layers, (long long)m.hidden_size,
              (long long)p.padded_vocab, (long long)p.tp);
  std::printf("batch: global %lld = micro-batch %lld x %lld micro-batches x dp %lld\n", (long long)p.global_batch_size,
              (long long)p.micro_batch_size, (long long)p.num_micro_batches, (long long)p.dp);
  std::printf("pipeline bubble: (pp-1)/(vpp*m) = %.4f\n", p.bubble_fraction);
  std::printf("precision %s; %s\n", p.bf16 ? "bf16 (f32 main params)" : "fp32",
              p.distributed_optimizer
                  ? ("distributed optimizer: main params and Adam state sharded over dp x cp = " +
                     std::to_string(p.dp * p.cp) + " ranks")
                        .c_str()
                  : "optimizer state replicated on every data-parallel rank");
  if (p.num_experts > 0)
    std::printf("MoE: %lld experts, top-%lld; %lld local experts per ep rank (etp %lld); expert state sharded over "
                "expert dp %lld; all-to-all %s sent per MoE layer per micro-batch\n",
                (long long)p.num_experts, (long long)p.topk, (long long)p.local_experts, (long long)p.etp,
                (long long)(p.distributed_optimizer ? p.expert_dp : 1), bytes_text(p.all_to_all_bytes_per_layer).c_str());
  std::printf("generation cache: %s per token (all decoder layers)\n",
              bytes_text(p.generation_cache_bytes_per_token).c_str());
  if (p.hybrid_layer_kinds.empty()) {
    std::printf("activations per layer per micro-batch: %s (full recompute %s); output layer %s\n\n",
                bytes_text(p.activations.per_layer).c_str(), bytes_text(p.activations.per_layer_recompute).c_str(),
                bytes_text(p.activations.output_layer).c_str());
  } else {
    std::printf("hybrid '%s': activations per layer per micro-batch", m.hybrid_layer_pattern->c_str());
    for (const auto& k : p.hybrid_layer_kinds)
      std::printf("%s %c %s (full recompute %s)", &k == &p.hybrid_layer_kinds.front() ? ":" : ";", k.symbol,
                  bytes_text(k.per_layer).c_str(), bytes_text(k.per_layer_recompute).c_str());
    std::printf("; output layer %s\n\n", bytes_text(p.activations.output_layer).c_str());
  }
  for (const auto& s : p.stages) {
    std::string extra;
    if (s.has_embedding) extra += ", embedding";
    if (s.has_output_layer) extra += ", output layer";
    std::printf("stage %lld: layers %s%s\n", (long long)s.stage, chunks_text(s.chunks).c_str(), extra.c_str());
    std::printf("  parameters per rank %s (%lld sharded over tp + %lld replicated", count_text(s.parameters.total()).c_str(),
                (long long)s.parameters.sharded, (long long)s.parameters.replicated);
    if (p.num_experts > 0)
      std::printf(" + %lld expert; %lld MoE layers, all-to-all %s per step)\n", (long long)s.parameters.expert,
                  (long long)s.moe_layers, bytes_text(s.all_to_all_bytes_per_step).c_str());
    else
      std::printf(")\n");
    const MemoryEstimate& e = s.memory;
    std::printf("  weights %s, main params %s, grads %s, Adam %s\n", bytes_text(e.weights).c_str(),
                bytes_text(e.main_params).c_str(), bytes_text(e.grads).c_str(), bytes_text(e.optimizer).c_str());
    std::printf("  activations (%lld %s in flight) %s, full recompute %s\n", (long long)s.in_flight,
                p.vpp > 1 ? "model chunks" : "micro-batches", bytes_text(e.activations).c_str(),
                bytes_text(e.activations_recompute).c_str());
    std::printf("  total per rank %s, full recompute %s\n", bytes_text(e.total()).c_str(),
                bytes_text(e.total_recompute()).c_str());
    if (p.recompute != "none")
      std::printf("  activations with the configured recompute (%s) %s\n", p.recompute.c_str(),
                  bytes_text(e.activations_configured).c_str());
  }
  const StagePlan& peak = p.peak_stage(false);
  const StagePlan& peak_r = p.peak_stage(true);
  std::printf("\npeak per rank: %s (stage %lld); with full recompute %s (stage %lld)\n",
              bytes_text(peak.memory.total()).c_str(), (long long)peak.stage,
              bytes_text(peak_r.memory.total_recompute()).c_str(), (long long)peak_r.stage);
}

}  // namespace

void register_plan(CLI::App& app) {
  CLI::App* plan = app.add_subcommand("plan", "validate a parallel layout for N ranks and estimate memory per rank");
  struct Opts {
    std::string config;
    int64_t world_size = 0;
    bool json = false;
    std::optional<int64_t> rank;
  };
  auto o = std::make_shared<Opts>();
  plan->add_option("--config", o->config, "the run config (YAML)")->required();
  plan->add_option("--world-size", o->world_size, "the number of ranks (GPUs) to plan for")->required();
  accept_config_args(plan);
  plan->add_flag("--json", o->json, "print the plan as JSON");
  plan->add_option("--rank", o->rank, "also print this rank's coordinates and process groups");
  add_one_process_runner(plan, [o, plan] {
    STRATA_CHECK(o->world_size > 0, "strata plan: --world-size must be positive (got ", o->world_size, ")");
    std::vector<std::string> no_effect;
    StrataConfig cfg = StrataConfig::load(o->config, config_args(plan), &no_effect, own_flags(plan));
    apply_checkpoint_args(cfg);
    report_no_effect_flags(no_effect);
    cfg.parallel.world_size = o->world_size;  // --world-size wins over the file's parallel.world_size
    const ResolvedConfig resolved = with_tokenizer_vocab(cfg.validate(std::nullopt));
    const LayoutPlan p = plan_layout(resolved);
    std::optional<RankGrid> grid;
    if (o->rank) {
      grid.emplace(RankGrid::from_config(*resolved.parallel));
      STRATA_CHECK(*o->rank >= 0 && *o->rank < p.world_size, "strata plan: --rank ", *o->rank,
                   " is outside the world of ", p.world_size, " ranks");
    }
    if (o->json) {
      ordered_json j = plan_json(p);
      if (grid) j["rank"] = rank_json(*grid, static_cast<int>(*o->rank));
      std::printf("%s\n", j.dump(2).c_str());
      return 0;
    }
    print_text(o->config, p, *resolved.model);
    if (grid) {
      const ordered_json r = rank_json(*grid, static_cast<int>(*o->rank));
      std::printf("\nrank %lld: tp %d cp %d dp %d pp %d, expert tp %d ep %d expert dp %d\n", (long long)*o->rank,
                  r["tp_rank"].get<int>(), r["cp_rank"].get<int>(), r["dp_rank"].get<int>(), r["pp_rank"].get<int>(),
                  r["expert_tp_rank"].get<int>(), r["ep_rank"].get<int>(), r["expert_dp_rank"].get<int>());
      for (const auto& [kind, ranks] : r["groups"].items())
        std::printf("  %-18s %s\n", kind.c_str(), ranks.is_null() ? "(none)" : ranks.dump().c_str());
    }
    return 0;
  });
}

}  // namespace strata::app
