// Selective mHC recompute ('mhc' in recompute_modules, model.mhc_recompute_layer_num;
// models/blocks/mhc_recompute.h): the group layout, bit-identical losses and gradients to no
// recompute in f32 with dropout 0.1 for GPT, GPT+MoE and a hybrid M*E- stack (two micro-batches
// whose saved states live across each other's passes, as under a pipeline schedule), the peak
// memory it frees against strata plan's estimate, and the observations firing once.
// Reference: Megatron-LM dev tests/unit_tests/transformer/test_hyper_connection_recompute.py.
#include <cmath>
#include <cstdio>
#include <map>

#include "core/allocator.h"
#include "core/observe.h"
#include "models/blocks/mhc_recompute.h"
#include "models/gpt/gpt_model.h"
#include "model_probes.h"
#include "test_helpers.h"
#include "trainer_test_support.h"
#include "training/planning/memory_plan.h"
#include "training/config/model_factory.h"

using namespace strata;
using namespace strata::test;

namespace {
constexpr int64_t kVocab = 50;

ResolvedConfig mhc_config(bool moe, const std::vector<std::string>& extra) {
  std::vector<std::string> o = {"model.num_layers=3",          "model.hidden_size=16",
                                "model.num_attention_heads=4", "model.vocab_size=50",
                                "model.hidden_dropout=0.1",    "model.attention_dropout=0.1",
                                "model.make_vocab_size_divisible_by=8", "training.train_iters=3",
                                "model.enable_hyper_connections=true",  "model.num_residual_streams=3",
                                "model.mhc_sinkhorn_iterations=4"};
  if (moe)
    for (const char* s : {"model.add_bias_linear=false", "model.num_experts=4", "model.moe_ffn_hidden_size=12",
                          "model.moe_router_topk=2", "model.moe_aux_loss_coeff=[0.1]", "model.moe_layer_freq=[1,0,1]"})
      o.push_back(s);
  o.insert(o.end(), extra.begin(), extra.end());
  return tiny_config(o);
}

std::vector<std::string> mhc_rc(const char* layer_num, const char* modules = "[mhc]") {
  std::vector<std::string> o = {"model.recompute_granularity=selective",
                                std::string("model.recompute_modules=") + modules};
  if (layer_num) o.push_back(std::string("model.mhc_recompute_layer_num=") + layer_num);
  return o;
}

using Pass = test::TwoMicroBatchPass;
Pass two_micro_batches(const ResolvedConfig& cfg) { return test::two_micro_batch_pass(cfg, kVocab); }

int64_t peak_bytes(const ResolvedConfig& cfg) { return test::peak_training_bytes(cfg, kVocab); }

// For groups of 1 and 2 layers of the model `size` describes: the measured peak drop of selective
// mhc recompute is positive and strata plan's estimate is within 15 % of it; returns (peak
// without, plan without) for the caller's further checks. `what` labels the printed line.
struct RecomputeBaseline {
  int64_t measured_none, planned_none;
};
int64_t planned_activations(const ResolvedConfig& c) {
  return plan_layout(c).stages.at(0).memory.activations_configured;
}
RecomputeBaseline check_mhc_recompute_drops(const std::string& what, const std::vector<std::string>& size) {
  auto cfg = [&](std::vector<std::string> o) {
    o.insert(o.begin(), size.begin(), size.end());
    return mhc_config(false, o);
  };
  const ResolvedConfig none = cfg({});
  const RecomputeBaseline base{peak_bytes(none), planned_activations(none)};
  for (const char* k : {"1", "2"}) {
    const ResolvedConfig c = cfg(mhc_rc(k));
    const int64_t peak = peak_bytes(c);
    const double measured_drop = static_cast<double>(base.measured_none - peak);
    const double planned_drop = static_cast<double>(base.planned_none - planned_activations(c));
    INFO(what << ", mhc_recompute_layer_num " << k << ": measured drop " << measured_drop << " B, planned "
              << planned_drop);
    std::printf("  %s mhc recompute, groups of %s: peak %lld B (none %lld B): measured drop %.0f B, planned %.0f B\n",
                what.c_str(), k, (long long)peak, (long long)base.measured_none, measured_drop, planned_drop);
    CHECK(measured_drop > 0);
    CHECK(std::abs(planned_drop - measured_drop) <= 0.15 * measured_drop);
  }
  return base;
}
}  // namespace

TEST_CASE("mhc recompute: groups of mhc_recompute_layer_num local layers (null: the whole block)",
          "[recompute][mhc_recompute]") {
  auto groups = [](const std::vector<std::string>& o, size_t n) {
    std::vector<std::pair<size_t, size_t>> out;
    for (const RecomputeChunk& c : mhc_recompute_groups(mhc_config(false, o).model, n).groups)
      out.emplace_back(c.begin, c.end);
    return out;
  };
  using G = std::vector<std::pair<size_t, size_t>>;
  CHECK(groups(mhc_rc(nullptr), 3) == G{{0, 3}});
  CHECK(groups(mhc_rc("1"), 3) == G{{0, 1}, {1, 2}, {2, 3}});
  CHECK(groups(mhc_rc("2"), 5) == G{{0, 2}, {2, 4}, {4, 5}});
  CHECK(groups({}, 3).empty());
  CHECK(groups({"model.recompute_granularity=full", "model.recompute_method=uniform", "model.recompute_num_layers=1",
                "model.mhc_recompute_layer_num=1"},
               3)
            .empty());
  const MhcRecomputeGroups g = mhc_recompute_groups(mhc_config(false, mhc_rc("2")).model, 5);
  CHECK(g.opens(2));
  CHECK(!g.opens(3));
  CHECK(g.closes(3));
  CHECK(g.closes(4));
  CHECK(g.group_begin(3) == 2);
}

TEST_CASE("mhc recompute: GPT and GPT+MoE are bit-identical to no recompute (f32, dropout 0.1)",
          "[recompute][mhc_recompute]") {
  for (bool moe : {false, true}) {
    INFO((moe ? "GPT+MoE mHC" : "GPT mHC"));
    const Pass ref = two_micro_batches(mhc_config(moe, {}));
    std::vector<std::vector<std::string>> modes = {mhc_rc(nullptr), mhc_rc("1"), mhc_rc("2"), mhc_rc("3")};
    if (moe) modes.push_back(mhc_rc("2", "[mhc,moe]"));
    for (const auto& m : modes) {
      INFO(m[1] << " " << (m.size() > 2 ? m[2] : "null"));
      const Pass got = two_micro_batches(mhc_config(moe, m));
      CHECK(got.losses == ref.losses);  // bitwise
      CHECK(got.grads == ref.grads);
    }
  }
}

TEST_CASE("mhc recompute: a hybrid M*E- stack (fast and delta path) is bit-identical", "[recompute][mhc_recompute]") {
  auto hybrid = [](const std::vector<std::string>& extra) {
    std::vector<std::string> o = {"model.hybrid_layer_pattern='M*E-'", "model.num_layers=4", "model.add_bias_linear=false",
                                  "model.num_experts=4", "model.moe_ffn_hidden_size=12", "model.moe_router_topk=2",
                                  "model.moe_aux_loss_coeff=[0.1]", "model.mamba_head_dim=8", "model.mamba_state_dim=4",
                                  "model.mamba_num_groups=2", "model.mamba_chunk_size=3",
                                  "model.position_embedding_type=rope", "model.num_residual_streams=2"};
    o.insert(o.end(), extra.begin(), extra.end());
    return mhc_config(false, o);
  };
  const Pass ref = two_micro_batches(hybrid({}));
  for (const auto& m : {mhc_rc(nullptr), mhc_rc("1"), mhc_rc("3"), mhc_rc("2", "[mhc,moe]")}) {
    INFO(m[1] << " " << (m.size() > 2 ? m[2] : "null"));
    const Pass got = two_micro_batches(hybrid(m));
    CHECK(got.losses == ref.losses);  // bitwise
    CHECK(got.grads == ref.grads);
  }
}

TEST_CASE("mhc recompute: the peak memory it frees, and strata plan's estimate within 15% of it",
          "[recompute][mhc_recompute][memory_plan]") {
  // One micro-batch in flight: its backward rebuilds the last group, so the drop is what the other
  // groups no longer keep (none with a single group).
  const std::vector<std::string> size = {"model.num_layers=4",          "model.hidden_size=128",
                                         "model.seq_length=16",         "model.max_position_embeddings=16",
                                         "model.num_attention_heads=2", "training.micro_batch_size=4",
                                         "training.global_batch_size=4", "model.num_residual_streams=4"};
  const RecomputeBaseline base = check_mhc_recompute_drops("GPT", size);
  std::vector<std::string> one = size;
  const std::vector<std::string> rc = mhc_rc(nullptr);
  one.insert(one.end(), rc.begin(), rc.end());
  const ResolvedConfig single = mhc_config(false, one);
  const double one_group = static_cast<double>(base.measured_none - peak_bytes(single));
  std::printf("  mhc recompute, one group: measured drop %.0f B, planned %lld B\n", one_group,
              (long long)(base.planned_none - planned_activations(single)));
}

TEST_CASE("mhc recompute: a hybrid stack's peak drop (fast and delta path) against strata plan",
          "[recompute][mhc_recompute][memory_plan]") {
  const std::vector<std::string> size = {"model.hybrid_layer_pattern='M*-M'", "model.num_layers=4",
                                         "model.hidden_size=64",        "model.seq_length=32",
                                         "model.max_position_embeddings=32", "model.num_attention_heads=2",
                                         "training.micro_batch_size=4", "training.global_batch_size=4",
                                         "model.num_residual_streams=4", "model.mamba_head_dim=16",
                                         "model.mamba_num_groups=2",    "model.mamba_state_dim=8",
                                         "model.mamba_chunk_size=8",    "model.position_embedding_type=rope"};
  check_mhc_recompute_drops("hybrid M*-M", size);
}

namespace {
std::map<std::string, int> observed(const ResolvedConfig& cfg) {
  return test::two_micro_batch_observations(cfg, kVocab);
}
}  // namespace

TEST_CASE("mhc recompute: every observation (incl. the mHC mappings) fires once per site and micro-batch",
          "[recompute][mhc_recompute]") {
  const std::map<std::string, int> ref = observed(mhc_config(false, {}));
  CHECK(ref.at("decoder.layers.1.mlp_hyper_connection/mhc_h_res") == 2);
  CHECK(ref.at("decoder.layers.0/residual_accumulator") == 2);
  CHECK(observed(mhc_config(false, mhc_rc(nullptr))) == ref);
  CHECK(observed(mhc_config(false, mhc_rc("1"))) == ref);
}
