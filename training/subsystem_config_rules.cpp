// The one list of the config rules owned by subsystems above training/config (training/config/config.h
// subsystem_config_validators): StrataConfig::validate() runs them after the section rules, in this
// order. Listed here explicitly, not registered by static objects, so no rule can be dropped by the
// linker or lost by moving its file. A subsystem with a new rule adds one line here.
// Reference: megatron/training/arguments.py (validate_args checks these fields too).
#include "training/checkpointing/megatron/megatron_save_state.h"
#include "training/config/config.h"
#include "training/observability/tensor_dump_sites.h"
#include "training/observability/tensor_metrics/registry.h"

namespace strata {

const std::vector<NamedConfigValidator>& subsystem_config_validators() {
  static const std::vector<NamedConfigValidator> validators = {
      {"logging.tensor_dump_*", validate_tensor_dump},
      {"logging.tensor_metrics", tensor_metrics::validate_tensor_metrics},
      {"checkpoint.ckpt_format", validate_megatron_checkpoint_format},
  };
  return validators;
}

}  // namespace strata
