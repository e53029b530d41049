// config.json as transformers reads it (parse_config_json), and typed reads of its keys with errors
// that name the key and the file (training/hf/hf_format.cpp, training/hf/hf_moe_format.cpp).
// Reference: Python's json module (json.loads accepts NaN, Infinity and -Infinity; json.dumps writes
// them), transformers configuration_utils.py (PreTrainedConfig._dict_from_json_file,
// _decode_special_floats: transformers 5 writes them as {"__float__": "Infinity"}).
#pragma once
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "core/error.h"

namespace strata::hf::detail {

// Parses the text of a config.json (`file` names it in errors) as transformers does: Python's
// json.loads (bare NaN, Infinity, -Infinity outside strings, as NemotronH's time_step_limit is saved
// by transformers 4) and transformers 5's {"__float__": "NaN" | "Infinity" | "-Infinity"} objects,
// both read as the double. Anything else that is not JSON is an error naming the file.
nlohmann::json parse_config_json(const std::string& text, const std::string& file);

inline const nlohmann::json& need(const nlohmann::json& j, const char* key, const std::string& file) {
  STRATA_CHECK(j.contains(key) && !j.at(key).is_null(), file, ": config key '", key, "' is missing");
  return j.at(key);
}
inline int64_t get_int(const nlohmann::json& j, const char* key, const std::string& file) {
  const nlohmann::json& v = need(j, key, file);
  STRATA_CHECK(v.is_number_integer(), file, ": config key '", key, "' must be an integer, got ", v.dump());
  return v.get<int64_t>();
}
inline std::optional<int64_t> opt_int(const nlohmann::json& j, const char* key, const std::string& file) {
  if (!j.contains(key) || j.at(key).is_null()) return std::nullopt;
  return get_int(j, key, file);
}
inline double get_double(const nlohmann::json& j, const char* key, const std::string& file) {
  const nlohmann::json& v = need(j, key, file);
  STRATA_CHECK(v.is_number(), file, ": config key '", key, "' must be a number, got ", v.dump());
  return v.get<double>();
}
inline double opt_double(const nlohmann::json& j, const char* key, double dflt, const std::string& file) {
  if (!j.contains(key) || j.at(key).is_null()) return dflt;
  return get_double(j, key, file);
}
inline bool opt_bool(const nlohmann::json& j, const char* key, bool dflt, const std::string& file) {
  if (!j.contains(key) || j.at(key).is_null()) return dflt;
  STRATA_CHECK(j.at(key).is_boolean(), file, ": config key '", key, "' must be true or false, got ", j.at(key).dump());
  return j.at(key).get<bool>();
}
inline std::string opt_string(const nlohmann::json& j, const char* key, const std::string& dflt, const std::string& file) {
  if (!j.contains(key) || j.at(key).is_null()) return dflt;
  STRATA_CHECK(j.at(key).is_string(), file, ": config key '", key, "' must be a string, got ", j.at(key).dump());
  return j.at(key).get<std::string>();
}

}  // namespace strata::hf::detail
