// Megatron-Core's own checkpoints resumed under other layouts than the single rank that wrote them
// (ctest mpi_megatron_ckpt_np2, tag [megatron_ckpt2]): each fixture of tests/fixtures/megatron_ckpt
// loaded at TP2 (+ sequence parallelism, the vocabulary padded to the same 128 rows), PP2, DP2 with the distributed optimizer, and EP2 for the
// MoE, must give Megatron's check loss and its continued losses (tests/unit/megatron_fixture_support.h).
#include <catch2/catch.hpp>

#include "megatron_fixture_support.h"

using namespace strata;
using namespace strata::test;

// Megatron pads the vocabulary to a multiple of make_vocab_size_divisible_by · tp: at TP2 the
// fixtures' 128 rows (128 · 1) need 64 · 2.
static const std::string kSameVocabPadding = "model.make_vocab_size_divisible_by=64";

TEST_CASE("Megatron torch_dist checkpoints resume under TP2, PP2 and DP2", "[megatron_ckpt2]") {
  const std::vector<std::vector<std::string>> layouts = {
      {"parallel.tensor_model_parallel_size=2", "parallel.sequence_parallel=true", kSameVocabPadding},
      {"parallel.pipeline_model_parallel_size=2"},
      {"parallel.use_distributed_optimizer=true"}};
  for (const auto& [c, variant] : std::vector<std::pair<std::string, std::string>>{
           {"llama", "torch_dist_distopt"}, {"llama", "torch_dist"}, {"gpt2", "torch_dist_distopt"},
           {"mtp", "torch_dist_distopt"}})
    for (const auto& layout : layouts) {
      CAPTURE(c, variant, layout);
      check_against_megatron(c, variant, resume_megatron_fixture(c, variant, layout, 2, 2));
    }
}

TEST_CASE("a Megatron MoE checkpoint resumes under EP2 and TP2", "[megatron_ckpt2]") {
  for (const auto& layout : std::vector<std::vector<std::string>>{
           {"parallel.expert_model_parallel_size=2"},
           {"parallel.tensor_model_parallel_size=2", "parallel.sequence_parallel=true", kSameVocabPadding}}) {
    CAPTURE(layout);
    check_against_megatron("moe", "torch_dist_distopt", resume_megatron_fixture("moe", "torch_dist_distopt", layout, 2, 2));
  }
}
