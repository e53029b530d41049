// The model section is resolved before it reaches the code that needs it resolved
// (models/config/model_config.h ResolvedModelConfig): the section as written does not convert to the
// resolved type at compile time, only the resolver's explicit construction makes one, and that
// construction checks the section's rules (config::ConfigError naming the field).
// Every section likewise (core/resolved.h, training/config/config.h): a section as written neither
// converts to nor constructs its Resolved<Section>, no ResolvedConfig is made from a StrataConfig
// (only StrataConfig::validate() returns one), a resolved section's fields cannot be assigned, and
// the functions that need the resolved config (make_model, plan_layout) cannot be called with a
// StrataConfig. All checked at compile time.
#include <catch2/catch.hpp>

#include <cstdint>
#include <string>
#include <type_traits>
#include <utility>

#include "models/config/model_config.h"
#include "training/config/config.h"
#include "training/config/model_factory.h"
#include "training/planning/memory_plan.h"

using namespace strata;

// A ModelConfig cannot be passed where a ResolvedModelConfig is needed: no implicit conversion.
static_assert(!std::is_convertible_v<ModelConfig, ResolvedModelConfig>);
static_assert(!std::is_convertible_v<const ModelConfig&, const ResolvedModelConfig&>);
static_assert(!std::is_default_constructible_v<ResolvedModelConfig>);

namespace {

// A section as written is not its resolved type: it neither binds to a Resolved<Section> reference
// nor converts to or constructs one.
template <class Section>
constexpr bool plain_is_not_resolved =
    !std::is_convertible_v<const Section&, const Resolved<Section>&> &&
    !std::is_convertible_v<Section, Resolved<Section>> && !std::is_constructible_v<Resolved<Section>, Section> &&
    !std::is_constructible_v<Resolved<Section>, const Section&>;

// The section a Resolved<Section> holds, as `*` gives it (even from a non-const one), is read-only.
template <class Section>
constexpr bool section_is_read_only =
    !std::is_assignable_v<decltype(*std::declval<Resolved<Section>&>()), Section> &&
    !std::is_assignable_v<decltype(*std::declval<Resolved<Section>&>()), const Section&>;

// make_model and plan_layout as generic calls (an overload added for a StrataConfig would be seen).
constexpr auto make_model_with = [](const auto& cfg) -> decltype(make_model(cfg, std::declval<Device>())) {
  return make_model(cfg, Device::cpu());
};
constexpr auto plan_layout_with = [](const auto& cfg) -> decltype(plan_layout(cfg)) { return plan_layout(cfg); };

}  // namespace

static_assert(plain_is_not_resolved<ModelConfig>);
static_assert(plain_is_not_resolved<ParallelConfig>);
static_assert(plain_is_not_resolved<TrainingConfig>);
static_assert(plain_is_not_resolved<OptimizerConfig>);
static_assert(plain_is_not_resolved<DataConfig>);
static_assert(plain_is_not_resolved<CheckpointConfig>);
static_assert(plain_is_not_resolved<LoggingConfig>);
static_assert(plain_is_not_resolved<InferenceConfig>);

// Only a resolver holds the key a Resolved<Section> is constructed with.
static_assert(!std::is_default_constructible_v<ResolutionKey>);

// A ResolvedConfig comes from StrataConfig::validate() only.
static_assert(!std::is_constructible_v<ResolvedConfig, StrataConfig>);
static_assert(!std::is_constructible_v<ResolvedConfig, const StrataConfig&>);
static_assert(!std::is_convertible_v<const StrataConfig&, ResolvedConfig>);
static_assert(!std::is_default_constructible_v<ResolvedConfig>);
static_assert(std::is_same_v<decltype(std::declval<const StrataConfig&>().validate()), ResolvedConfig>);

// The resolved fields are read-only: each section as a whole, and one field of each (through `->`,
// even from a non-const Resolved).
static_assert(section_is_read_only<ModelConfig>);
static_assert(section_is_read_only<ParallelConfig>);
static_assert(section_is_read_only<TrainingConfig>);
static_assert(section_is_read_only<OptimizerConfig>);
static_assert(section_is_read_only<DataConfig>);
static_assert(section_is_read_only<CheckpointConfig>);
static_assert(section_is_read_only<LoggingConfig>);
static_assert(section_is_read_only<InferenceConfig>);
static_assert(!std::is_assignable_v<decltype((std::declval<ResolvedModelConfig&>()->hidden_size)), int64_t>);
static_assert(
    !std::is_assignable_v<decltype((std::declval<Resolved<ParallelConfig>&>()->tensor_model_parallel_size)), int64_t>);
static_assert(!std::is_assignable_v<decltype((std::declval<Resolved<TrainingConfig>&>()->seed)), int64_t>);
static_assert(!std::is_assignable_v<decltype((std::declval<Resolved<OptimizerConfig>&>()->lr)), double>);
static_assert(!std::is_assignable_v<decltype((std::declval<Resolved<DataConfig>&>()->mock_data)), bool>);
static_assert(!std::is_assignable_v<decltype((std::declval<Resolved<CheckpointConfig>&>()->save)), std::string>);
static_assert(!std::is_assignable_v<decltype((std::declval<Resolved<LoggingConfig>&>()->log_interval)), int64_t>);
static_assert(!std::is_assignable_v<decltype((std::declval<Resolved<InferenceConfig>&>()->top_p)), double>);
// … also as the members of a ResolvedConfig.
static_assert(!std::is_assignable_v<decltype((std::declval<ResolvedConfig&>().training->seed)), int64_t>);
static_assert(!std::is_assignable_v<decltype((std::declval<ResolvedConfig&>().model->num_layers)), int64_t>);
static_assert(!std::is_assignable_v<decltype((std::declval<ResolvedConfig&>().parallel)), Resolved<ParallelConfig>>);

// The model factory and the planner take the resolved config, not the one as written.
static_assert(std::is_invocable_v<decltype(make_model_with), const ResolvedConfig&>);
static_assert(!std::is_invocable_v<decltype(make_model_with), const StrataConfig&>);
static_assert(std::is_invocable_v<decltype(plan_layout_with), const ResolvedConfig&>);
static_assert(!std::is_invocable_v<decltype(plan_layout_with), const StrataConfig&>);

TEST_CASE("config: a resolved model section exists only through its resolution that checks the rules",
          "[config]") {
  ModelConfig raw;
  raw.ffn_hidden_size.reset();
  const ResolvedModelConfig resolved(raw);
  CHECK(resolved.ffn() == default_ffn_hidden_size(raw.hidden_size, raw.swiglu));
  raw.apply_residual_connection_post_layernorm = true;
  CHECK_THROWS_AS(ResolvedModelConfig(raw), config::ConfigError);
}
