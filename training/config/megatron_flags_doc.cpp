// docs/megatron_flags.md from Megatron's argument list and Strata's flag table (see megatron_flags_doc.h).
#include "training/config/megatron_flags_doc.h"

#include <algorithm>
#include <map>
#include <vector>

#include "training/config/config.h"
#include "training/config/megatron_arguments.h"

namespace strata {

namespace {
enum class Status { Implemented = 0, Accepted = 1, Refused = 2, Unknown = 3 };

const config::MegatronFlags& flag_index() {
  static const config::MegatronFlags flags(StrataConfig::table().untyped());
  return flags;
}

Status status_of(const config::FlagEntry* e) {
  if (!e) return Status::Unknown;
  switch (e->kind) {
    case config::FlagEntry::Kind::Field:
    case config::FlagEntry::Kind::Constant: return Status::Implemented;
    case config::FlagEntry::Kind::NoEffect: return Status::Accepted;
    case config::FlagEntry::Kind::Unsupported: return Status::Refused;
  }
  return Status::Unknown;
}

const char* status_name(Status s) {
  switch (s) {
    case Status::Implemented: return "implemented";
    case Status::Accepted: return "accepted, no effect";
    case Status::Refused: return "refused";
    case Status::Unknown: return "unknown";
  }
  return "";
}

std::string escaped(std::string s) {
  std::string out;
  for (char c : s) out += c == '|' ? std::string("\\|") : std::string(1, c);
  return out;
}

// What the flag does in Strata, for the table's last column.
std::string meaning(const config::FlagEntry* e) {
  if (!e) return "";
  switch (e->kind) {
    case config::FlagEntry::Kind::Field:
      return "`" + e->path() + "`" + (e->arity == config::FlagArity::Switch ? " = " + e->value : "");
    case config::FlagEntry::Kind::Constant: return "`" + e->path() + "` = " + e->value;
    case config::FlagEntry::Kind::NoEffect: {
      std::string out = escaped(e->note);
      if (!e->accepted.empty()) {
        out += " (accepted: ";
        for (size_t i = 0; i < e->accepted.size(); ++i) out += (i ? ", `" : "`") + escaped(e->accepted[i]) + "`";
        out += "; other values refused)";
      }
      return out;
    }
    case config::FlagEntry::Kind::Unsupported: return escaped(e->note);
  }
  return "";
}

Status best_status(const MegatronArgument& a) {
  Status best = Status::Unknown;
  for (const std::string& f : a.flags) best = std::min(best, status_of(flag_index().find(f)));
  return best;
}

void count(MegatronFlagCounts& c, Status s) {
  (s == Status::Implemented ? c.implemented
   : s == Status::Accepted  ? c.accepted
   : s == Status::Refused   ? c.refused
                            : c.unknown)++;
}
}  // namespace

MegatronFlagCounts megatron_flag_counts(bool per_spelling) {
  MegatronFlagCounts c;
  for (const MegatronArgument& a : megatron_arguments()) {
    if (!per_spelling) {
      count(c, best_status(a));
      continue;
    }
    for (const std::string& f : a.flags) count(c, status_of(flag_index().find(f)));
  }
  return c;
}

std::string megatron_flags_markdown() {
  const MegatronFlagCounts args = megatron_flag_counts(false), spellings = megatron_flag_counts(true);
  auto row = [](const char* name, int a, int s) {
    return "| " + std::string(name) + " | " + std::to_string(a) + " | " + std::to_string(s) + " |\n";
  };
  std::string out =
      "# Megatron-LM flags in Strata\n\n"
      "<!-- Generated from training/config/megatron_arguments.tsv and the flag table (training/config/\n"
      "     megatron_flag_table.cpp, megatron_flags_*.cpp, and every config field's own flag); do not edit.\n"
      "     Regenerate with scripts/gen_config_doc.sh; the unit test [megatron_flags] fails when they differ. -->\n\n"
      "Every argument of Megatron-LM's training parser (`megatron/training/arguments.py`,\n"
      "`add_megatron_arguments`, with the flags generated from its config classes) and of its\n"
      "post-training flags (`megatron/post_training/arguments.py`, `add_modelopt_args`, which the\n"
      "ModelOpt model files pass) at commit `" + megatron_arguments_commit() + "`, and what `strata train`\n"
      "does with it:\n\n"
      "- **implemented**: the flag sets the Strata field shown (docs/config.md says what it does);\n"
      "- **accepted, no effect**: the flag selects a Megatron implementation choice that cannot change\n"
      "  Strata's numbers; it is accepted and listed once in the log (some only with the values shown);\n"
      "- **refused**: Strata lacks the capability named; the flag is an error that names it (and the\n"
      "  Strata alternative, where there is one).\n\n"
      "A flag that is not Megatron's is an error with the closest accepted name. The list is extracted\n"
      "by `scripts/megatron/extract_args.py` from a Megatron-LM checkout; a unit test fails when a\n"
      "Megatron flag has no status.\n\n"
      "| status | arguments | `--` spellings |\n|---|---|---|\n" +
      row("implemented", args.implemented, spellings.implemented) +
      row("accepted, no effect", args.accepted, spellings.accepted) +
      row("refused", args.refused, spellings.refused) + row("unknown", args.unknown, spellings.unknown) + "\n";
  std::map<std::string, std::vector<const MegatronArgument*>> groups;
  for (const MegatronArgument& a : megatron_arguments()) groups[a.group.empty() ? "other" : a.group].push_back(&a);
  for (const auto& [group, list] : groups) {
    out += "## " + group + "\n\n| flag | status | in Strata |\n|---|---|---|\n";
    for (const MegatronArgument* a : list)
      for (const std::string& f : a->flags) {
        const config::FlagEntry* e = flag_index().find(f);
        out += "| `" + f + "` | " + status_name(status_of(e)) + " | " + meaning(e) + " |\n";
      }
    out += "\n";
  }
  return out;
}

}  // namespace strata
