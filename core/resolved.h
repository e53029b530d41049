// Resolved<Section>: a config section after its resolution (its null defaults derived from other
// fields, every rule checked), read-only. The fields are read through `->` (`cfg.data->split`);
// nothing can write them. A Resolved<Section> is made only by a resolver that holds a
// ResolutionKey: StrataConfig::validate() (training/config/config.h) for every section, and
// ResolvedModelConfig (models/config/model_config.h), which resolves the model section on its own.
// So a section as written (the plain struct) cannot be passed where a resolved one is needed: the
// types differ and there is no conversion that way (a resolved section converts to the plain one) (tests/unit/test_config_resolution.cpp checks this at
// compile time). To change a resolved config, copy its fields (`*cfg.data`), edit the copy and
// resolve it again.
// Reference: Megatron-LM megatron/training/arguments.py (validate_args resolves the arguments once,
// before anything reads them).
#pragma once
#include <utility>

namespace strata {

struct StrataConfig;
class ResolvedModelConfig;

// Held by the resolvers only: its constructor is private.
class ResolutionKey {
  ResolutionKey() = default;
  friend struct StrataConfig;
  friend class ResolvedModelConfig;
};

template <class Section>
class Resolved {
 public:
  Resolved(ResolutionKey, Section section) : section_(std::move(section)) {}

  const Section* operator->() const noexcept { return &section_; }
  const Section& operator*() const noexcept { return section_; }
  // A resolved section is also a valid section as written (the way back is not open).
  operator const Section&() const noexcept { return section_; }

 private:
  Section section_;
};

}  // namespace strata
