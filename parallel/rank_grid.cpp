// Megatron's rank grid and the ParallelGroups built from it, over MPI/NCCL or as a meta build's
// (parallel/rank_grid.h).
// Reference: megatron/core/parallel_state.py (generate_masked_orthogonal_rank_groups,
// RankGenerator.get_ranks, default_embedding_ranks, initialize_model_parallel).
#include "parallel/rank_grid.h"

#include <algorithm>
#include <string>

#include "core/error.h"

namespace strata {

std::vector<std::vector<int>> masked_orthogonal_rank_groups(int world_size, const std::vector<int>& sizes,
                                                            const std::vector<bool>& mask) {
  STRATA_INTERNAL_ASSERT(sizes.size() == mask.size(), "one mask entry per grid dimension");
  // Stride of dimension i in the global rank: the product of the sizes before it.
  std::vector<int> masked_shape, masked_stride, unmasked_shape, unmasked_stride;
  int64_t stride = 1;
  for (size_t i = 0; i < sizes.size(); ++i) {
    STRATA_INTERNAL_ASSERT(sizes[i] > 0, "grid dimension ", i, " has size ", sizes[i]);
    (mask[i] ? masked_shape : unmasked_shape).push_back(sizes[i]);
    (mask[i] ? masked_stride : unmasked_stride).push_back(static_cast<int>(stride));
    stride *= sizes[i];
  }
  STRATA_INTERNAL_ASSERT(stride == world_size, "grid sizes multiply to ", stride, ", not the world size ", world_size);
  int group_size = 1;
  for (int s : masked_shape) group_size *= s;
  const int num_groups = world_size / group_size;

  // index = Σ idx[i]·prefix_product[i] decomposed, then re-composed with the global strides.
  auto compose = [](int index, const std::vector<int>& shape, const std::vector<int>& strides) {
    int rank = 0;
    for (size_t i = 0; i < shape.size(); ++i) {
      rank += (index % shape[i]) * strides[i];
      index /= shape[i];
    }
    return rank;
  };
  std::vector<std::vector<int>> groups(num_groups, std::vector<int>(group_size));
  for (int g = 0; g < num_groups; ++g) {
    const int base = compose(g, unmasked_shape, unmasked_stride);
    for (int r = 0; r < group_size; ++r) groups[g][r] = base + compose(r, masked_shape, masked_stride);
  }
  return groups;
}

const char* group_kind_name(GroupKind kind) {
  switch (kind) {
    case GroupKind::Tp: return "tp";
    case GroupKind::Cp: return "cp";
    case GroupKind::Dp: return "dp";
    case GroupKind::DpCp: return "dp_cp";
    case GroupKind::TpCp: return "tp_cp";
    case GroupKind::Pp: return "pp";
    case GroupKind::Mp: return "mp";
    case GroupKind::Embedding: return "embedding";
    case GroupKind::PositionEmbedding: return "position_embedding";
    case GroupKind::Ep: return "ep";
    case GroupKind::ExpertTp: return "expert_tp";
    case GroupKind::ExpertDp: return "expert_dp";
    case GroupKind::TpEp: return "tp_ep";
    case GroupKind::TpDpCp: return "tp_dp_cp";
  }
  return "?";
}

const std::array<GroupKind, kNumGroupKinds>& group_build_order() {
  static const std::array<GroupKind, kNumGroupKinds> order = {
      GroupKind::DpCp, GroupKind::Dp,        GroupKind::Cp,        GroupKind::Mp,
      GroupKind::Tp,   GroupKind::Pp,        GroupKind::Embedding, GroupKind::PositionEmbedding,
      GroupKind::TpCp, GroupKind::Ep,        GroupKind::ExpertTp,  GroupKind::TpEp,
      GroupKind::ExpertDp, GroupKind::TpDpCp};
  return order;
}

RankGrid::RankGrid(int world_size, int tp, int cp, int pp, int ep, std::optional<int> etp)
    : world_(world_size), tp_(tp), cp_(cp), pp_(pp), ep_(ep), etp_(etp.value_or(tp)) {
  STRATA_CHECK(world_ > 0 && tp_ > 0 && cp_ > 0 && pp_ > 0 && ep_ > 0 && etp_ > 0,
               "rank grid: sizes must be positive (world ", world_, ", tp ", tp_, ", cp ", cp_, ", pp ", pp_, ", ep ",
               ep_, ", etp ", etp_, ")");
  STRATA_CHECK(world_ % (tp_ * cp_ * pp_) == 0, "rank grid: world size ", world_, " is not divisible by tp (", tp_,
               ") x cp (", cp_, ") x pp (", pp_, ")");
  STRATA_CHECK(world_ % (etp_ * ep_ * pp_) == 0, "rank grid: world size ", world_,
               " is not divisible by expert tp (", etp_, ") x ep (", ep_, ") x pp (", pp_, ")");
  dp_ = world_ / (tp_ * cp_ * pp_);
  edp_ = world_ / (etp_ * ep_ * pp_);

  // Decoder grid tp-cp-dp-pp (ep = 1 drops out), expert grid tp-ep-dp-pp.
  const std::vector<int> dec{tp_, cp_, dp_, pp_}, exp{etp_, ep_, edp_, pp_};
  auto dec_groups = [&](bool t, bool c, bool d, bool p) { return masked_orthogonal_rank_groups(world_, dec, {t, c, d, p}); };
  auto exp_groups = [&](bool t, bool e, bool d, bool p) { return masked_orthogonal_rank_groups(world_, exp, {t, e, d, p}); };
  groups_[index(GroupKind::Tp)] = dec_groups(true, false, false, false);
  groups_[index(GroupKind::Cp)] = dec_groups(false, true, false, false);
  groups_[index(GroupKind::Dp)] = dec_groups(false, false, true, false);
  groups_[index(GroupKind::DpCp)] = dec_groups(false, true, true, false);
  groups_[index(GroupKind::TpCp)] = dec_groups(true, true, false, false);
  groups_[index(GroupKind::Pp)] = dec_groups(false, false, false, true);
  groups_[index(GroupKind::TpDpCp)] = dec_groups(true, true, true, false);
  groups_[index(GroupKind::Mp)] = dec_groups(true, false, false, true);
  groups_[index(GroupKind::Ep)] = exp_groups(false, true, false, false);
  groups_[index(GroupKind::ExpertTp)] = exp_groups(true, false, false, false);
  groups_[index(GroupKind::ExpertDp)] = exp_groups(false, false, true, false);
  groups_[index(GroupKind::TpEp)] = exp_groups(true, true, false, false);
  STRATA_INTERNAL_ASSERT(exp_groups(false, false, false, true) == groups_[index(GroupKind::Pp)],
                         "decoder and expert grids must share the pipeline groups");
  for (const auto& pp_ranks : groups_[index(GroupKind::Pp)]) {
    // default_embedding_ranks / default_position_embedding_ranks
    groups_[index(GroupKind::Embedding)].push_back(
        pp_ranks.size() == 1 ? std::vector<int>{pp_ranks.front()} : std::vector<int>{pp_ranks.front(), pp_ranks.back()});
    groups_[index(GroupKind::PositionEmbedding)].push_back({pp_ranks.front()});
  }

  for (int k = 0; k < kNumGroupKinds; ++k) {
    group_of_rank_[k].assign(world_, -1);
    position_of_rank_[k].assign(world_, -1);
    const auto& gs = groups_[k];
    for (size_t g = 0; g < gs.size(); ++g)
      for (size_t i = 0; i < gs[g].size(); ++i) {
        const int r = gs[g][i];
        STRATA_INTERNAL_ASSERT(r >= 0 && r < world_ && group_of_rank_[k][r] == -1, "rank ", r, " twice in ",
                               group_kind_name(static_cast<GroupKind>(k)), " groups");
        group_of_rank_[k][r] = static_cast<int>(g);
        position_of_rank_[k][r] = static_cast<int>(i);
      }
  }
}

RankGrid RankGrid::from_config(const ParallelConfig& p) {
  STRATA_INTERNAL_ASSERT(p.world_size.has_value(), "RankGrid::from_config before finalize_parallel_config()");
  auto i = [](int64_t v) { return static_cast<int>(v); };
  return RankGrid(i(*p.world_size), i(p.tensor_model_parallel_size), i(p.context_parallel_size),
                  i(p.pipeline_model_parallel_size), i(p.expert_model_parallel_size),
                  i(p.expert_tensor_parallel_size.value_or(p.tensor_model_parallel_size)));
}

void RankGrid::check_rank(int rank) const {
  STRATA_CHECK(rank >= 0 && rank < world_, "rank grid: rank ", rank, " is outside the world of ", world_);
}

int RankGrid::group_index(GroupKind kind, int rank) const {
  check_rank(rank);
  return group_of_rank_[index(kind)][rank];
}

int RankGrid::position(GroupKind kind, int rank) const {
  check_rank(rank);
  return position_of_rank_[index(kind)][rank];
}

const std::vector<int>& RankGrid::group_of(GroupKind kind, int rank) const {
  const int g = group_index(kind, rank);
  STRATA_CHECK(g >= 0, "rank grid: rank ", rank, " is in no ", group_kind_name(kind), " group");
  return groups_[index(kind)][g];
}

RankCoordinates RankGrid::coordinates(int rank) const {
  check_rank(rank);
  RankCoordinates c;
  c.tp_rank = rank % tp_;
  c.cp_rank = rank / tp_ % cp_;
  c.dp_rank = rank / (tp_ * cp_) % dp_;
  c.pp_rank = rank / (tp_ * cp_ * dp_);
  c.expert_tp_rank = rank % etp_;
  c.ep_rank = rank / etp_ % ep_;
  c.expert_dp_rank = rank / (etp_ * ep_) % edp_;
  return c;
}

namespace {

// The member of `groups` that holds the groups of `kind`.
ProcessGroup& group_slot(ParallelGroups& groups, GroupKind kind) {
  switch (kind) {
    case GroupKind::Tp: return groups.tp;
    case GroupKind::Cp: return groups.cp;
    case GroupKind::Dp: return groups.dp;
    case GroupKind::DpCp: return groups.dp_cp;
    case GroupKind::TpCp: return groups.tp_cp;
    case GroupKind::Pp: return groups.pp;
    case GroupKind::Mp: return groups.mp;
    case GroupKind::Embedding: return groups.embedding;
    case GroupKind::PositionEmbedding: return groups.position_embedding;
    case GroupKind::Ep: return groups.ep;
    case GroupKind::ExpertTp: return groups.expert_tp;
    case GroupKind::ExpertDp: return groups.expert_dp;
    case GroupKind::TpEp: return groups.tp_ep;
    case GroupKind::TpDpCp: return groups.tp_dp_cp;
  }
  STRATA_INTERNAL_ASSERT(false, "unknown group kind");
  return groups.tp;
}

ProcessGroup split_group(GroupKind kind, const RankGrid& grid, int rank, Communicator& host,
                                     Communicator* device, bool& member) {
  const int color = grid.group_index(kind, rank), key = grid.position(kind, rank);
  std::shared_ptr<Communicator> h = host.split(color, key);
  std::shared_ptr<Communicator> d = device ? device->split(color, key) : nullptr;
  member = color >= 0;
  if (!member) return ProcessGroup::single(group_kind_name(kind), rank);
  STRATA_INTERNAL_ASSERT(h != nullptr, "split of the ", group_kind_name(kind), " group returned no communicator");
  return ProcessGroup(group_kind_name(kind), grid.group_of(kind, rank), rank, std::move(h), std::move(d));
}

// The cp group's sub-group of the cp ranks i with level_color(i) == level_color(this rank), split
// from the cp communicators (collective over cp), ordered by cp rank.
ProcessGroup split_cp(const ProcessGroup& cp, const char* name, int global_rank, int (*level_color)(int, int),
                      int inner) {
  const int color = level_color(cp.rank(), inner);
  std::vector<int> ranks;
  for (int i = 0; i < cp.size(); ++i)
    if (level_color(i, inner) == color) ranks.push_back(cp.ranks()[static_cast<size_t>(i)]);
  if (ranks.size() == 1) return ProcessGroup::single(name, global_rank);  // the same on every rank: no split
  std::shared_ptr<Communicator> h = cp.host_comm()->split(color, cp.rank());
  std::shared_ptr<Communicator> d = cp.device_comm() ? cp.device_comm()->split(color, cp.rank()) : nullptr;
  return ProcessGroup(name, ranks, global_rank, std::move(h), std::move(d));
}

// Megatron's create_hierarchical_groups for sizes [A, B] over one cp group: level 0 (a2a) groups
// of A consecutive cp ranks, level 1 (p2p) groups of the cp ranks equal modulo A.
void build_hierarchical_cp(ParallelGroups& out, int inner) {
  out.cp_a2a = split_cp(out.cp, "cp_a2a", out.global_rank, [](int i, int a) { return i / a; }, inner);
  out.cp_p2p = split_cp(out.cp, "cp_p2p", out.global_rank, [](int i, int a) { return i % a; }, inner);
}

}  // namespace

ParallelGroups build_parallel_groups(const ParallelConfig& p, std::shared_ptr<Communicator> world_host,
                                     std::shared_ptr<Communicator> world_device) {
  const RankGrid grid = RankGrid::from_config(p);
  if (grid.world_size() == 1) return ParallelGroups::single_process();
  STRATA_CHECK(world_host != nullptr, "build_parallel_groups: a world of ", grid.world_size(),
               " ranks needs a host communicator");
  STRATA_CHECK(world_host->size() == grid.world_size(), "build_parallel_groups: parallel.world_size is ",
               grid.world_size(), " but the host communicator has ", world_host->size(), " ranks");
  STRATA_CHECK(world_device == nullptr || world_device->size() == grid.world_size(),
               "build_parallel_groups: the device communicator has ", world_device ? world_device->size() : 0,
               " ranks, parallel.world_size is ", grid.world_size());
  const int rank = world_host->rank();
  STRATA_INTERNAL_ASSERT(world_device == nullptr || world_device->rank() == rank,
                         "host and device world communicators disagree on this rank");

  ParallelGroups out;
  out.world_size = grid.world_size();
  out.global_rank = rank;
  std::vector<int> all(grid.world_size());
  for (int r = 0; r < grid.world_size(); ++r) all[r] = r;
  out.world = ProcessGroup("world", all, rank, world_host, world_device);

  for (GroupKind k : group_build_order()) {
    bool member = grid.group_index(k, rank) >= 0;
    size_t largest = 0;
    for (const auto& g : grid.groups(k)) largest = std::max(largest, g.size());
    if (largest > 1)
      group_slot(out, k) = split_group(k, grid, rank, *world_host, world_device.get(), member);
    else
      group_slot(out, k) = ProcessGroup::single(group_kind_name(k), rank);
    if (k == GroupKind::Embedding) out.in_embedding_group = member;
    if (k == GroupKind::PositionEmbedding) out.in_position_embedding_group = member;
  }
  if (p.hierarchical_context_parallel_sizes.size() == 2 && out.cp.size() > 1)
    build_hierarchical_cp(out, static_cast<int>(p.hierarchical_context_parallel_sizes[0]));
  return out;
}

ParallelGroups meta_parallel_groups(const RankGrid& grid, int rank) {
  ParallelGroups out;
  out.world_size = grid.world_size();
  out.global_rank = rank;
  std::vector<int> all(grid.world_size());
  for (int r = 0; r < grid.world_size(); ++r) all[r] = r;
  out.world = ProcessGroup::meta("world", all, rank);
  for (GroupKind k : group_build_order()) {
    const bool member = grid.group_index(k, rank) >= 0;
    const std::vector<int> ranks = member ? grid.group_of(k, rank) : std::vector<int>{rank};
    group_slot(out, k) = ProcessGroup::meta(group_kind_name(k), ranks, rank);
    if (k == GroupKind::Embedding) out.in_embedding_group = member;
    if (k == GroupKind::PositionEmbedding) out.in_position_embedding_group = member;
  }
  return out;
}

}  // namespace strata
