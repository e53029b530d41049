// The Mamba-2 mixer's config fields and rules (models/config/mamba_config.h).
// Reference: megatron/core/transformer/transformer_config.py, megatron/core/ssm/mamba_mixer.py.
#include "models/config/mamba_config.h"

#include <string>

#include "models/config/model_config.h"

namespace strata {

using config::ConfigError;
using config::positive;

void add_mamba_fields(config::SectionFields<ModelConfig>& f) {
  using M = ModelConfig;
  f.add("mamba_head_dim", &M::mamba_head_dim, "Mamba-2 head dimension P (hybrid models' M layers).")
      .check(positive())
      .architecture_defining();
  f.add("mamba_state_dim", &M::mamba_state_dim, "Mamba-2 state dimension N (d_state).").check(positive())
      .architecture_defining();
  f.add("mamba_num_groups", &M::mamba_num_groups,
        "Mamba-2 groups G of the B and C projections (each shared by num_heads / G heads).")
      .check(positive())
      .architecture_defining();
  f.add("mamba_num_heads", &M::mamba_num_heads,
        "Mamba-2 heads H. null: 2*hidden_size / mamba_head_dim (d_inner = 2*hidden_size); set: d_inner = "
        "mamba_num_heads*mamba_head_dim.")
      .check(positive())
      .architecture_defining();
  f.add("mamba_chunk_size", &M::mamba_chunk_size,
        "Tokens per chunk of the Mamba-2 SSD scan (Strata's field; Megatron's mixer fixes it at 128).")
      .check(positive());
}

MambaDims mamba_dims(const ModelConfig& m) {
  MambaDims d{};
  d.d_model = m.hidden_size;
  d.head_dim = m.mamba_head_dim;
  d.heads = m.mamba_num_heads ? *m.mamba_num_heads : 2 * m.hidden_size / m.mamba_head_dim;
  d.d_inner = m.mamba_num_heads ? *m.mamba_num_heads * m.mamba_head_dim : 2 * m.hidden_size;
  d.groups = m.mamba_num_groups;
  d.state = m.mamba_state_dim;
  d.chunk = m.mamba_chunk_size;
  return d;
}

void check_mamba_config(const ModelConfig& m, int64_t tp) {
  auto str = [](int64_t v) { return std::to_string(v); };
  if (!m.mamba_num_heads && (2 * m.hidden_size) % m.mamba_head_dim != 0)
    throw ConfigError("model.mamba_head_dim", str(m.mamba_head_dim) + " does not divide d_inner = 2*model.hidden_size (" +
                                                  str(2 * m.hidden_size) + "); set model.mamba_num_heads or change either");
  const MambaDims d = mamba_dims(m);
  const std::string heads = m.mamba_num_heads ? "model.mamba_num_heads (" + str(d.heads) + ")"
                                              : "the Mamba heads (2*hidden_size/mamba_head_dim = " + str(d.heads) + ")";
  if (d.heads % d.groups != 0)
    throw ConfigError("model.mamba_num_groups", str(d.groups) + " does not divide " + heads);
  if (d.heads % tp != 0)
    throw ConfigError("model.mamba_num_heads", heads + " is not divisible by parallel.tensor_model_parallel_size (" +
                                                   str(tp) + ")");
  if (d.groups % tp != 0)
    throw ConfigError("model.mamba_num_groups", str(d.groups) +
                                                    " is not divisible by parallel.tensor_model_parallel_size (" +
                                                    str(tp) + ")");
}

}  // namespace strata
