// The router tracer under mpirun on 2 ranks ([router_trace2], ctest mpi_router_trace_np2): each
// rank writes its own router_trace_rank<R>.jsonl with its global rank; under PP2 the records carry
// global layer numbers (layer 1 on the first stage, layer 2 on the second); under EP2 (routing
// before dispatch: each rank its own tokens) and TP2 + SP (each tp rank its sequence shard) the
// records of all ranks cover every token of the global batch exactly once per (step, layer).
// Model: layout_check.h's (4 layers, seq 16, global batch 8), MoE in layers 1 and 2, 2 iterations.
#include <filesystem>
#include <set>
#include <string>
#include <vector>

#include "core/formats/jsonl.h"
#include <nlohmann/json.hpp>

#include "layout_check.h"

namespace strata {
namespace {

constexpr int64_t kSteps = 2, kLayers = 4, kGlobalTokens = 8 * 16;

struct Traced {
  std::vector<nlohmann::json> records;  // this rank's
  ParallelGroups groups;
};

Traced trace(const std::string& name, std::vector<std::string> layout) {
  const int world = mpitest::world().size();
  REQUIRE(world == 2);
  const std::string dir = (std::filesystem::temp_directory_path() / ("strata_mpi_router_trace_" + name)).string();
  std::vector<std::string> o = {"model.add_bias_linear=false", "model.num_experts=4", "model.moe_ffn_hidden_size=16",
                                "model.moe_router_topk=2", "model.moe_layer_freq=[0, 1, 1, 0]",
                                "training.train_iters=2", "logging.moe_routing_trace_path=" + dir};
  o.insert(o.end(), layout.begin(), layout.end());
  const ResolvedConfig cfg = mpitest::layout_config(o, world);
  Traced t;
  t.groups = build_parallel_groups(*cfg.parallel, mpitest::world_comm());
  mpitest::train_layout(cfg, t.groups, mpitest::kVocab, /*gather_grads=*/false);
  t.records = formats::read_jsonl(dir + "/router_trace_rank" + std::to_string(t.groups.global_rank) + ".jsonl");
  return t;
}

// Σ over all ranks of num_tokens per (step, layer), row-major [kSteps, kLayers].
std::vector<double> tokens_everywhere(const Traced& t) {
  Tensor sums = Tensor::zeros({kSteps, kLayers}, DType::F64);
  for (const auto& r : t.records) {
    CHECK(r["rank"] == t.groups.global_rank);
    sums.data<double>()[r["step"].get<int64_t>() * kLayers + r["layer"].get<int64_t>()] += r["num_tokens"].get<double>();
  }
  mpitest::world().all_reduce(sums, ReduceOp::Sum);
  return sums.to_vector();
}

const std::vector<double> kEveryTokenOnce = {0, kGlobalTokens, kGlobalTokens, 0, 0, kGlobalTokens, kGlobalTokens, 0};

TEST_CASE("router tracer: PP2 records global layer numbers, one file per rank", "[router_trace2]") {
  const Traced t = trace("pp2", {"parallel.pipeline_model_parallel_size=2"});
  std::set<int64_t> layers;
  for (const auto& r : t.records) layers.insert(r["layer"].get<int64_t>());
  CHECK(layers == std::set<int64_t>{t.groups.pp.rank() == 0 ? 1 : 2});
  CHECK(t.records.size() == static_cast<size_t>(kSteps * 4));  // 2 steps x 4 micro-batches, one MoE layer
  CHECK(tokens_everywhere(t) == kEveryTokenOnce);
}

TEST_CASE("router tracer: EP2 records each rank's own tokens, every token once", "[router_trace2]") {
  const Traced t = trace("ep2", {"parallel.expert_model_parallel_size=2"});
  for (const auto& r : t.records) CHECK(r["num_tokens"] == 2 * 16);  // micro-batch 2 x seq 16 of its dp rank
  CHECK(tokens_everywhere(t) == kEveryTokenOnce);
}

TEST_CASE("router tracer: TP2 + SP records each tp rank's sequence shard, every token once", "[router_trace2]") {
  const Traced t = trace("tp2sp", {"parallel.tensor_model_parallel_size=2", "parallel.sequence_parallel=true"});
  for (const auto& r : t.records) CHECK(r["num_tokens"] == 8 * 2);  // seq 16 / tp 2 x micro-batch 2
  CHECK(tokens_everywhere(t) == kEveryTokenOnce);
}

}  // namespace
}  // namespace strata
