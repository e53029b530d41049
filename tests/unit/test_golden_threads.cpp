// End to end, the same-machine promise of docs/reproducibility.md: golden cases (GPT f32 with
// dropout, GPT bf16, Mixtral-style MoE, and a hybrid Mamba/attention/MLP/MoE stack) trained in
// this process with 1, 2 and 3 OpenMP threads give bit-identical losses and num-zeros at every
// step. CI runs it under a second BLAS kernel and ISA path as well (scripts/test.sh).
#include <omp.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "strata_source_dir.h"
#include "test_helpers.h"
#include "training/golden/golden_case.h"
#include "training/golden/golden_values.h"

using namespace strata;
namespace fs = std::filesystem;

namespace {

fs::path scratch() {
  const fs::path p = fs::temp_directory_path() / ("strata_test_golden_threads_" + std::to_string(::getpid()));
  fs::create_directories(p);
  return p;
}

// A hybrid M*-E stack (Mamba2, attention, MLP, MoE) on one rank: the SSD scan, the conv1d and
// the grouped experts in one model.
std::string hybrid_case_dir() {
  const fs::path dir = scratch() / "hybrid_case";
  fs::create_directories(dir);
  std::ofstream(dir / "model_config.yaml")
      << "TEST_TYPE: regular\nMODE: pretraining\nMETRICS: [lm loss, load_balancing_loss, num-zeros]\n"
         "model:\n  hybrid_layer_pattern: \"M*-E\"\n  hidden_size: 64\n  num_attention_heads: 4\n"
         "  seq_length: 64\n  max_position_embeddings: 64\n  normalization: RMSNorm\n  swiglu: true\n"
         "  position_embedding_type: rope\n  add_bias_linear: false\n  hidden_dropout: 0.1\n"
         "  num_experts: 4\n  moe_ffn_hidden_size: 64\n  moe_router_topk: 2\n"
         "  moe_router_load_balancing_type: aux_loss\n  moe_aux_loss_coeff: 0.01\n"
         "  mamba_head_dim: 16\n  mamba_state_dim: 16\n  mamba_num_groups: 4\n  mamba_chunk_size: 16\n"
         "training:\n  micro_batch_size: 2\n  global_batch_size: 4\n  train_iters: 20\n  seed: 1234\n"
         "  deterministic: true\n  eval_interval: 1000\n  eval_iters: 1\n"
         "optimizer:\n  lr: 1.0e-3\n  lr_warmup_iters: 2\n  clip_grad: 1.0\n"
         "data:\n  mock_data: true\n  tokenizer_type: ByteLevelTokenizer\n"
         "logging:\n  log_interval: 1\n  log_num_zeros_in_grad: true\n  tensorboard_dir: ${TENSORBOARD_PATH}\n";
  return dir.string();
}

// Every value of the checked metrics (not timings or allocator bytes), in order.
std::vector<double> checked_values(const golden::GoldenCase& c, const golden::CaseRun& run) {
  std::vector<double> out;
  for (const std::string& m : c.metrics) {
    if (m == "iteration-time" || m.rfind("mem-", 0) == 0) continue;
    INFO(m);
    REQUIRE(run.values.count(m) == 1);
    for (const auto& [step, v] : run.values.at(m).values) out.push_back(v);
  }
  return out;
}

bool same_bits(const std::vector<double>& a, const std::vector<double>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(double)) == 0;
}

}  // namespace

TEST_CASE("golden threads: cases trained with 1, 2 and 3 OpenMP threads are bit-identical",
          "[golden][determinism]") {
  const fs::path functional = fs::path(STRATA_SOURCE_DIR) / "tests" / "functional";
  const std::vector<std::string> dirs = {
      (functional / "gpt" / "gpt_layernorm_gelu_learned_tied_dropout").string(),
      (functional / "gpt" / "gpt_rmsnorm_swiglu_rope_gqa_qknorm_untied_bf16").string(),
      (functional / "moe" / "moe_mixtral_softmax_top2_aux_zloss_capacity").string(), hybrid_case_dir()};
  const int saved = omp_get_max_threads();
  for (const std::string& dir : dirs) {
    const golden::GoldenCase c = golden::load_golden_case(dir);
    INFO(c.name);
    std::vector<double> first;
    for (int threads : {1, 2, 3}) {
      INFO(threads << " threads");
      omp_set_num_threads(threads);
      golden::RunOptions o;
      o.work_dir = (scratch() / (c.name + "_" + std::to_string(threads))).string();
      const golden::CaseRun run = golden::run_golden_case(c, o);
      const std::vector<double> values = checked_values(c, run);
      CHECK(values.size() >= 40);
      if (threads == 1)
        first = values;
      else
        CHECK(same_bits(values, first));
    }
  }
  omp_set_num_threads(saved);
  fs::remove_all(scratch());
}
