// router_diagnostic_sums under mpirun (models/layers/moe/router_observation.h): in a training
// forward of an MoE GPT split over tp 2 with sequence parallelism ([tp], np 2), cp 2 ([cp],
// np 2) and cp 2 × tp 2 + sp ([cp4], np 4), each rank's sums cover its own tokens; summed over
// the tp × cp group (the bias channel is equal everywhere) and normalised they equal the
// router_diagnostics tensor of the single-process forward on the whole sequences (counts, valid
// tokens and overlap exactly, scores and the margin within f32 rounding).
// Reference: megatron/core/transformer/moe/router_diagnostics.py.
#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "core/observe.h"
#include "layout_check.h"
#include "models/layers/moe/router_observation.h"

namespace strata {
namespace {

struct SumsRecorder : Observer {
  std::map<std::string, Tensor> seen;  // owner -> the tensor (one forward: one per router)
  void on_tensor(const Observation& o) override { seen[std::string(o.owner)] = o.tensor.clone(); }
};

std::map<std::string, Tensor> observe(const ResolvedConfig& cfg, const ParallelGroups& g, SourceKind kind) {
  std::vector<std::unique_ptr<GPTModel>> chunks = make_gpt_model_chunks(cfg, Device::cpu(), g);
  MockBatchSource data(mpitest::kVocab, cfg.model->seq_length, cfg.training->micro_batch_size, cfg.num_micro_batches(),
                       static_cast<uint64_t>(cfg.training->seed), 0, g.dp.rank(), g.dp.size());
  const Batch batch = cp::split_batch(data.next_microbatch(1, 0), g.cp.size(), g.cp.rank());
  SumsRecorder rec;
  {
    CaptureScope scope(rec, {kind});
    auto ctx = chunks.front()->make_context(1, 0, /*training=*/true);
    chunks.front()->forward_pass(*ctx, batch);
  }
  return rec.seen;
}

void check_merged(const std::vector<std::string>& layout) {
  const std::vector<std::string> moe = {"model.add_bias_linear=false",       "model.num_experts=4",
                                        "model.moe_ffn_hidden_size=16",      "model.moe_router_topk=2",
                                        "model.moe_layer_freq=[0, 1, 1, 0]", "model.hidden_dropout=0.0",
                                        "model.attention_dropout=0.0"};
  std::vector<std::string> o = moe;
  o.insert(o.end(), layout.begin(), layout.end());
  const ResolvedConfig cfg = mpitest::layout_config(o, mpitest::world().size());
  const ParallelGroups g = build_parallel_groups(*cfg.parallel, mpitest::world_comm());
  const auto single =
      observe(mpitest::layout_config(moe, 1), ParallelGroups::single_process(), SourceKind::RouterDiagnostics);
  const auto par = observe(cfg, g, SourceKind::RouterDiagnosticSums);
  REQUIRE(par.size() == 2);  // layers 1 and 2
  for (const auto& [owner, sums] : par) {
    INFO(owner);
    REQUIRE(sums.shape() == Shape{2, 8, 4});
    const std::vector<double> local = sums.to_vector();
    Tensor merged = sums.clone();
    g.tp_cp.all_reduce(merged, ReduceOp::Sum);
    std::vector<double> m = merged.to_vector();
    for (int64_t j = 0; j < 2; ++j)
      for (int64_t e = 0; e < 4; ++e) {
        const size_t i = static_cast<size_t>(j * 32 + 3 * 4 + e);
        m[i] = local[i];  // the bias channel: equal on every shard, not a sum
      }
    double valid = 0;
    for (int64_t j = 0; j < 2; ++j) valid += local[static_cast<size_t>(j * 32 + 5 * 4)];
    CHECK(valid == 2.0 * 16 / g.tp_cp.size());  // this rank's tokens of both sequences
    const std::vector<double> got =
        layers::moe::normalize_router_diagnostic_sums(Tensor::from_vector(m, {2, 8, 4}, DType::F32)).to_vector();
    const std::vector<double> want = single.at(owner).to_vector();
    for (size_t i = 0; i < want.size(); ++i) {
      INFO("sequence " << i / 28 << " channel " << (i / 4) % 7 << " expert " << i % 4);
      CHECK(std::fabs(got[i] - want[i]) <= 1e-5 * std::max(1.0, std::fabs(want[i])));
    }
  }
}

TEST_CASE("router diagnostic sums: tp 2 + sp shards merge to the single-process diagnostics", "[tp]") {
  if (mpitest::world().size() != 2) return;
  check_merged({"parallel.tensor_model_parallel_size=2", "parallel.sequence_parallel=true"});
}

TEST_CASE("router diagnostic sums: cp 2 shards merge to the single-process diagnostics", "[cp]") {
  if (mpitest::world().size() != 2) return;
  check_merged({"parallel.context_parallel_size=2"});
}

TEST_CASE("router diagnostic sums: cp 2 x tp 2 + sp shards merge to the single-process diagnostics", "[cp4]") {
  if (mpitest::world().size() != 4) return;
  check_merged(
      {"parallel.context_parallel_size=2", "parallel.tensor_model_parallel_size=2", "parallel.sequence_parallel=true"});
}

}  // namespace
}  // namespace strata
