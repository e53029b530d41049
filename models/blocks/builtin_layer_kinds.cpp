// The built-in layer kinds, registered explicitly (no static registration objects a linker could
// drop): the list a new kind joins. Order: the hybrid pattern's symbols as messages list them.
// Reference: docs/architecture.md ("Adding a layer kind").
#include "models/blocks/mamba_kind.h"
#include "models/blocks/transformer_kinds.h"

namespace strata {

void register_builtin_layer_kinds(LayerKindRegistry& registry) {
  register_mamba_kind(registry);         // M
  register_transformer_kinds(registry);  // * - E T
}

}  // namespace strata
