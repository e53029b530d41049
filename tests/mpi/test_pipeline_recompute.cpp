// Activation recompute under pipeline parallelism with 2 ranks (ctest mpi_pipeline_np2, tag
// [pipeline]): PP2 with the 1F1B schedule and PP2×VPP2 (interleaved), a tiny GPT and GPT+MoE in
// f32 with hidden and attention dropout: full recompute (uniform, block) and selective (mlp, moe)
// give the losses, grad norms and final gradients of the same layout without recompute, bit for
// bit (each micro-batch's saved state holds only its own chunk inputs, whatever the schedule).
// Reference: Megatron-Core transformer/transformer_block.py (_checkpointed_forward),
// pipeline_parallel/schedules.py.
#include <string>
#include <vector>

#include "layout_training.h"
#include "mpi_test_helpers.h"
#include "parallel/rank_grid.h"
#include "trainer_test_support.h"

namespace strata {
namespace {

constexpr int64_t kVocab = 64;

ResolvedConfig pp_config(bool moe, const std::vector<std::string>& extra) {
  std::vector<std::string> o = {"model.num_layers=4",
                                "model.hidden_size=16",
                                "model.num_attention_heads=4",
                                "model.vocab_size=64",
                                "model.hidden_dropout=0.1",
                                "model.attention_dropout=0.1",
                                "model.seq_length=8",
                                "model.max_position_embeddings=8",
                                "training.micro_batch_size=2",
                                "training.global_batch_size=8",
                                "training.train_iters=3",
                                "logging.log_interval=100",
                                "optimizer.lr_warmup_iters=1",
                                "optimizer.lr_decay_iters=3",
                                "parallel.pipeline_model_parallel_size=2"};
  if (moe)
    for (const char* s :
         {"model.add_bias_linear=false", "model.num_experts=4", "model.moe_ffn_hidden_size=12",
          "model.moe_router_topk=2", "model.moe_aux_loss_coeff=[0.1]", "model.moe_layer_freq=[1,0,1,1]"})
      o.push_back(s);
  o.insert(o.end(), extra.begin(), extra.end());
  StrataConfig cfg = StrataConfig::from_yaml_text("optimizer:\n  lr: 1.0e-2\ndata:\n  mock_data: true\n", o, "pp.yaml");
  return cfg.validate(2);
}

void check_recompute_matches(const std::vector<std::string>& layout) {
  for (bool moe : {false, true}) {
    INFO((moe ? "GPT+MoE" : "GPT"));
    const ResolvedConfig base_cfg = pp_config(moe, layout);
    const ParallelGroups groups = build_parallel_groups(*base_cfg.parallel, mpitest::world_comm());
    const mpitest::LayoutRun base = mpitest::train_layout(base_cfg, groups, kVocab);
    REQUIRE(base.losses.size() == 3);
    std::vector<std::vector<std::string>> modes = {
        {"model.recompute_granularity=full", "model.recompute_method=uniform", "model.recompute_num_layers=1"},
        {"model.recompute_granularity=full", "model.recompute_method=uniform", "model.recompute_num_layers=2"},
        {"model.recompute_granularity=full", "model.recompute_method=block", "model.recompute_num_layers=1"},
        {"model.recompute_granularity=selective", "model.recompute_modules=[mlp]"}};
    if (moe) modes.push_back({"model.recompute_granularity=selective", "model.recompute_modules=[mlp,moe]"});
    for (auto m : modes) {
      INFO(m.back() << " " << m.front());
      m.insert(m.end(), layout.begin(), layout.end());
      const mpitest::LayoutRun got = mpitest::train_layout(pp_config(moe, m), groups, kVocab);
      CHECK(got.losses == base.losses);  // bitwise
      CHECK(got.grad_norms == base.grad_norms);
      REQUIRE(got.grads.size() == base.grads.size());
      for (const auto& [name, g] : base.grads) {
        INFO(name);
        CHECK(mpitest::same_bits(got.grads.at(name), g));
      }
    }
  }
}

}  // namespace

TEST_CASE("pipeline recompute: PP2 1F1B, full and selective recompute are bit-identical", "[pipeline]") {
  check_recompute_matches({});
}

TEST_CASE("pipeline recompute: PP2 x VPP2 (interleaved), full and selective recompute are bit-identical",
          "[pipeline]") {
  check_recompute_matches({"parallel.virtual_pipeline_model_parallel_size=2"});
}

}  // namespace strata
