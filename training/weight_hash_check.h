// The weight-hash check across data-parallel replicas (Megatron's
// --check-weight-hash-across-dp-replicas-interval): every rank hashes each of its parameters (BLAKE2b of
// the value's bytes, 96 bits), the hashes are all-gathered over the replicas that must hold the same
// values (dense parameters over dp × cp, expert parameters over expert dp), and a rank whose hash
// differs from the group's rank 0 names the parameter. Every rank learns whether any rank found a
// difference, so all of them stop together.
// Reference: megatron/core/utils.py (check_param_hashes_across_dp_replicas, cross_check=True),
// megatron/training/training.py (train: before the loop and every interval). Megatron hashes with
// SHA-1 over dp only; Strata includes the cp ranks, which hold the same parameters too.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "core/parameter.h"
#include "parallel/process_group.h"

namespace strata {

// The names of this rank's parameters whose hash differs from the same parameter on rank 0 of its
// replica group (dense: groups.dp_cp; expert_parallel: groups.expert_dp). Collective over both groups.
std::vector<std::string> weight_hash_differences(const std::vector<Parameter*>& params, const ParallelGroups& groups);

// Runs weight_hash_differences and agrees over the world: returns normally when every rank's hashes
// match; else throws on every rank (the ranks with differences name their parameters).
void check_weight_hashes_across_replicas(const std::vector<Parameter*>& params, const ParallelGroups& groups,
                                         int64_t iteration);

}  // namespace strata
