// MoeRouterRef: an MoE router of a model chunk with its global layer number, as the layers, the
// stack and the model hand them to the trainer (training/moe_accounting.h).
// Reference: Megatron-Core transformer/moe/moe_utils.py (the routers a model's layers hold).
#pragma once
#include <cstdint>

namespace strata {

namespace layers::moe {
class TopKRouter;  // models/layers/moe/router.h
}

// An MoE router of a model chunk and its global layer number (0-based).
struct MoeRouterRef {
  int64_t layer = 0;
  layers::moe::TopKRouter* router = nullptr;
};

}  // namespace strata
