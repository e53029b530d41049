// The model fields of issue 40's activation and MoE work (model.squared_relu, quick_geglu,
// glu_linear_offset, activation_func_clamp_value, moe_latent_size; names fixed by the shared
// contract) read and written through templates, so that the Hugging Face families compile before
// ModelConfig has them: a missing field reads as off (false, 0, null) and a write that needs it
// returns false (the caller refuses, naming the field). Removed once the fields are in ModelConfig.
#pragma once
#include <cstdint>
#include <optional>

namespace strata::hf::detail {

template <class M>
bool squared_relu_of(const M& m) {
  if constexpr (requires { m.squared_relu; }) return m.squared_relu;
  else return false;
}
template <class M>
bool set_squared_relu(M& m) {
  if constexpr (requires { m.squared_relu = true; }) {
    m.squared_relu = true;
    return true;
  } else {
    return false;
  }
}
template <class M>
std::optional<int64_t> moe_latent_of(const M& m) {
  if constexpr (requires { m.moe_latent_size; }) return m.moe_latent_size;
  else return std::nullopt;
}
template <class M>
bool set_moe_latent(M& m, std::optional<int64_t> v) {
  if constexpr (requires { m.moe_latent_size = v; }) {
    m.moe_latent_size = v;
    return true;
  } else {
    return !v.has_value();
  }
}
template <class M>
bool quick_geglu_of(const M& m) {
  if constexpr (requires { m.quick_geglu; }) return m.quick_geglu;
  else return false;
}
template <class M>
double glu_linear_offset_of(const M& m) {
  if constexpr (requires { m.glu_linear_offset; }) return m.glu_linear_offset;
  else return 0.0;
}
template <class M>
std::optional<double> clamp_value_of(const M& m) {
  if constexpr (requires { m.activation_func_clamp_value; }) return m.activation_func_clamp_value;
  else return std::nullopt;
}
// quick_geglu with its offset and clamp (gpt-oss's experts); false when the fields are missing.
template <class M>
bool set_quick_geglu(M& m, double offset, std::optional<double> clamp) {
  if constexpr (requires {
                  m.quick_geglu = true;
                  m.glu_linear_offset = offset;
                  m.activation_func_clamp_value = clamp;
                }) {
    m.quick_geglu = true;
    m.glu_linear_offset = offset;
    m.activation_func_clamp_value = clamp;
    return true;
  } else {
    return false;
  }
}

}  // namespace strata::hf::detail
