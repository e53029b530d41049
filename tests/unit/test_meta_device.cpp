// The meta device (core/device.h, core/tensor.h) and the meta build's process groups
// (parallel/rank_grid.h meta_parallel_groups, parallel/meta_communicator.cpp): meta tensors have a
// shape and a dtype and allocate nothing, their views work; a meta build's groups have the ranks
// and positions of the layout; every model family builds on the meta device as any tp rank
// without allocating. The hidden [.meta_abort] cases touch a meta tensor's data or communicate
// over a meta group: ctest's meta_*_aborts entries (tests/CMakeLists.txt) check that each ends in
// an internal error naming the meta device or the meta build.
// Reference: PyTorch's meta tensors (torch.device("meta")).
#include <catch2/catch.hpp>

#include "core/allocator.h"
#include "kernels/elementwise.h"
#include "models/gpt/gpt_model.h"
#include "models/hybrid/hybrid_model.h"
#include "parallel/rank_grid.h"
#include "trainer_test_support.h"

namespace strata {
namespace {

// CPU allocations made while `f` runs: {calls, bytes still held}.
template <class F>
std::pair<int64_t, int64_t> cpu_allocations_during(F&& f) {
  const MemoryStats before = memory_stats(Device::cpu());
  f();
  const MemoryStats after = memory_stats(Device::cpu());
  return {after.num_allocs - before.num_allocs, after.allocated_bytes - before.allocated_bytes};
}

}  // namespace

TEST_CASE("meta device: tensors have a shape and a dtype and allocate nothing", "[meta]") {
  CHECK(Device::meta().str() == "meta");
  CHECK(Device::meta() == Device::meta());
  CHECK_FALSE(Device::meta() == Device::cpu());
  const auto allocated = cpu_allocations_during([] {
    const Tensor huge = Tensor::zeros({int64_t{1} << 20, int64_t{1} << 20}, DType::BF16, Device::meta());  // 2 TiB
    CHECK(huge.defined());
    CHECK(huge.device().is_meta());
    CHECK(huge.nbytes() == (size_t{1} << 41));
    CHECK(huge.storage()->data() == nullptr);
    const Tensor part = huge.narrow(0, 5, 10).select(1, 3);
    CHECK(part.shape() == Shape{10});
    CHECK(part.device().is_meta());
    const Tensor full = Tensor::full({3, 4}, 2.0, DType::F32, Device::meta());
    CHECK(full.reshape({2, 6}).unsqueeze(0).shape() == Shape{1, 2, 6});
    CHECK(full.to_string() == "Tensor([3, 4], f32, meta)");
    CHECK(Tensor::empty({7}, DType::I64, Device::meta()).dtype() == DType::I64);
  });
  CHECK(allocated == std::make_pair(int64_t{0}, int64_t{0}));
  CHECK(memory_stats(Device::meta()).num_allocs == 0);
}

TEST_CASE("meta device: a meta build's groups have the layout's ranks and positions", "[meta]") {
  const RankGrid grid(16, 2, 2, 2, 2, 1);  // tp 2, cp 2, pp 2 (dp 2); ep 2, expert tp 1 (expert dp 4)
  for (int rank : {0, 5, 11, 15}) {
    INFO("rank " << rank);
    const ParallelGroups g = meta_parallel_groups(grid, rank);
    CHECK(g.world_size == 16);
    CHECK(g.global_rank == rank);
    CHECK(g.world.size() == 16);
    const std::pair<GroupKind, const ProcessGroup*> kinds[] = {
        {GroupKind::Tp, &g.tp},         {GroupKind::Cp, &g.cp},         {GroupKind::Dp, &g.dp},
        {GroupKind::DpCp, &g.dp_cp},    {GroupKind::TpCp, &g.tp_cp},    {GroupKind::Pp, &g.pp},
        {GroupKind::Mp, &g.mp},         {GroupKind::Ep, &g.ep},         {GroupKind::ExpertTp, &g.expert_tp},
        {GroupKind::ExpertDp, &g.expert_dp}, {GroupKind::TpEp, &g.tp_ep},
        {GroupKind::TpDpCp, &g.tp_dp_cp}};
    for (const auto& [kind, group] : kinds) {
      INFO(group_kind_name(kind));
      CHECK(group->name() == group_kind_name(kind));
      CHECK(group->ranks() == grid.group_of(kind, rank));
      CHECK(group->rank() == grid.position(kind, rank));
      CHECK(std::string(group->host_comm()->backend()) == "meta");
      CHECK(group->host_comm()->size() == group->size());
    }
    // The embedding group: the first and last stage; a rank off them is in none (a group of itself).
    CHECK(g.in_embedding_group == (grid.coordinates(rank).pp_rank == 0 || grid.is_last_stage(rank)));
    CHECK(g.in_position_embedding_group == (grid.coordinates(rank).pp_rank == 0));
  }
}

TEST_CASE("meta device: every model family builds on it as any tp rank without allocating", "[meta]") {
  const std::vector<std::vector<std::string>> families = {
      {"model.num_layers=2", "model.num_experts=4", "model.moe_ffn_hidden_size=8", "model.mtp_num_layers=1",
       "model.qk_layernorm=true", "model.untie_embeddings_and_output_weights=true",
       "model.moe_shared_expert_intermediate_size=8"},
      {"model.num_layers=2", "model.add_bias_linear=true", "model.normalization=LayerNorm", "model.swiglu=true",
       "model.ffn_hidden_size=32", "model.position_embedding_type=learned_absolute"},
      {"model.hybrid_layer_pattern='M*-E/*E'", "model.num_experts=4", "model.moe_ffn_hidden_size=8",
       "model.enable_hyper_connections=true", "model.num_residual_streams=2", "model.mamba_head_dim=8",
       "model.mamba_num_groups=2", "model.mamba_state_dim=4", "model.mamba_chunk_size=4"},
  };
  for (const std::vector<std::string>& family : families) {
    std::vector<std::string> o = {"model.hidden_size=16", "model.num_attention_heads=4", "model.vocab_size=50",
                                  "model.position_embedding_type=rope", "model.add_bias_linear=false"};
    o.insert(o.end(), family.begin(), family.end());
    const ResolvedConfig cfg = test::tiny_config(o);
    for (int rank : {0, 1}) {
      INFO(family.front() << ", tp rank " << rank << " of 2");
      const ParallelGroups groups = meta_parallel_groups(RankGrid(2, 2, 1, 1, 1, 2), rank);
      LanguageModelOptions opt;
      opt.dtype = DType::BF16, opt.device = Device::meta(), opt.sequence_parallel = true;
      std::unique_ptr<LanguageModel> model;
      const auto allocated = cpu_allocations_during([&] {
        if (cfg.model->is_hybrid()) model = std::make_unique<HybridModel>(cfg.model, opt, groups);
        else model = std::make_unique<GPTModel>(cfg.model, GPTModelOptions{opt, ""}, groups);
      });
      CHECK(allocated == std::make_pair(int64_t{0}, int64_t{0}));
      for (const Parameter* p : model->parameters()) {
        INFO(p->name);
        CHECK(p->value.device().is_meta());
        CHECK(p->main_grad.device().is_meta());
        CHECK(p->value.numel() * (p->tensor_parallel ? 2 : 1) == p->global_shape.numel());
      }
    }
  }
}

// ---- Failure paths (ctest meta_data_aborts, meta_kernel_aborts, meta_collective_aborts) ----

TEST_CASE("meta device: reading a meta tensor's values aborts", "[.meta_abort_data]") {
  (void)Tensor::zeros({2, 3}, DType::F32, Device::meta()).to_vector();
}

TEST_CASE("meta device: a kernel on meta tensors aborts", "[.meta_abort_kernel]") {
  const Tensor a = Tensor::zeros({4}, DType::F32, Device::meta());
  kernels::add(a, a, a);
}

TEST_CASE("meta device: a collective over a meta build's group aborts", "[.meta_abort_collective]") {
  const ParallelGroups groups = meta_parallel_groups(RankGrid(2, 2, 1, 1, 1, 2), 1);
  Tensor t = Tensor::zeros({4}, DType::F32, Device::cpu());
  groups.tp.all_reduce(t);
}

}  // namespace strata
