// The helpers every block's layer loop shares (see block.h).
#include "models/blocks/block.h"

#include "core/error.h"

namespace strata {

void check_block_cache(const BlockRun& run, size_t layers, const char* what) {
  if (!run.cache) return;
  STRATA_CHECK(run.cache->layers.size() == layers, what, ": the generation cache has ", run.cache->layers.size(),
               " layers, the block ", layers);
}

}  // namespace strata
