// ProcessGroup construction (parallel/process_group.h).
#include "parallel/process_group.h"

#include <algorithm>

#include "core/error.h"

namespace strata {

ProcessGroup::ProcessGroup(std::string name, std::vector<int> ranks, int my_rank)
    : name_(std::move(name)), ranks_(std::move(ranks)) {
  auto it = std::find(ranks_.begin(), ranks_.end(), my_rank);
  STRATA_INTERNAL_ASSERT(it != ranks_.end(), "rank ", my_rank, " is not in group ", name_);
  index_ = static_cast<int>(it - ranks_.begin());
}

}  // namespace strata
