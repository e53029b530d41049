// Text of config values and tables (core/config_table.h): Python-style values for Megatron's
// argument table, YAML scalars that round-trip exactly, and the table's YAML, --help, Markdown and
// argument-table output.
// Reference: megatron/training/arguments.py (_print_args: '  {name} {dots} {value}' with
// 48 - len(name) dots, lines sorted by their lower-cased text); Python's float repr (shortest
// round-trip digits, fixed notation for 1e-4 <= |x| < 1e16).
#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <set>

#include "core/config_table.h"

namespace strata::config {

static std::string join(const std::vector<std::string>& v, const char* sep) {
  std::string out;
  for (size_t i = 0; i < v.size(); ++i) out += (i ? sep : "") + v[i];
  return out;
}
// ---- number formatting -------------------------------------------------------------------------

namespace {
// Shortest round-trip decimal digits and exponent: x = d1.d2d3… × 10^exp.
struct Decimal {
  bool negative;
  std::string digits;
  int exp;
};
Decimal shortest_decimal(double x) {
  char buf[64];
  auto res = std::to_chars(buf, buf + sizeof(buf), x, std::chars_format::scientific);
  std::string s(buf, res.ptr);  // "-1.2345e-05"
  Decimal d{false, "", 0};
  size_t i = 0;
  if (s[0] == '-') {
    d.negative = true;
    i = 1;
  }
  size_t e = s.find('e');
  for (size_t k = i; k < e; ++k)
    if (s[k] != '.') d.digits += s[k];
  d.exp = std::stoi(s.substr(e + 1));
  return d;
}
}  // namespace

// Python's repr(float): fixed notation for 1e-4 <= |x| < 1e16, otherwise scientific.
static std::string python_float(double x) {
  if (std::isnan(x)) return "nan";
  if (std::isinf(x)) return x < 0 ? "-inf" : "inf";
  Decimal d = shortest_decimal(x);
  std::string out = d.negative ? "-" : "";
  const std::string& D = d.digits;
  if (d.exp >= -4 && d.exp < 16) {
    if (d.exp >= 0) {
      std::string int_part = D.substr(0, std::min<size_t>(D.size(), d.exp + 1));
      while (int_part.size() < static_cast<size_t>(d.exp + 1)) int_part += '0';
      std::string frac = D.size() > static_cast<size_t>(d.exp + 1) ? D.substr(d.exp + 1) : "0";
      return out + int_part + "." + frac;
    }
    return out + "0." + std::string(-d.exp - 1, '0') + D;
  }
  out += D.substr(0, 1);
  if (D.size() > 1) out += "." + D.substr(1);
  char e[16];
  std::snprintf(e, sizeof(e), "e%c%02d", d.exp < 0 ? '-' : '+', std::abs(d.exp));
  return out + e;
}

std::string format_double(double x) {
  if (std::isnan(x)) return ".nan";
  if (std::isinf(x)) return x < 0 ? "-.inf" : ".inf";
  std::string s = python_float(x);
  size_t e = s.find('e');
  if (e != std::string::npos && s.find('.') == std::string::npos)
    s.insert(e, ".0");  // 1.0e-05: a float to every YAML reader
  return s;
}

// ---- strings -------------------------------------------------------------------------------------

// Python's repr(str): single quotes unless the text has a ' and no ".
static std::string python_str_repr(const std::string& s) {
  char q = s.find('\'') != std::string::npos && s.find('"') == std::string::npos ? '"' : '\'';
  std::string out(1, q);
  for (char c : s) {
    if (c == '\\' || c == q) out += '\\';
    out += c;
  }
  return out + q;
}

// Plain YAML scalars are used only when a YAML reader cannot take them for anything but a string.
static bool needs_quotes(const std::string& s) {
  if (s.empty()) return true;
  static const std::set<std::string> reserved = {"null",  "Null",  "NULL", "~",    "true", "True", "TRUE", "false",
                                                 "False", "FALSE", "yes",  "Yes",  "YES",  "no",   "No",   "NO",
                                                 "on",    "On",    "ON",   "off",  "Off",  "OFF",  "y",    "Y",
                                                 "n",     "N",     ".inf", ".nan", "-.inf"};
  if (reserved.count(s)) return true;
  for (char c : s) {
    bool ok = std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '.' || c == '/' || c == '-' || c == '+' ||
              c == ':';
    if (!ok) return true;
  }
  if (s.front() == '-' || s.front() == ':' || s.back() == ':') return true;
  double d;
  const char* b = s.data() + (s.front() == '+' ? 1 : 0);
  auto r = std::from_chars(b, s.data() + s.size(), d);
  return r.ec == std::errc() && r.ptr == s.data() + s.size();  // looks like a number
}

static std::string yaml_string(const std::string& s) {
  if (!needs_quotes(s)) return s;
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    if (c == '\n') {
      out += "\\n";
      continue;
    }
    out += c;
  }
  return out + "\"";
}

template <typename T, typename F>
static std::string list_text(const std::vector<T>& v, F&& item) {
  std::string out = "[";
  for (size_t i = 0; i < v.size(); ++i) out += (i ? ", " : "") + item(v[i]);
  return out + "]";
}

std::string yaml_scalar(const Value& v) {
  return std::visit(
      [](const auto& x) -> std::string {
        using T = std::decay_t<decltype(x)>;
        if constexpr (std::is_same_v<T, std::monostate>)
          return "null";
        else if constexpr (std::is_same_v<T, int64_t>)
          return std::to_string(x);
        else if constexpr (std::is_same_v<T, double>)
          return format_double(x);
        else if constexpr (std::is_same_v<T, bool>)
          return x ? "true" : "false";
        else if constexpr (std::is_same_v<T, std::string>)
          return yaml_string(x);
        else if constexpr (std::is_same_v<T, std::vector<int64_t>>)
          return list_text(x, [](int64_t i) { return std::to_string(i); });
        else if constexpr (std::is_same_v<T, std::vector<double>>)
          return list_text(x, format_double);
        else
          return list_text(x, yaml_string);
      },
      v);
}

std::string python_repr(const Value& v) {
  return std::visit(
      [](const auto& x) -> std::string {
        using T = std::decay_t<decltype(x)>;
        if constexpr (std::is_same_v<T, std::monostate>)
          return "None";
        else if constexpr (std::is_same_v<T, int64_t>)
          return std::to_string(x);
        else if constexpr (std::is_same_v<T, double>)
          return python_float(x);
        else if constexpr (std::is_same_v<T, bool>)
          return x ? "True" : "False";
        else if constexpr (std::is_same_v<T, std::string>)
          return x;
        else if constexpr (std::is_same_v<T, std::vector<int64_t>>)
          return list_text(x, [](int64_t i) { return std::to_string(i); });
        else if constexpr (std::is_same_v<T, std::vector<double>>)
          return list_text(x, python_float);
        else
          return list_text(x, python_str_repr);
      },
      v);
}

// ---- output --------------------------------------------------------------------------------------

std::string FieldTable::to_yaml(const void* root) const {
  std::string out;
  for (const auto& sec : sections_) {
    out += sec.name + ":\n";
    const void* obj = sec.access(const_cast<void*>(root));
    for (const auto& f : sec.fields) out += "  " + f.name + ": " + yaml_scalar(f.get(obj)) + "\n";
  }
  return out;
}

static std::string rules_text(const FieldSpec& f) {
  std::vector<std::string> r;
  for (const auto& v : f.validators) r.push_back(v.description);
  return join(r, ", ");
}

std::string FieldTable::help_text() const {
  std::string out;
  for (const auto& sec : sections_) {
    out += "\n" + sec.name + ": " + sec.doc + "\n";
    for (const auto& f : sec.fields) {
      std::string rules = rules_text(f);
      out += "  " + f.path() + " (" + f.type_text() + ", default " + yaml_scalar(f.default_value) +
             (rules.empty() ? "" : ", " + rules) + ")\n      " + f.doc + "\n";
    }
  }
  return out;
}

static std::string md_escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '|') out += '\\';
    out += c;
  }
  return out;
}

// The command-line flags of a field: `--x`, `--no-x` (= false), `--bf16` (= bf16).
static std::string flags_text(const MegatronFlags& flags, const FieldSpec& f) {
  std::vector<std::string> out, negations;
  for (const auto& e : flags.entries()) {
    if (e.path() != f.path()) continue;
    if (e.kind == FlagEntry::Kind::Field && (e.arity != FlagArity::Switch || e.value == "true"))
      out.push_back("`" + e.flag + "`");
    else if (e.kind == FlagEntry::Kind::Field && e.by_name)
      negations.push_back("`" + e.flag + "`");
    else if (e.kind == FlagEntry::Kind::Field || e.kind == FlagEntry::Kind::Constant)
      out.push_back("`" + e.flag + "` (= " + e.value + ")");
  }
  if (!negations.empty()) out.push_back(join(negations, " / ") + " (= false)");
  return join(out, ", ");
}

std::string FieldTable::markdown() const {
  const MegatronFlags flags(*this);
  std::string out;
  for (const auto& sec : sections_) {
    out += "\n## `" + sec.name + "`\n\n" + md_escape(sec.doc) + "\n\n";
    out += "| field | type | default | allowed | flags | description |\n| --- | --- | --- | --- | --- | --- |\n";
    for (const auto& f : sec.fields)
      out += "| `" + f.path() + "` | " + md_escape(f.type_text()) + " | `" + md_escape(yaml_scalar(f.default_value)) +
             "` | " + md_escape(rules_text(f)) + " | " + md_escape(flags_text(flags, f)) + " | " + md_escape(f.doc) +
             " |\n";
  }
  return out;
}

std::string MegatronFlags::markdown() const {
  return "\n## Megatron command-line flags\n\n"
         "`strata train`, `strata plan` and `strata bench train` accept a Megatron-LM launch script's arguments\n"
         "after `--config F`, mixed with `section.field=value` overrides; all apply on top of the YAML file in\n"
         "the order given. Each field's flags are in the tables above: `--` and the field name with dashes;\n"
         "a bool field is a switch (true), `--no-<name>` and `--disable-<name>` set it to false (Megatron's\n"
         "store_false spelling, e.g. `--disable-bias-linear`). A list field takes the following arguments up\n"
         "to the next flag (`--data-path 0.3 a 0.7 b`); `--flag=value` works too. Abbreviations are not\n"
         "accepted (Megatron's parser sets allow_abbrev=False); an unknown flag is an error naming the\n"
         "closest accepted one, and `training.bf16=true` (a flag spelled as a field) names the field to use.\n\n"
         "Every other Megatron flag, each with its status (another field's name, accepted without effect,\n"
         "or refused naming the capability), is in docs/megatron_flags.md.\n";
}

static std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

std::string FieldTable::argument_table(const void* root,
                                       const std::vector<std::pair<std::string, std::string>>& extra) const {
  std::vector<std::pair<std::string, std::string>> lines;
  auto line = [](const std::string& name, const std::string& value) {
    size_t n = name.size() < 48 ? 48 - name.size() : 0;
    return "  " + name + " " + std::string(n, '.') + " " + value;
  };
  for (const auto& sec : sections_) {
    const void* obj = sec.access(const_cast<void*>(root));
    for (const auto& f : sec.fields) {
      std::string l = line(f.name, python_repr(f.get(obj)));
      lines.emplace_back(lower(l), l);
    }
  }
  for (const auto& [name, value] : extra) {
    std::string l = line(name, value);
    lines.emplace_back(lower(l), l);
  }
  std::stable_sort(lines.begin(), lines.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  std::string out = "------------------------ arguments ------------------------\n";
  for (const auto& l : lines) out += l.second + "\n";
  return out + "-------------------- end of arguments ---------------------\n";
}

}  // namespace strata::config
