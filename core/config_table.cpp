// The config table mechanism (core/config_table.h): YAML decoding with strict types, overrides,
// "did you mean" suggestions and per-field validators. The text output (YAML, --help, Markdown,
// Megatron's argument table) is in core/config_text.cpp.
// Reference: megatron/training/yaml_arguments.py; Hydra's `a.b=v` override grammar.
#include "core/config_table.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <array>
#include <cfloat>
#include <charconv>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <set>
#include <sstream>

namespace strata::config {

ConfigError::ConfigError(std::string field, const std::string& message)
    : Error(ErrorKind::Config, "config", 0, field + ": " + message),
      field_(std::move(field)),
      what_("ConfigError: " + field_ + ": " + message) {}

const char* field_type_name(FieldType type) {
  switch (type) {
    case FieldType::Int: return "int64";
    case FieldType::Double: return "double";
    case FieldType::Bool: return "bool";
    case FieldType::String: return "string";
    case FieldType::Enum: return "enum";
    case FieldType::IntList: return "list of int64";
    case FieldType::DoubleList: return "list of double";
    case FieldType::StringList: return "list of string";
  }
  return "?";
}

static std::string join(const std::vector<std::string>& v, const char* sep) {
  std::string out;
  for (size_t i = 0; i < v.size(); ++i) out += (i ? sep : "") + v[i];
  return out;
}

std::string FieldSpec::type_text() const {
  std::string t = type == FieldType::Enum ? "enum {" + join(choices, ", ") + "}" : field_type_name(type);
  return nullable ? t + " or null" : t;
}

// ---- suggestions ---------------------------------------------------------------------------------

size_t edit_distance_within(std::string_view a, std::string_view b, size_t bound) {
  const size_t over = bound + 1;
  if ((a.size() > b.size() ? a.size() - b.size() : b.size() - a.size()) > bound) return over;
  std::vector<size_t> prev(b.size() + 1), cur(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) prev[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    cur[0] = i;
    size_t row_min = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      size_t d = prev[j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1);
      d = std::min(d, prev[j] + 1);
      d = std::min(d, cur[j - 1] + 1);
      cur[j] = d;
      row_min = std::min(row_min, d);
    }
    // Every path to the last cell passes through this row, and no step lowers the distance.
    if (row_min > bound) return over;
    std::swap(prev, cur);
  }
  return std::min(prev[b.size()], over);
}

size_t edit_distance(const std::string& a, const std::string& b) {
  return edit_distance_within(a, b, std::numeric_limits<size_t>::max() - 1);
}

static std::string normalized_key(const std::string& s) {
  std::string out = s;
  for (char& c : out) c = c == '-' ? '_' : static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

// A lower bound of the edit distance from the letters alone: one edit adds at most one letter
// and removes at most one, so the distance is at least max(|a|, |b|) minus the letters they share
// (counted per byte value). `a_counts`: a's letter counts; `scratch`: equal to it, and left so.
static size_t letter_count_bound(const std::array<int32_t, 256>& a_counts, std::array<int32_t, 256>& scratch,
                                 size_t a_size, std::string_view b) {
  size_t shared = 0;
  for (unsigned char ch : b)
    if (scratch[ch] > 0) --scratch[ch], ++shared;
  for (unsigned char ch : b) scratch[ch] = a_counts[ch];
  return std::max(a_size, b.size()) - shared;
}

std::string closest_match(const std::string& word, const std::vector<std::string>& candidates) {
  std::string w = normalized_key(word), best;
  const size_t limit = std::max<size_t>(2, w.size() / 3);
  size_t best_d = limit + 1;  // only a candidate within the limit is suggested
  std::array<int32_t, 256> counts{};
  for (unsigned char ch : w) ++counts[ch];
  std::array<int32_t, 256> scratch = counts;
  for (const auto& c : candidates) {
    // Only a distance below the best so far matters: a candidate whose length or letters alone
    // rule it out is skipped, and the others' comparisons stop once they cannot beat it (an
    // unknown flag against ~1000 names would otherwise be quadratic in each).
    const size_t length_gap = w.size() > c.size() ? w.size() - c.size() : c.size() - w.size();
    if (length_gap >= best_d) continue;
    const std::string key = normalized_key(c);
    if (letter_count_bound(counts, scratch, w.size(), key) >= best_d) continue;
    const size_t d = edit_distance_within(w, key, best_d - 1);
    if (d < best_d) {
      best_d = d;
      best = c;
    }
  }
  return best;
}

// ---- validators ----------------------------------------------------------------------------------

namespace {
std::string python_repr_double(double x) {
  return python_repr(Value(x));
}

// Applies `ok` to a numeric value or every element of a numeric list; "" when all pass.
std::string check_numbers(const Value& v, const std::function<bool(double)>& ok, const std::string& rule) {
  auto fail = [&](const std::string& got) { return "must be " + rule + ", got " + got; };
  if (auto* i = std::get_if<int64_t>(&v)) return ok(static_cast<double>(*i)) ? "" : fail(std::to_string(*i));
  if (auto* d = std::get_if<double>(&v)) return ok(*d) ? "" : fail(python_repr_double(*d));
  if (auto* l = std::get_if<std::vector<int64_t>>(&v))
    for (int64_t x : *l)
      if (!ok(static_cast<double>(x))) return "every element " + fail(std::to_string(x));
  if (auto* l = std::get_if<std::vector<double>>(&v))
    for (double x : *l)
      if (!ok(x)) return "every element " + fail(python_repr_double(x));
  return "";
}
std::string bound_text(double x) {
  std::string s = python_repr_double(x);
  if (s.size() > 2 && s.substr(s.size() - 2) == ".0") s.resize(s.size() - 2);
  return s;
}
}  // namespace

Validator positive() {
  return {"> 0", [](const Value& v) {
            return check_numbers(
                v, [](double x) { return x > 0; }, "> 0");
          }};
}
Validator non_negative() {
  return {">= 0", [](const Value& v) {
            return check_numbers(
                v, [](double x) { return x >= 0; }, ">= 0");
          }};
}
Validator in_range(double lo, bool lo_closed, double hi, bool hi_closed) {
  std::string rule =
      "in " + std::string(lo_closed ? "[" : "(") + bound_text(lo) + ", " + bound_text(hi) + (hi_closed ? "]" : ")");
  auto ok = [=](double x) { return (lo_closed ? x >= lo : x > lo) && (hi_closed ? x <= hi : x < hi); };
  return {rule, [=](const Value& v) { return check_numbers(v, ok, rule); }};
}
Validator normal_f32() {
  const std::string rule = "normal in f32 (1.2e-38 <= |x| <= 3.4e38)";
  // The range check first: converting a double beyond FLT_MAX to float is undefined.
  auto ok = [](double x) {
    return std::abs(x) <= static_cast<double>(FLT_MAX) && std::isnormal(static_cast<float>(x));
  };
  return {rule, [=](const Value& v) { return check_numbers(v, ok, rule); }};
}
Validator custom(std::string description, std::function<std::string(const Value&)> check) {
  return {std::move(description), std::move(check)};
}

// ---- decoding ------------------------------------------------------------------------------------

namespace {
bool parse_int(const std::string& s, int64_t& out) {
  const char* b = s.data() + (!s.empty() && s[0] == '+' ? 1 : 0);
  const char* e = s.data() + s.size();
  auto r = std::from_chars(b, e, out);
  return b != e && r.ec == std::errc() && r.ptr == e;
}
bool parse_double(const std::string& s, double& out) {
  if (s == ".inf" || s == ".Inf" || s == "+.inf") return out = INFINITY, true;
  if (s == "-.inf" || s == "-.Inf") return out = -INFINITY, true;
  if (s == ".nan" || s == ".NaN") return out = NAN, true;
  const char* b = s.data() + (!s.empty() && s[0] == '+' ? 1 : 0);
  const char* e = s.data() + s.size();
  auto r = std::from_chars(b, e, out, std::chars_format::general);
  return b != e && r.ec == std::errc() && r.ptr == e;
}
bool parse_bool(const std::string& s, bool& out) {
  if (s == "true" || s == "True" || s == "TRUE") return out = true, true;
  if (s == "false" || s == "False" || s == "FALSE") return out = false, true;
  return false;
}
std::string describe_node(const YAML::Node& n) {
  if (n.IsMap()) return "a map";
  if (n.IsSequence()) return "a list";
  if (n.IsNull()) return "null";
  if (n.Tag() == "!") return "the quoted string \"" + n.Scalar() + "\"";
  return "'" + n.Scalar() + "'";
}
std::string where_suffix(const std::string& where, const YAML::Node& n) {
  if (where.empty()) return "";
  if (n.Mark().line >= 0 && where.rfind("override", 0) != 0)
    return " (" + where + ":" + std::to_string(n.Mark().line + 1) + ")";
  return " (" + where + ")";
}

// A scalar element of the given element type; `expected` names it for messages.
template <typename T>
bool decode_scalar(const YAML::Node& n, T& out) {
  if (!n.IsScalar()) return false;
  if constexpr (std::is_same_v<T, std::string>) {
    out = n.Scalar();
    return true;
  } else {
    if (n.Tag() == "!") return false;  // quoted: a string, not a number or bool
    if constexpr (std::is_same_v<T, int64_t>)
      return parse_int(n.Scalar(), out);
    else if constexpr (std::is_same_v<T, double>)
      return parse_double(n.Scalar(), out);
    else
      return parse_bool(n.Scalar(), out);
  }
}

template <typename T>
bool decode_list(const YAML::Node& n, std::vector<T>& out) {
  out.clear();
  if (n.IsScalar()) {  // a single value stands for a one-element list
    T x{};
    if (!decode_scalar(n, x)) return false;
    out.push_back(x);
    return true;
  }
  if (!n.IsSequence()) return false;
  for (const auto& e : n) {
    T x{};
    if (!decode_scalar(e, x)) return false;
    out.push_back(x);
  }
  return true;
}
}  // namespace

void FieldTable::decode_field(const FieldSpec& f, const YAML::Node& n, void* section_obj,
                              const std::string& where) const {
  auto type_error = [&]() -> ConfigError {
    return ConfigError(f.path(), "expected " + f.type_text() + ", got " + describe_node(n) + where_suffix(where, n));
  };
  Value v;
  if (n.IsNull()) {
    if (!f.nullable)
      throw ConfigError(f.path(), "null is not allowed; expected " + f.type_text() + where_suffix(where, n));
    f.set(section_obj, Value());
    return;
  }
  bool ok = false;
  switch (f.type) {
    case FieldType::Int: {
      int64_t x = 0;
      ok = decode_scalar(n, x);
      v = x;
      break;
    }
    case FieldType::Double: {
      double x = 0;
      ok = decode_scalar(n, x);
      v = x;
      break;
    }
    case FieldType::Bool: {
      bool x = false;
      ok = decode_scalar(n, x);
      v = x;
      break;
    }
    case FieldType::String: {
      std::string x;
      ok = decode_scalar(n, x);
      v = x;
      break;
    }
    case FieldType::IntList: {
      std::vector<int64_t> x;
      ok = decode_list(n, x);
      v = x;
      break;
    }
    case FieldType::DoubleList: {
      std::vector<double> x;
      ok = decode_list(n, x);
      v = x;
      break;
    }
    case FieldType::StringList: {
      std::vector<std::string> x;
      ok = decode_list(n, x);
      v = x;
      break;
    }
    case FieldType::Enum: {
      if (!n.IsScalar()) break;
      const std::string& s = n.Scalar();
      if (std::find(f.choices.begin(), f.choices.end(), s) == f.choices.end()) {
        std::string hint = closest_match(s, f.choices);
        throw ConfigError(f.path(), "'" + s + "' is not one of " + join(f.choices, ", ") +
                                        (hint.empty() ? "" : "; did you mean '" + hint + "'?") +
                                        where_suffix(where, n));
      }
      ok = true;
      v = s;
      break;
    }
  }
  if (!ok) throw type_error();
  f.set(section_obj, v);
}

const FieldSpec* SectionSpec::find(const std::string& field) const {
  for (const auto& f : fields)
    if (f.name == field) return &f;
  return nullptr;
}

void FieldTable::add_section(SectionSpec section) {
  STRATA_INTERNAL_ASSERT(!find_section(section.name), "config section declared twice: ", section.name);
  // Field names are unique across sections, as in Megatron's flat argument namespace; the
  // argument table and the cross-section "did you mean" rely on it.
  for (const auto& f : section.fields)
    for (const auto& s : sections_)
      STRATA_INTERNAL_ASSERT(!s.find(f.name), "config field '", f.name, "' declared in sections ", s.name, " and ",
                             section.name);
  sections_.push_back(std::move(section));
  flag_index_ = FlagIndexCache();
}

const SectionSpec* FieldTable::find_section(const std::string& name) const {
  for (const auto& s : sections_)
    if (s.name == name) return &s;
  return nullptr;
}

const FieldSpec* FieldTable::find(const std::string& section, const std::string& field) const {
  const SectionSpec* s = find_section(section);
  return s ? s->find(field) : nullptr;
}

void FieldTable::unknown_key(const std::string& section, const std::string& key, const std::string& where) const {
  const SectionSpec* s = find_section(section);
  std::string path = section + "." + key;
  if (!s) {
    std::vector<std::string> names;
    for (const auto& sec : sections_) names.push_back(sec.name);
    std::string hint = closest_match(section, names);
    throw ConfigError(path, "unknown section '" + section + "'" +
                                (hint.empty() ? "" : "; did you mean '" + hint + "'?") +
                                " (sections: " + join(names, ", ") + ")" + where);
  }
  // The same name in another section is the most likely intent ("model.lr" → "optimizer.lr").
  std::string hint;
  for (const auto& sec : sections_)
    for (const auto& f : sec.fields)
      if (hint.empty() && normalized_key(f.name) == normalized_key(key)) hint = f.path();
  if (hint.empty()) {  // a Megatron flag spelled as a field: training.bf16 → training.precision=bf16
    std::string megatron = megatron_flags().hint_for_key(section, key);
    if (!megatron.empty()) throw ConfigError(path, "unknown key '" + path + "'" + megatron + where);
  }
  if (hint.empty()) {
    std::vector<std::string> names;
    for (const auto& f : s->fields) names.push_back(f.name);
    std::string m = closest_match(key, names);
    if (!m.empty()) hint = section + "." + m;
  }
  throw ConfigError(path,
                    "unknown key '" + path + "'" + (hint.empty() ? "" : "; did you mean '" + hint + "'?") + where);
}

void FieldTable::decode_yaml(const YAML::Node& root_node, void* root, const std::string& source) const {
  if (!root_node.IsDefined() || root_node.IsNull()) return;  // an empty file: all defaults
  if (!root_node.IsMap())
    throw ConfigError("(top level)", "a config is a map of sections (model:, training:, …), got " +
                                         describe_node(root_node) + where_suffix(source, root_node));
  std::set<std::string> seen_sections;
  for (const auto& sec_kv : root_node) {
    const std::string sec_name = sec_kv.first.Scalar();
    const YAML::Node& body = sec_kv.second;
    std::string at = where_suffix(source, sec_kv.first);
    const SectionSpec* sec = find_section(sec_name);
    if (!sec) {
      std::string first_key = body.IsMap() && body.size() ? body.begin()->first.Scalar() : "*";
      unknown_key(sec_name, first_key, at);
    }
    if (!seen_sections.insert(sec_name).second)
      throw ConfigError(sec_name + ".*", "section '" + sec_name + "' appears twice" + at);
    if (body.IsNull()) continue;
    if (!body.IsMap())
      throw ConfigError(sec_name + ".*", "expected a map of field: value, got " + describe_node(body) + at);
    void* obj = sec->access(root);
    std::set<std::string> seen;
    for (const auto& kv : body) {
      const std::string key = kv.first.Scalar();
      std::string key_at = where_suffix(source, kv.first);
      const FieldSpec* f = sec->find(key);
      if (!f) unknown_key(sec_name, key, key_at);
      if (!seen.insert(key).second) throw ConfigError(f->path(), "key appears twice" + key_at);
      decode_field(*f, kv.second, obj, source);
    }
  }
}

void FieldTable::decode_yaml_text(const std::string& text, void* root, const std::string& source) const {
  YAML::Node node;
  try {
    node = YAML::Load(text);
  } catch (const YAML::Exception& e) {
    throw ConfigError("(yaml)", "cannot parse " + source + " at line " + std::to_string(e.mark.line + 1) + ", column " +
                                    std::to_string(e.mark.column + 1) + ": " + e.msg);
  }
  decode_yaml(node, root, source);
}

void FieldTable::load_file(const std::string& path, void* root) const {
  // An ifstream opens a directory on Linux and reads it as empty: the defaults would pass as the file.
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec))
    throw ConfigError("(file)", "config file '" + path + "' is a directory, not a YAML file");
  std::ifstream in(path);
  if (!in) throw ConfigError("(file)", "cannot open config file '" + path + "'");
  std::stringstream ss;
  ss << in.rdbuf();
  decode_yaml_text(ss.str(), root, path);
}

void FieldTable::apply_override(const std::string& assignment, void* root) const {
  std::string where = "override '" + assignment + "'";
  size_t eq = assignment.find('=');
  std::string key = assignment.substr(0, eq);
  size_t dot = key.find('.');
  if (eq == std::string::npos || dot == std::string::npos || key.find('.', dot + 1) != std::string::npos || dot == 0 ||
      dot + 1 == key.size())
    throw ConfigError(key.empty() ? "(override)" : key, "an override is section.field=value, got '" + assignment + "'");
  std::string section = key.substr(0, dot), name = key.substr(dot + 1);
  const FieldSpec* f = find(section, name);
  if (!f) unknown_key(section, name, " (" + where + ")");
  YAML::Node node;
  try {
    node = YAML::Load(assignment.substr(eq + 1));
  } catch (const YAML::Exception& e) {
    throw ConfigError(key, "the value is not valid YAML (" + e.msg + ") (" + where + ")");
  }
  decode_field(*f, node, find_section(section)->access(root), where);
}

void FieldTable::set_value(const std::string& section, const std::string& field, const Value& v, void* root) const {
  const FieldSpec* f = find(section, field);
  STRATA_INTERNAL_ASSERT(f, "set_value of an undeclared field ", section, ".", field);
  f->set(find_section(section)->access(root), v);
}

void FieldTable::set_from_text(const std::string& section, const std::string& field,
                               const std::vector<std::string>& values, bool as_list, void* root,
                               const std::string& where) const {
  const FieldSpec* f = find(section, field);
  STRATA_INTERNAL_ASSERT(f, "set_from_text of an undeclared field ", section, ".", field);
  YAML::Node node;
  if (as_list) {
    node = YAML::Node(YAML::NodeType::Sequence);
    for (const auto& v : values) {
      if (f->type != FieldType::IntList) {
        node.push_back(YAML::Node(v));
        continue;
      }
      // An int list also reads Megatron's tuple_type: "127,0" or "(127,0)" as one value.
      std::string text = v;
      for (char& c : text)
        if (c == '(' || c == ')' || c == ',') c = ' ';
      std::istringstream words(text);
      for (std::string w; words >> w;) node.push_back(YAML::Node(w));
    }
  } else {
    STRATA_INTERNAL_ASSERT(values.size() == 1, "set_from_text of a scalar takes one value");
    node = YAML::Node(values[0]);
  }
  decode_field(*f, node, find_section(section)->access(root), where);
}

void FieldTable::apply_command_line(const std::vector<std::string>& args, void* root,
                                    std::vector<std::string>* no_effect,
                                    const std::vector<std::string>& extra_flags) const {
  megatron_flags().apply(args, root, no_effect, extra_flags);
}

void FieldTable::set_megatron_rules(std::vector<MegatronFlagRule> rules) {
  megatron_rules_ = std::move(rules);
  flag_index_ = FlagIndexCache();
}

const MegatronFlags& FieldTable::megatron_flags() const {
  std::lock_guard<std::mutex> lock(flag_index_.mutex);
  if (!flag_index_.index) flag_index_.index = std::make_unique<const MegatronFlags>(*this);
  return *flag_index_.index;
}

Value FieldTable::get_value(const std::string& section, const std::string& field, const void* root) const {
  const FieldSpec* f = find(section, field);
  STRATA_INTERNAL_ASSERT(f, "get_value of an undeclared field ", section, ".", field);
  return f->get(find_section(section)->access(const_cast<void*>(root)));
}

void check_section_fields(const std::vector<FieldSpec>& fields, const void* section) {
  for (const auto& f : fields) {
    Value v = f.get(section);
    if (std::holds_alternative<std::monostate>(v)) continue;
    // No float field means anything with inf or nan (YAML's .inf / .nan): refuse them all here,
    // whatever the field's own rules, before anything is allocated.
    const std::string non_finite = check_numbers(v, [](double x) { return std::isfinite(x); }, "a finite number");
    if (!non_finite.empty()) throw ConfigError(f.path(), non_finite);
    for (const auto& val : f.validators) {
      std::string problem = val.check(v);
      if (!problem.empty()) throw ConfigError(f.path(), problem);
    }
  }
}

void FieldTable::check_fields(const void* root) const {
  for (const auto& sec : sections_) check_section_fields(sec.fields, sec.access(const_cast<void*>(root)));
}

}  // namespace strata::config
