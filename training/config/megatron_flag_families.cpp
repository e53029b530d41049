// Family rules of the Megatron flag table, arities from Megatron's argument list (see
// megatron_flag_families.h).
#include "training/config/megatron_flag_families.h"

#include "core/error.h"
#include "training/config/megatron_arguments.h"

namespace strata::megatron_flags {

namespace {
config::FlagArity arity_of(const char* flag) {
  const MegatronArgument* a = find_megatron_argument(flag);
  STRATA_INTERNAL_ASSERT(a, "the Megatron flag table names ", flag, ", which Megatron's argument list lacks");
  return a->arity;
}
}  // namespace

Rules refused(const std::string& capability, std::initializer_list<const char*> flags) {
  Rules out;
  for (const char* f : flags) out.push_back(config::unsupported_flag(f, arity_of(f), capability));
  return out;
}

Rules without_effect(const std::string& what, std::initializer_list<const char*> flags) {
  Rules out;
  for (const char* f : flags) out.push_back(config::no_effect_flag(f, arity_of(f), what));
  return out;
}

config::MegatronFlagRule accepted_values(const char* flag, const std::string& what, std::vector<std::string> values) {
  return config::no_effect_flag(flag, arity_of(flag), what, std::move(values));
}

void append(Rules& rules, Rules more) {
  rules.insert(rules.end(), std::make_move_iterator(more.begin()), std::make_move_iterator(more.end()));
}

}  // namespace strata::megatron_flags
