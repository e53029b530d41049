// training.grad_reduce_in_bf16 (Megatron --grad-reduce-in-bf16) against a reference built from
// single-rank f32 gradients: GPT in bf16, DP2, 2 micro-batches of 2 samples per rank, no dropout,
// no clipping. Each micro-batch k = (rank r, index m) is trained alone on one rank (a one-micro-
// batch step whose loss normalisation is exactly twice the layout's, a power of two), giving its
// f32 gradient G_rm. Megatron's rounding then says, per element:
//   acc_r = bf16(bf16(G_r0 / 2) + G_r1 / 2)        (bf16 main_grad, fused accumulation)
//   reduced = bf16(bf16(acc_0 · ½) + bf16(acc_1 · ½))  (×1/dp in bf16, then the bf16 sum)
// and the layout's reduced main grads equal it bit for bit, with and without the distributed
// optimizer. The same layout without the flag keeps f32 gradients that are not all bf16 values.
#include "layout_check.h"
#include "core/half.h"

namespace strata {
namespace {

using mpitest::kVocab;

const std::vector<std::string> kBase = {"training.precision=bf16", "model.untie_embeddings_and_output_weights=true",
                                        "model.hidden_dropout=0",
                                        "model.attention_dropout=0", "optimizer.clip_grad=0",
                                        "training.train_iters=1"};

std::vector<std::string> with(std::vector<std::string> extra) {
  extra.insert(extra.begin(), kBase.begin(), kBase.end());
  return extra;
}

double bf16(double x) { return static_cast<double>(static_cast<float>(bfloat16(static_cast<float>(x)))); }

// Micro-batch m of dp rank r of the DP2 layout's step 1, as the only micro-batch of a step.
class OneMicroBatch : public BatchSource {
 public:
  OneMicroBatch(const StrataConfig& layout, int64_t rank, int64_t m)
      : inner_(kVocab, layout.model.seq_length, layout.training.micro_batch_size, 2,
               static_cast<uint64_t>(layout.training.seed), 0, rank, 2),
        global_batch_(*layout.training.global_batch_size), m_(m) {}
  Batch next_microbatch(const StepPosition&, int64_t) override {
    return inner_.next_microbatch(StepPosition{1, 0, global_batch_}, m_);
  }

 private:
  MockBatchSource inner_;
  int64_t global_batch_, m_;
};

// The f32 gradient of micro-batch (rank, m) alone, by parameter name.
std::map<std::string, std::vector<double>> alone(const StrataConfig& layout, int64_t rank, int64_t m) {
  std::vector<std::string> o = with({"training.global_batch_size=2"});
  const StrataConfig cfg = mpitest::layout_config(o, 1);
  const ParallelGroups single = ParallelGroups::single_process();
  std::vector<std::unique_ptr<GPTModel>> chunks = make_gpt_model_chunks(cfg, Device::cpu(), single);
  OneMicroBatch data(layout, rank, m);
  std::ostringstream log;
  TrainerOptions opt;
  opt.log_stream = &log;
  Trainer trainer(cfg, *chunks.front(), data, nullptr, opt);
  trainer.train();
  std::map<std::string, std::vector<double>> g;
  for (Parameter* p : chunks.front()->parameters()) g[p->name] = p->main_grad.to_vector();
  return g;
}

void check_against_reference(const std::vector<std::string>& layout_extra) {
  const StrataConfig cfg = mpitest::layout_config(with(layout_extra), 2);
  REQUIRE(cfg.num_micro_batches() == 2);
  const ParallelGroups groups = build_parallel_groups(cfg.parallel, mpitest::world_comm());
  const mpitest::LayoutRun run = mpitest::train_layout(cfg, groups, kVocab);
  std::map<std::string, std::vector<double>> g[2][2];
  for (int64_t r = 0; r < 2; ++r)
    for (int64_t m = 0; m < 2; ++m) g[r][m] = alone(cfg, r, m);
  int64_t checked = 0, mismatched = 0;
  for (const auto& [name, t] : run.grads) {
    const std::vector<double> got = t.to_vector();
    REQUIRE(g[0][0].count(name) == 1);
    for (size_t i = 0; i < got.size(); ++i) {
      double acc[2];
      for (int r = 0; r < 2; ++r) acc[r] = bf16(bf16(g[r][0].at(name)[i] / 2.0) + g[r][1].at(name)[i] / 2.0);
      const double want = bf16(bf16(acc[0] * 0.5) + bf16(acc[1] * 0.5));
      if (got[i] != want && ++mismatched <= 5) FAIL_CHECK(name << "[" << i << "]: " << got[i] << " != " << want);
      ++checked;
    }
  }
  CHECK(mismatched == 0);
  CHECK(checked > 1000);
}

}  // namespace

TEST_CASE("grad_reduce_in_bf16: DP2 reduced grads are Megatron's bf16 roundings, bit for bit", "[grad_bf16_2]") {
  check_against_reference({"training.grad_reduce_in_bf16=true"});
}

TEST_CASE("grad_reduce_in_bf16: DP2 + distributed optimizer (bf16 reduce-scatter)", "[grad_bf16_2]") {
  check_against_reference({"training.grad_reduce_in_bf16=true", "parallel.use_distributed_optimizer=true"});
}

TEST_CASE("grad_reduce_in_bf16: off, the DP2 grads are f32 (not all bf16 values)", "[grad_bf16_2]") {
  const StrataConfig cfg = mpitest::layout_config(with({}), 2);
  const ParallelGroups groups = build_parallel_groups(cfg.parallel, mpitest::world_comm());
  const mpitest::LayoutRun run = mpitest::train_layout(cfg, groups, kVocab);
  int64_t not_bf16 = 0;
  for (const auto& [name, t] : run.grads)
    for (double v : t.to_vector()) not_bf16 += bf16(v) != v ? 1 : 0;
  CHECK(not_bf16 > 100);
}

}  // namespace strata
