// RankGrid: Megatron's rank layout. Every rank has coordinates in two orthogonal grids over the
// same world —
//   decoder grid, order tp-cp-ep-dp-pp with ep = 1 (Megatron-Core ≥ 0.8):
//       rank = tp_rank + tp·(cp_rank + cp·(dp_rank + dp·pp_rank))
//   expert grid, order tp-ep-dp-pp with the expert tensor-parallel size etp:
//       rank = etp_rank + etp·(ep_rank + ep·(edp_rank + edp·pp_rank))
// — and every group kind (tp, cp, dp, dp_cp, tp_cp, pp, mp = tp-pp, embedding, position_embedding,
// ep, expert_tp, expert_dp, tp_ep, tp_dp_cp) is the set of ranks that differ only in the masked coordinates
// (generate_masked_orthogonal_rank_groups). Both grids share the pp groups.
// Pure functions of the sizes: no communication, O(world × kinds) to build, so a 1024-rank layout
// is planned instantly. build_parallel_groups() turns the grid into ParallelGroups by splitting
// the world communicators.
// Reference: megatron/core/parallel_state.py (generate_masked_orthogonal_rank_groups,
// RankGenerator, default_embedding_ranks, default_position_embedding_ranks,
// initialize_model_parallel — the group build order).
#pragma once
#include <array>
#include <memory>
#include <optional>
#include <vector>

#include "parallel/communicator.h"
#include "parallel/parallel_config.h"
#include "parallel/process_group.h"

namespace strata {

// Megatron's generate_masked_orthogonal_rank_groups: `sizes` are the grid dimensions in order
// (fastest-varying first, their product = world_size); every group holds the ranks that share the
// unmasked coordinates, ordered by the masked coordinates (first dimension fastest); groups are
// ordered by the unmasked coordinates (first unmasked dimension fastest).
std::vector<std::vector<int>> masked_orthogonal_rank_groups(int world_size, const std::vector<int>& sizes,
                                                            const std::vector<bool>& mask);

enum class GroupKind {
  Tp,                 // decoder tp
  Cp,                 // decoder cp
  Dp,                 // decoder dp
  DpCp,               // dp × cp (gradient reduction, distributed optimizer)
  TpCp,               // tp × cp
  Pp,                 // pipeline
  Mp,                 // tp × pp (Megatron's model-parallel group; cp not included)
  Embedding,          // first + last rank of each pp group (one rank when pp = 1)
  PositionEmbedding,  // first rank of each pp group
  Ep,                 // expert grid: ep
  ExpertTp,           // expert grid: tp (size etp)
  ExpertDp,           // expert grid: dp
  TpEp,               // expert grid: tp × ep
  TpDpCp,             // decoder tp × cp × dp (everything but pp: MoE token counts, expert bias)
};
inline constexpr int kNumGroupKinds = 14;
const char* group_kind_name(GroupKind kind);  // "tp", "dp_cp", "expert_tp", … (ParallelGroups names)
// The fixed order in which build_parallel_groups() creates communicators (Megatron's
// initialize_model_parallel: dp_cp, dp, cp, mp, tp, pp with embedding and position embedding,
// tp_cp, ep, expert_tp, tp_ep, expert_dp; then tp_dp_cp, Megatron's
// get_tensor_and_data_parallel_group(with_context_parallel=True)).
const std::array<GroupKind, kNumGroupKinds>& group_build_order();

// One rank's coordinates in both grids.
struct RankCoordinates {
  int tp_rank = 0, cp_rank = 0, dp_rank = 0, pp_rank = 0;       // decoder grid
  int expert_tp_rank = 0, ep_rank = 0, expert_dp_rank = 0;      // expert grid (same pp_rank)
  bool is_first_stage() const { return pp_rank == 0; }
};

class RankGrid {
 public:
  // Sizes as in Megatron's initialize_model_parallel; etp defaults to tp. Throws (naming the
  // sizes) when world is not divisible by tp·cp·pp or by etp·ep·pp, or a size is not positive.
  RankGrid(int world_size, int tp, int cp, int pp, int ep = 1, std::optional<int> etp = std::nullopt);
  // From a finalized parallel config (world_size set).
  static RankGrid from_config(const ParallelConfig& p);

  int world_size() const { return world_; }
  int tp() const { return tp_; }
  int cp() const { return cp_; }
  int dp() const { return dp_; }
  int pp() const { return pp_; }
  int ep() const { return ep_; }
  int etp() const { return etp_; }
  int expert_dp() const { return edp_; }

  // Every group of `kind`, in Megatron's order (a group's index is its position here). The
  // embedding kinds have one group per pp group, and ranks off the first/last stage are in none.
  const std::vector<std::vector<int>>& groups(GroupKind kind) const { return groups_[index(kind)]; }
  // The index of the group of `kind` that holds `rank`, or -1 when it is in none (embedding kinds).
  int group_index(GroupKind kind, int rank) const;
  // The position of `rank` in that group, or -1.
  int position(GroupKind kind, int rank) const;
  // The group of `kind` that holds `rank` (an error when there is none).
  const std::vector<int>& group_of(GroupKind kind, int rank) const;
  RankCoordinates coordinates(int rank) const;
  bool is_last_stage(int rank) const { return coordinates(rank).pp_rank == pp_ - 1; }

 private:
  static int index(GroupKind k) { return static_cast<int>(k); }
  void check_rank(int rank) const;
  int world_, tp_, cp_, dp_, pp_, ep_, etp_, edp_;
  std::array<std::vector<std::vector<int>>, kNumGroupKinds> groups_;
  std::array<std::vector<int>, kNumGroupKinds> group_of_rank_;     // [kind][rank] → group index or -1
  std::array<std::vector<int>, kNumGroupKinds> position_of_rank_;  // [kind][rank] → position or -1
};

// Builds this rank's ParallelGroups from the parallel config (finalized; world_size must equal
// world_host->size()). For every kind in group_build_order() whose groups have more than one rank,
// splits world_host (and world_device when not null) with color = the index of this rank's group
// of that kind (-1 when in none) and key = its position — collective: every rank of the world
// calls this with the same config. Kinds whose groups all have one rank get communicator-free
// single groups. A world of one returns ParallelGroups::single_process() (world_host may be null).
// With parallel.hierarchical_context_parallel_sizes [A, B], the cp group is then split into
// cp_a2a (A consecutive cp ranks) and cp_p2p (the B cp ranks equal modulo A), collective over cp
// (Megatron's create_hierarchical_groups).
ParallelGroups build_parallel_groups(const ParallelConfig& p, std::shared_ptr<Communicator> world_host,
                                     std::shared_ptr<Communicator> world_device = nullptr);

// The groups rank `rank` of `grid` has, for a meta build (a model built on the meta device to be
// described, models/model_manifest.h): the ranks and positions build_parallel_groups gives it,
// every group a meta group (ProcessGroup::meta: it never communicates), built without MPI; a group
// kind this rank is in none of (the embedding kinds) is a meta group of this rank alone.
ParallelGroups meta_parallel_groups(const RankGrid& grid, int rank);

}  // namespace strata
