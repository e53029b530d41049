// The model section is resolved before it reaches the code that needs it resolved
// (models/config/model_config.h ResolvedModelConfig): the section as written does not convert to the
// resolved type at compile time, only the resolver's explicit construction makes one, and that
// construction checks the section's rules (config::ConfigError naming the field).
#include <catch2/catch.hpp>

#include <type_traits>

#include "models/config/model_config.h"

using namespace strata;

// A ModelConfig cannot be passed where a ResolvedModelConfig is needed: no implicit conversion.
static_assert(!std::is_convertible_v<ModelConfig, ResolvedModelConfig>);
static_assert(!std::is_convertible_v<const ModelConfig&, const ResolvedModelConfig&>);
static_assert(!std::is_default_constructible_v<ResolvedModelConfig>);

TEST_CASE("config: a resolved model section exists only through its resolution that checks the rules",
          "[config]") {
  ModelConfig raw;
  raw.ffn_hidden_size.reset();
  const ResolvedModelConfig resolved(raw);
  CHECK(resolved.ffn() == default_ffn_hidden_size(raw.hidden_size, raw.swiglu));
  raw.apply_residual_connection_post_layernorm = true;
  CHECK_THROWS_AS(ResolvedModelConfig(raw), config::ConfigError);
}
