// Megatron-LM command-line flags onto the config table (core/megatron_flags.h): the flag index
// (by-name flags of every field plus the table's rules), applying an argument list in order, and
// hints for section-style near-misses. The Markdown of the mapping is in core/config_text.cpp.
// Reference: megatron/training/arguments.py, megatron/training/argument_utils.py.
#include "core/megatron_flags.h"

#include <charconv>
#include <map>

#include "core/config_table.h"

namespace strata::config {

MegatronFlagRule rename_flag(std::string flag, std::string field) {
  return {MegatronFlagRule::Kind::Rename, std::move(flag), std::move(field), "", FlagArity::One, ""};
}
MegatronFlagRule constant_flag(std::string flag, std::string field, std::string value) {
  return {MegatronFlagRule::Kind::Constant, std::move(flag), std::move(field), std::move(value), FlagArity::Switch, ""};
}
MegatronFlagRule no_effect_flag(std::string flag, FlagArity arity, std::string note, std::vector<std::string> accepted) {
  return {MegatronFlagRule::Kind::NoEffect, std::move(flag), "", "", arity, std::move(note), std::move(accepted)};
}
MegatronFlagRule unsupported_flag(std::string flag, FlagArity arity, std::string feature, std::string field) {
  return {MegatronFlagRule::Kind::Unsupported, std::move(flag), std::move(field), "", arity, std::move(feature)};
}

std::string flag_of(const std::string& field_name) {
  std::string out = "--" + field_name;
  for (char& c : out)
    if (c == '_') c = '-';
  return out;
}

namespace {
const FieldSpec* find_anywhere(const FieldTable& t, const std::string& name) {
  for (const auto& s : t.sections())
    if (const FieldSpec* f = s.find(name)) return f;
  return nullptr;
}

FlagArity arity_of(const FieldSpec& f) {
  if (f.type == FieldType::Bool) return FlagArity::Switch;
  if (f.type == FieldType::IntList || f.type == FieldType::DoubleList || f.type == FieldType::StringList)
    return FlagArity::List;
  return FlagArity::One;
}

FlagEntry field_entry(const FieldSpec& f, std::string flag, std::string value, bool by_name) {
  FlagEntry e;
  e.kind = FlagEntry::Kind::Field;
  e.flag = std::move(flag);
  e.section = f.section;
  e.field = f.name;
  e.arity = arity_of(f);
  e.value = f.type == FieldType::Bool ? std::move(value) : "";
  e.by_name = by_name;
  return e;
}

bool looks_like_number(const std::string& s) {
  double d;
  auto r = std::from_chars(s.data(), s.data() + s.size(), d);
  return r.ec == std::errc() && r.ptr == s.data() + s.size();
}
bool is_flag(const std::string& a) {
  return a.size() > 1 && a[0] == '-' && !looks_like_number(a);
}
}  // namespace

void MegatronFlags::add(FlagEntry e) {
  if (find(e.flag)) return;  // the first declaration wins: fields before rules
  entries_.push_back(std::move(e));
}

MegatronFlags::MegatronFlags(const FieldTable& table) : table_(table) {
  for (const auto& s : table.sections())
    for (const auto& f : s.fields) {
      add(field_entry(f, flag_of(f.name), "true", true));
      if (f.type == FieldType::Bool && f.name.rfind("no_", 0) != 0) {
        add(field_entry(f, flag_of("no_" + f.name), "false", true));
        add(field_entry(f, flag_of("disable_" + f.name), "false", true));
      }
    }
  for (const auto& r : table.megatron_rules()) {
    const FieldSpec* target = r.field.empty() ? nullptr : find_anywhere(table, r.field);
    FlagEntry e;
    e.flag = r.flag;
    e.note = r.note;
    e.arity = r.arity;
    e.accepted = r.accepted;
    switch (r.kind) {
      case MegatronFlagRule::Kind::Rename:
        STRATA_INTERNAL_ASSERT(target, "Megatron flag ", r.flag, " renames the undeclared field ", r.field);
        add(field_entry(*target, r.flag, "true", false));
        continue;
      case MegatronFlagRule::Kind::Constant:
        STRATA_INTERNAL_ASSERT(target, "Megatron flag ", r.flag, " sets the undeclared field ", r.field);
        e.kind = FlagEntry::Kind::Constant;
        e.section = target->section;
        e.field = target->name;
        e.value = r.value;
        break;
      case MegatronFlagRule::Kind::NoEffect: e.kind = FlagEntry::Kind::NoEffect; break;
      case MegatronFlagRule::Kind::Unsupported:
        if (target) {  // the feature has arrived: the flag now sets its field
          add(field_entry(*target, r.flag, "true", false));
          continue;
        }
        e.kind = FlagEntry::Kind::Unsupported;
        break;
    }
    if (!r.flag.empty() && r.flag.back() == '*') {
      e.flag.pop_back();
      prefixes_.push_back(std::move(e));
    } else {
      add(std::move(e));
    }
  }
}

const FlagEntry* MegatronFlags::find(const std::string& flag) const {
  for (const auto& e : entries_)
    if (e.flag == flag) return &e;
  for (const auto& p : prefixes_)
    if (flag.rfind(p.flag, 0) == 0) return &p;
  return nullptr;
}

std::vector<std::string> MegatronFlags::flag_names() const {
  std::vector<std::string> out;
  for (const auto& e : entries_) out.push_back(e.flag);
  return out;
}

namespace {
// Consumes the values of `e` starting after args[i]; advances i past them.
std::vector<std::string> take_values(const FlagEntry& e, const std::string& flag, const std::string* attached,
                                     const std::vector<std::string>& args, size_t& i, const FieldTable& table) {
  std::vector<std::string> vals;
  if (e.arity == FlagArity::Switch) {
    if (attached) throw ConfigError(flag, "is a switch and takes no value, got '" + flag + "=" + *attached + "'");
    return vals;
  }
  if (attached) return {*attached};
  if (e.arity == FlagArity::One) {
    if (i + 1 >= args.size() || args[i + 1].rfind("--", 0) == 0)
      throw ConfigError(flag, "expects a value" + (e.kind == FlagEntry::Kind::Field ? " (" + e.path() + ")" : ""));
    return {args[++i]};
  }
  auto is_override = [&](const std::string& a) {
    size_t eq = a.find('='), dot = a.find('.');
    return eq != std::string::npos && dot < eq && table.find_section(a.substr(0, dot));
  };
  while (i + 1 < args.size() && !is_flag(args[i + 1]) && !is_override(args[i + 1])) vals.push_back(args[++i]);
  return vals;
}

std::string joined(const std::string& flag, const std::vector<std::string>& vals) {
  std::string out = flag;
  for (const auto& v : vals) out += " " + v;
  return out;
}

// A no-effect flag whose values must name what Strata does: anything else is refused by name.
void check_accepted(const FlagEntry& e, const std::vector<std::string>& vals) {
  const std::string given = joined("", vals).substr(vals.empty() ? 0 : 1);
  for (const std::string& a : e.accepted)
    if (given == a) return;
  std::string list;
  for (const std::string& a : e.accepted) list += (list.empty() ? "'" : ", '") + a + "'";
  throw ConfigError(e.flag, "'" + given + "' is not supported by Strata (" + e.note + "); accepted: " + list);
}
}  // namespace

void MegatronFlags::apply(const std::vector<std::string>& args, void* root, std::vector<std::string>* no_effect,
                          const std::vector<std::string>& extra_flags) const {
  std::map<std::string, const FlagEntry*> constants_set;  // field path → the switch that set it
  const FlagEntry* previous_switch = nullptr;              // the flag just before, when a switch
  const FlagEntry* previous_one = nullptr;  // the flag just before, when a field flag with its one value
  std::string previous_value;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (!is_flag(a) && previous_one && a.find('=') == std::string::npos)  // `--cp-comm-type p2p a2a`
      throw ConfigError(previous_one->flag, "'" + previous_one->flag + "' takes one value in Strata (it sets " +
                                                previous_one->path() + "), but '" + a + "' follows '" +
                                                previous_value + "'; a list of values (Megatron's per-layer form of "
                                                "some flags) is not supported");
    previous_one = nullptr;
    if (!is_flag(a)) {
      if (previous_switch && a.find('=') == std::string::npos)  // `--swiglu true`: a switch takes no value
        throw ConfigError(previous_switch->flag,
                          "'" + previous_switch->flag + "' is a switch and takes no value, but '" + a +
                              "' follows it: give the flag alone" +
                              (previous_switch->section.empty()
                                   ? std::string()
                                   : " (it sets " + previous_switch->path() + "=" + previous_switch->value +
                                         "; any value: " + previous_switch->path() + "=VALUE)"));
      table_.apply_override(a, root);
      previous_switch = nullptr;
      continue;
    }
    size_t eq = a.find('=');
    std::string flag = a.substr(0, eq), attached = eq == std::string::npos ? "" : a.substr(eq + 1);
    const FlagEntry* e = find(flag);
    if (!e) {
      std::vector<std::string> names = flag_names();
      names.insert(names.end(), extra_flags.begin(), extra_flags.end());
      std::string hint = closest_match(flag, names);
      throw ConfigError(flag, "unknown flag '" + flag + "'" + (hint.empty() ? "" : "; did you mean '" + hint + "'?") +
                                  " (Megatron flags map onto config fields: docs/config.md)");
    }
    std::vector<std::string> vals =
        take_values(*e, flag, eq == std::string::npos ? nullptr : &attached, args, i, table_);
    const std::string where = "flag '" + joined(flag, vals) + "'";
    previous_switch = e->arity == FlagArity::Switch && eq == std::string::npos ? e : nullptr;
    if (e->kind == FlagEntry::Kind::Field && e->arity == FlagArity::One && eq == std::string::npos) {
      previous_one = e;
      previous_value = vals.empty() ? "" : vals.front();
    }
    // Two switches that set one field to different values (--fp16 --bf16): refused, as Megatron's
    // validate_args refuses them, instead of the last one winning silently.
    if (e->kind == FlagEntry::Kind::Constant) {
      auto [it, fresh] = constants_set.emplace(e->path(), e);
      if (!fresh && it->second->value != e->value)
        throw ConfigError(e->path(), "'" + it->second->flag + "' and '" + e->flag + "' both set it (to " +
                                         it->second->value + " and " + e->value + "): give one of them");
    }
    switch (e->kind) {
      case FlagEntry::Kind::Field:
        if (e->arity == FlagArity::Switch)
          table_.set_from_text(e->section, e->field, {e->value}, false, root, where);
        else
          table_.set_from_text(e->section, e->field, vals, e->arity == FlagArity::List, root, where);
        break;
      case FlagEntry::Kind::Constant:
        table_.set_from_text(e->section, e->field, {e->value}, false, root, where);
        break;
      case FlagEntry::Kind::NoEffect:
        if (!e->accepted.empty()) check_accepted(*e, vals);
        if (no_effect) no_effect->push_back(joined(flag, vals));
        break;
      case FlagEntry::Kind::Unsupported: throw ConfigError(flag, "not supported by Strata: " + e->note);
    }
  }
}

std::string MegatronFlags::hint_for_key(const std::string& section, const std::string& key) const {
  const FlagEntry* e = find(flag_of(key));
  if (!e) return "";
  const std::string megatron = " (Megatron's " + e->flag + ")";
  switch (e->kind) {
    case FlagEntry::Kind::Field:
      if (e->by_name && e->field == key && e->section == section) return "";
      if (e->arity == FlagArity::Switch && e->value == "false")
        return "; did you mean '" + e->path() + "=false'?" + megatron;
      return "; did you mean '" + e->path() + "'?" + megatron;
    case FlagEntry::Kind::Constant: return "; did you mean '" + e->path() + "=" + e->value + "'?" + megatron;
    case FlagEntry::Kind::NoEffect:
      return "; Megatron's " + e->flag + " selects " + e->note + " and changes no numbers: drop it";
    case FlagEntry::Kind::Unsupported: return "; Megatron's " + e->flag + " is not supported by Strata: " + e->note;
  }
  return "";
}

}  // namespace strata::config
