// The config table: every configuration field is declared once — section, name, type, doc,
// validators — and bound to a member of a typed struct, so code reads `cfg.model.num_layers`.
// From the table come YAML decoding, `section.field=value` overrides (values parsed as YAML),
// `--help` text, the generated reference (docs/config.md), `to_yaml()` of the resolved config and
// Megatron's sorted argument table. No model knowledge lives here.
// Reference: Megatron-LM megatron/training/arguments.py (_print_args, validate_args),
// megatron/training/yaml_arguments.py; Hydra's `a.b=v` override grammar.
//
// Defaults: a field's default is the initializer of its struct member (`int64_t num_layers = 2;`),
// read once from a default-constructed struct when the section is declared, so `ModelConfig{}` and
// the table always agree. A member of type std::optional<T> is a nullable field whose default is
// null (Megatron's None); other fields reject null.
//
// Member types: int64_t, double, bool, std::string, std::vector<int64_t|double|std::string>, an
// enum class (declared with add_enum and a name table), and std::optional of the scalar ones.
//
// Every error is a ConfigError whose message starts with the dotted field path ("section.field").
#pragma once
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <variant>
#include <vector>

#include "core/error.h"
#include "core/megatron_flags.h"

namespace YAML {
class Node;
}

namespace strata::config {

// A configuration error. The message always begins with the field path, e.g.
// "model.hidden_size: 100 is not divisible by model.num_attention_heads (3)".
class ConfigError : public Error {
 public:
  ConfigError(std::string field, const std::string& message);
  const std::string& field() const { return field_; }  // "section.field"
  // "ConfigError: section.field: message" (no source location: the field is the location).
  const char* what() const noexcept override { return what_.c_str(); }

 private:
  std::string field_;
  std::string what_;
};

enum class FieldType { Int, Double, Bool, String, Enum, IntList, DoubleList, StringList };
const char* field_type_name(FieldType type);  // "int64", "double", "bool", "string", "enum", "list of int64" …

// A field value. Enums travel as their name (std::string); monostate is null.
using Value = std::variant<std::monostate, int64_t, double, bool, std::string, std::vector<int64_t>,
                           std::vector<double>, std::vector<std::string>>;

// A per-field check on a non-null value: `check` returns "" when the value is fine, otherwise the
// problem ("must be > 0, got -3"). `description` is shown in --help ("> 0").
struct Validator {
  std::string description;
  std::function<std::string(const Value&)> check;
};
Validator positive();                                                      // > 0 (int or double; lists: every element)
Validator non_negative();                                                  // >= 0
Validator in_range(double lo, bool lo_closed, double hi, bool hi_closed);  // e.g. [0, 1)
// A normal f32 once rounded (not 0, subnormal or inf): a constant an f32 kernel uses (adam_eps 1e-320
// rounds to 0 there and divides 0 by 0).
Validator normal_f32();
Validator custom(std::string description, std::function<std::string(const Value&)> check);

// Name table of an enum class: {{Normalization::RMSNorm, "RMSNorm"}, …}.
template <typename E>
struct EnumName {
  E value;
  const char* name;
};
template <typename E>
const char* enum_to_string(std::span<const EnumName<E>> names, E value) {
  for (const auto& n : names)
    if (n.value == value) return n.name;
  STRATA_INTERNAL_ASSERT(false, "enum value missing from its name table");
  return "";
}

// One declared field. `get`/`set` reach the member through a pointer to its section struct.
struct FieldSpec {
  std::string section;
  std::string name;
  FieldType type = FieldType::Int;
  bool nullable = false;
  std::vector<std::string> choices;  // enum names, in declaration order
  std::string doc;
  std::vector<Validator> validators;
  Value default_value;
  std::function<Value(const void*)> get;
  std::function<void(void*, const Value&)> set;
  // Architecture-defining: a checkpoint and the run that loads it must agree on this field
  // (models/config/model_config.h architecture_field_names() collects the marked model fields).
  bool architecture = false;

  std::string path() const { return section + "." + name; }
  std::string type_text() const;  // "int64", "enum {LayerNorm, RMSNorm}", "string or null" …
  FieldSpec& check(Validator v) {
    validators.push_back(std::move(v));
    return *this;
  }
  FieldSpec& architecture_defining() {
    architecture = true;
    return *this;
  }
};

namespace detail {
template <typename T>
struct is_optional : std::false_type {};
template <typename T>
struct is_optional<std::optional<T>> : std::true_type {};

template <typename T>
inline constexpr bool unsupported_member = false;

// The FieldType of a plain (non-optional, non-enum) member type.
template <typename T>
constexpr FieldType field_type_of() {
  if constexpr (std::is_same_v<T, int64_t>)
    return FieldType::Int;
  else if constexpr (std::is_same_v<T, double>)
    return FieldType::Double;
  else if constexpr (std::is_same_v<T, bool>)
    return FieldType::Bool;
  else if constexpr (std::is_same_v<T, std::string>)
    return FieldType::String;
  else if constexpr (std::is_same_v<T, std::vector<int64_t>>)
    return FieldType::IntList;
  else if constexpr (std::is_same_v<T, std::vector<double>>)
    return FieldType::DoubleList;
  else if constexpr (std::is_same_v<T, std::vector<std::string>>)
    return FieldType::StringList;
  else
    static_assert(unsupported_member<T>,
                  "config members are int64_t, double, bool, std::string, vectors of those, enums (add_enum) or "
                  "std::optional of a scalar");
}
}  // namespace detail

// The fields of one section struct S. Build it in a function next to S:
//   SectionFields<ModelConfig> f;
//   f.add("num_layers", &ModelConfig::num_layers, "Number of transformer layers.").check(positive());
template <typename S>
class SectionFields {
 public:
  template <typename M>
  FieldSpec& add(std::string name, M S::*member, std::string doc) {
    FieldSpec f;
    f.name = std::move(name);
    f.doc = std::move(doc);
    if constexpr (detail::is_optional<M>::value) {
      using T = typename M::value_type;
      f.type = detail::field_type_of<T>();
      f.nullable = true;
      f.get = [member](const void* s) -> Value {
        const M& m = static_cast<const S*>(s)->*member;
        return m ? Value(*m) : Value();
      };
      f.set = [member](void* s, const Value& v) {
        M& m = static_cast<S*>(s)->*member;
        if (std::holds_alternative<std::monostate>(v))
          m.reset();
        else
          m = std::get<T>(v);
      };
    } else {
      f.type = detail::field_type_of<M>();
      f.get = [member](const void* s) -> Value { return Value(static_cast<const S*>(s)->*member); };
      f.set = [member](void* s, const Value& v) { static_cast<S*>(s)->*member = std::get<M>(v); };
    }
    return push(std::move(f));
  }

  // An enum class member (or std::optional of one) with its name table.
  template <typename M, typename E>
  FieldSpec& add_enum(std::string name, M S::*member, std::span<const EnumName<E>> names, std::string doc) {
    FieldSpec f;
    f.name = std::move(name);
    f.doc = std::move(doc);
    f.type = FieldType::Enum;
    for (const auto& n : names) f.choices.push_back(n.name);
    auto from_name = [names](const Value& v) {
      const std::string& s = std::get<std::string>(v);
      for (const auto& n : names)
        if (s == n.name) return n.value;
      STRATA_INTERNAL_ASSERT(false, "enum name '", s, "' not in its table");
      return names[0].value;
    };
    if constexpr (detail::is_optional<M>::value) {
      static_assert(std::is_same_v<typename M::value_type, E>);
      f.nullable = true;
      f.get = [member, names](const void* s) -> Value {
        const M& m = static_cast<const S*>(s)->*member;
        return m ? Value(std::string(enum_to_string(names, *m))) : Value();
      };
      f.set = [member, from_name](void* s, const Value& v) {
        M& m = static_cast<S*>(s)->*member;
        if (std::holds_alternative<std::monostate>(v))
          m.reset();
        else
          m = from_name(v);
      };
    } else {
      static_assert(std::is_same_v<M, E>);
      f.get = [member, names](const void* s) -> Value {
        return Value(std::string(enum_to_string(names, static_cast<const S*>(s)->*member)));
      };
      f.set = [member, from_name](void* s, const Value& v) { static_cast<S*>(s)->*member = from_name(v); };
    }
    return push(std::move(f));
  }

  template <typename M, typename E, size_t N>
  FieldSpec& add_enum(std::string name, M S::*member, const EnumName<E> (&names)[N], std::string doc) {
    return add_enum(std::move(name), member, std::span<const EnumName<E>>(names, N), std::move(doc));
  }

  std::vector<FieldSpec>& fields() { return fields_; }

 private:
  FieldSpec& push(FieldSpec f) {
    static const S defaults{};
    f.default_value = f.get(&defaults);
    fields_.push_back(std::move(f));
    return fields_.back();
  }
  std::vector<FieldSpec> fields_;
};

// A section: name, doc, its fields and how to reach its struct inside the root struct.
struct SectionSpec {
  std::string name;
  std::string doc;
  std::vector<FieldSpec> fields;
  std::function<void*(void*)> access;
  const FieldSpec* find(const std::string& field) const;
};

// Every per-field validator of one section's fields on its struct (`section` points at it); a
// ConfigError naming the first field that fails.
void check_section_fields(const std::vector<FieldSpec>& fields, const void* section);

// The type-erased table (roots passed as void*). Use ConfigTable<Root> below.
class FieldTable {
 public:
  void add_section(SectionSpec section);
  const std::vector<SectionSpec>& sections() const { return sections_; }
  const SectionSpec* find_section(const std::string& name) const;
  const FieldSpec* find(const std::string& section, const std::string& field) const;

  // `source` names the origin in messages (a file path, "override 'a.b=c'").
  void decode_yaml(const YAML::Node& root_node, void* root, const std::string& source) const;
  void decode_yaml_text(const std::string& text, void* root, const std::string& source) const;
  void load_file(const std::string& path, void* root) const;  // ConfigError "(file)": unreadable, or a directory
  void apply_override(const std::string& assignment, void* root) const;  // "section.field=value"
  void set_value(const std::string& section, const std::string& field, const Value& v, void* root) const;
  // Sets a field from command-line text: one scalar, or (as_list) the elements of a list, each
  // decoded with the field's type; `where` names the origin in messages ("flag '--lr 3e-4'").
  void set_from_text(const std::string& section, const std::string& field, const std::vector<std::string>& values,
                     bool as_list, void* root, const std::string& where) const;
  Value get_value(const std::string& section, const std::string& field, const void* root) const;
  void check_fields(const void* root) const;  // every per-field validator

  // Megatron flags that do not map onto a field by name (core/megatron_flags.h).
  void set_megatron_rules(std::vector<MegatronFlagRule> rules);
  const std::vector<MegatronFlagRule>& megatron_rules() const { return megatron_rules_; }
  // The Megatron flag index of this table, built on first use (every config load applies the
  // command line; building the index of ~1000 flags each time cost milliseconds).
  const MegatronFlags& megatron_flags() const;
  // `section.field=value` overrides and Megatron flags, applied in order (MegatronFlags::apply).
  void apply_command_line(const std::vector<std::string>& args, void* root, std::vector<std::string>* no_effect,
                          const std::vector<std::string>& extra_flags = {}) const;

  std::string to_yaml(const void* root) const;
  std::string help_text() const;
  std::string markdown() const;
  // Megatron's `_print_args`: sorted, dot-padded, Python-formatted values; `extra` adds derived
  // entries (name, already formatted value) such as data_parallel_size.
  std::string argument_table(const void* root,
                             const std::vector<std::pair<std::string, std::string>>& extra = {}) const;

 private:
  void decode_field(const FieldSpec& f, const YAML::Node& node, void* section_obj, const std::string& where) const;
  [[noreturn]] void unknown_key(const std::string& section, const std::string& key, const std::string& where) const;
  std::vector<SectionSpec> sections_;
  std::vector<MegatronFlagRule> megatron_rules_;
  // megatron_flags(): dropped when sections or rules change, and not copied with the table (the
  // index refers to the table it was built from).
  struct FlagIndexCache {
    std::mutex mutex;
    std::unique_ptr<const MegatronFlags> index;
    FlagIndexCache() = default;
    FlagIndexCache(const FlagIndexCache&) {}
    FlagIndexCache& operator=(const FlagIndexCache&) {
      std::lock_guard<std::mutex> lock(mutex);
      index.reset();
      return *this;
    }
  };
  mutable FlagIndexCache flag_index_;
};

// The typed table over a root struct whose members are section structs.
template <typename Root>
class ConfigTable {
 public:
  template <typename S>
  void add_section(std::string name, S Root::*member, std::string doc, SectionFields<S> fields) {
    SectionSpec s;
    s.name = name;
    s.doc = std::move(doc);
    s.fields = std::move(fields.fields());
    for (auto& f : s.fields) f.section = name;
    s.access = [member](void* root) -> void* { return &(static_cast<Root*>(root)->*member); };
    table_.add_section(std::move(s));
  }

  const FieldTable& untyped() const { return table_; }
  const std::vector<SectionSpec>& sections() const { return table_.sections(); }
  const FieldSpec* find(const std::string& section, const std::string& field) const {
    return table_.find(section, field);
  }

  void decode_yaml_text(const std::string& text, Root& r, const std::string& source) const {
    table_.decode_yaml_text(text, &r, source);
  }
  void load_file(const std::string& path, Root& r) const { table_.load_file(path, &r); }
  void apply_override(const std::string& assignment, Root& r) const { table_.apply_override(assignment, &r); }
  void set_value(const std::string& section, const std::string& field, const Value& v, Root& r) const {
    table_.set_value(section, field, v, &r);
  }
  Value get_value(const std::string& section, const std::string& field, const Root& r) const {
    return table_.get_value(section, field, &r);
  }
  void check_fields(const Root& r) const { table_.check_fields(&r); }
  void set_megatron_rules(std::vector<MegatronFlagRule> rules) { table_.set_megatron_rules(std::move(rules)); }
  void apply_command_line(const std::vector<std::string>& args, Root& r, std::vector<std::string>* no_effect,
                          const std::vector<std::string>& extra_flags = {}) const {
    table_.apply_command_line(args, &r, no_effect, extra_flags);
  }
  std::string to_yaml(const Root& r) const { return table_.to_yaml(&r); }
  std::string help_text() const { return table_.help_text(); }
  std::string markdown() const { return table_.markdown(); }
  std::string argument_table(const Root& r, const std::vector<std::pair<std::string, std::string>>& extra = {}) const {
    return table_.argument_table(&r, extra);
  }

 private:
  FieldTable table_;
};

// ---- helpers shared with callers -------------------------------------------------------------
std::string python_repr(const Value& v);  // Megatron's printed form: None, True, 1e-05, ['a', 'b']
std::string yaml_scalar(const Value& v);  // the YAML text of a value (round-trips exactly)
std::string format_double(double x);      // shortest round-trip text, always with '.' or 'e'
size_t edit_distance(const std::string& a, const std::string& b);  // Levenshtein
// The Levenshtein distance when it is at most `bound`, else bound + 1 (rows stop once every entry
// exceeds the bound: Ukkonen's cut-off).
size_t edit_distance_within(std::string_view a, std::string_view b, size_t bound);
// The closest candidate by edit distance (ignoring case, '-' read as '_'), or "" if none is close.
std::string closest_match(const std::string& word, const std::vector<std::string>& candidates);

}  // namespace strata::config
