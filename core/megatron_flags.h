// Megatron-LM command-line flags onto the config table (core/config_table.h): a launch script's
// argument list (`--num-layers 4 --bf16 --lr 3e-4 …`) is applied to the typed config in order,
// mixed freely with `section.field=value` overrides.
//
// Every field gets its flag automatically: `--` + the field name with dashes (`--num-layers` →
// model.num_layers). A bool field is a switch (Megatron's store_true), and `--no-X` / `--disable-X`
// set it to false (Megatron's spelling of store_false flags for fields that default to True, e.g.
// `--disable-bias-linear` → model.add_bias_linear=false). Values are decoded with the field's
// type and rules; a list field takes every following argument up to the next flag or override
// (argparse nargs='*'). The few flags that do not follow the rule are MegatronFlagRules, declared
// once next to the table (training/config/megatron_flag_table.cpp):
//   rename       another flag name for a field (--norm-epsilon → model.layernorm_epsilon)
//   constant     a switch that sets a field to a value (--bf16 → training.precision=bf16)
//   no_effect    picks Megatron's implementation and changes no numbers: accepted, reported once
//                (optionally only for the values that name what Strata does, e.g. --spec)
//   unsupported  a Megatron feature Strata lacks: an error naming it. When a field of that name
//                (or the rule's target field) is added later, the flag maps onto it instead.
// Anything else is an error with the closest accepted flag. Reference: megatron/training/
// arguments.py (allow_abbrev=False: no abbreviations), megatron/training/argument_utils.py
// (ArgumentGroupFactory: --name, --no-name / --disable-name).
#pragma once
#include <string>
#include <vector>

namespace strata::config {

class FieldTable;

enum class FlagArity { Switch, One, List };

struct MegatronFlagRule {
  enum class Kind { Rename, Constant, NoEffect, Unsupported };
  Kind kind = Kind::Rename;
  std::string flag;   // "--norm-epsilon"; for Unsupported a trailing '*' makes it a prefix ("--moe-*")
  std::string field;  // target field name (unique across sections); Unsupported: optional future field
  std::string value;  // Constant: the value, as YAML text
  FlagArity arity = FlagArity::Switch;  // NoEffect and Unsupported: what the flag consumes
  std::string note;   // Unsupported: the feature (and what to use instead); NoEffect: what it selects
  // NoEffect: the values (joined by spaces) that choose what Strata does anyway; empty: any value.
  // Another value is an error naming it and these.
  std::vector<std::string> accepted;
};

MegatronFlagRule rename_flag(std::string flag, std::string field);
MegatronFlagRule constant_flag(std::string flag, std::string field, std::string value);
MegatronFlagRule no_effect_flag(std::string flag, FlagArity arity, std::string note,
                                std::vector<std::string> accepted = {});
MegatronFlagRule unsupported_flag(std::string flag, FlagArity arity, std::string feature, std::string field = "");

// One accepted flag, resolved against the table.
struct FlagEntry {
  enum class Kind { Field, Constant, NoEffect, Unsupported };
  Kind kind = Kind::Field;
  std::string flag;
  std::string section, field;  // Field / Constant
  std::string value;           // Constant, or a bool switch's value ("true" / "false")
  FlagArity arity = FlagArity::One;
  std::string note;
  std::vector<std::string> accepted;  // NoEffect: MegatronFlagRule::accepted
  bool by_name = false;  // derived from the field name (not a rule)
  std::string path() const { return section + "." + field; }
};

// The flag index of a table: by-name flags of every field, then the table's rules.
class MegatronFlags {
 public:
  explicit MegatronFlags(const FieldTable& table);

  // The entry for `flag` ("--lr"), or nullptr; prefix rules ("--moe-*") match too.
  const FlagEntry* find(const std::string& flag) const;
  const std::vector<FlagEntry>& entries() const { return entries_; }
  std::vector<std::string> flag_names() const;

  // Applies `args` in order to `root`: each is a `section.field=value` override or a flag with its
  // values. `extra_flags` are the subcommand's own flags (for "did you mean"). Flags without
  // effect are appended to `no_effect` as given ("--transformer-impl transformer_engine").
  void apply(const std::vector<std::string>& args, void* root, std::vector<std::string>* no_effect,
             const std::vector<std::string>& extra_flags = {}) const;

  // For an unknown `section.key`: what the Megatron spelling `key` means ("" if nothing).
  std::string hint_for_key(const std::string& section, const std::string& key) const;

  std::string markdown() const;  // the mapping section of docs/config.md

 private:
  void add(FlagEntry e);
  const FieldTable& table_;
  std::vector<FlagEntry> entries_;
  std::vector<FlagEntry> prefixes_;
};

// "--norm-epsilon" for the field name "norm_epsilon".
std::string flag_of(const std::string& field_name);

}  // namespace strata::config
