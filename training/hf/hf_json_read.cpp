// config.json's non-finite numbers, as Python's json and transformers read them (hf_json_read.h).
// Reference: CPython Lib/json/scanner.py (py_make_scanner: 'NaN', 'Infinity', '-Infinity'),
// transformers configuration_utils.py (_FLOAT_TAG_KEY "__float__", _decode_special_floats).
#include "training/hf/hf_json_read.h"

#include <array>
#include <limits>
#include <string_view>
#include <utility>

namespace strata::hf::detail {

namespace {

constexpr const char* kFloatTag = "__float__";
constexpr std::array<std::pair<std::string_view, double>, 3> kSpecial = {{
    {"-Infinity", -std::numeric_limits<double>::infinity()},
    {"Infinity", std::numeric_limits<double>::infinity()},
    {"NaN", std::numeric_limits<double>::quiet_NaN()},
}};

// The text with every bare NaN / Infinity / -Infinity outside strings written as transformers 5's
// tag object, which nlohmann's strict parser accepts.
std::string tag_bare_specials(const std::string& text) {
  std::string out;
  out.reserve(text.size());
  bool in_string = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      out += c;
      if (c == '\\' && i + 1 < text.size()) out += text[++i];
      else if (c == '"') in_string = false;
      continue;
    }
    if (c == '"') in_string = true;
    bool tagged = false;
    for (const auto& [name, value] : kSpecial) {
      if (std::string_view(text).substr(i, name.size()) != name) continue;
      out += std::string("{\"") + kFloatTag + "\": \"" + std::string(name) + "\"}";
      i += name.size() - 1;
      tagged = true;
      break;
    }
    if (!tagged) out += c;
  }
  return out;
}

// _decode_special_floats: an object whose only key is "__float__" with a known name is that double.
void decode_tags(nlohmann::json& j) {
  if (j.is_object()) {
    if (j.size() == 1 && j.contains(kFloatTag) && j.at(kFloatTag).is_string()) {
      const std::string name = j.at(kFloatTag).get<std::string>();
      for (const auto& [n, value] : kSpecial)
        if (name == n) {
          j = value;
          return;
        }
      return;
    }
  }
  if (j.is_object() || j.is_array())
    for (auto& v : j) decode_tags(v);
}

}  // namespace

nlohmann::json parse_config_json(const std::string& text, const std::string& file) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(tag_bare_specials(text));
  } catch (const nlohmann::json::exception& e) {
    STRATA_THROW(file, " is not valid JSON: ", e.what());
  }
  decode_tags(j);
  return j;
}

}  // namespace strata::hf::detail
