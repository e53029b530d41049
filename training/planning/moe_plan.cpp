// MoE all-to-all bytes of a layout (see moe_plan.h).
// Reference: megatron/core/transformer/moe/token_dispatcher.py.
#include "training/planning/moe_plan.h"

#include "core/error.h"

namespace strata {

int64_t moe_all_to_all_bytes(const ResolvedModelConfig& m, int64_t micro_batch_size, int64_t tp, int64_t cp,
                             bool sequence_parallel, int64_t ep, int64_t element_bytes) {
  if (!m->num_experts || ep <= 1) return 0;
  const int64_t tokens = micro_batch_size * (m->seq_length / cp) / (sequence_parallel ? tp : 1);
  const int64_t width = m->moe_latent_size.value_or(m->hidden_size);  // the dispatched rows' width
  return 4 * tokens * m->moe_router_topk * width * element_bytes * (ep - 1) / ep;
}

int64_t moe_layers_in(const ResolvedModelConfig& m, int64_t first, int64_t count) {
  int64_t n = 0;
  if (!m->num_experts) return 0;
  for (int64_t i = first; i < first + count; ++i) n += m.is_moe_layer(i) ? 1 : 0;
  return n;
}

}  // namespace strata
