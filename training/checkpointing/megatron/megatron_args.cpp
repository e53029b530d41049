// Megatron's saved arguments as a Strata config (see megatron_args.h).
#include "training/checkpointing/megatron/megatron_args.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cstdio>
#include <set>

#include "core/error.h"
#include "core/megatron_flags.h"
#include "models/config/model_config.h"
#include "training/checkpointing/megatron/megatron_checkpoint.h"
#include "training/checkpointing/megatron/megatron_legacy_read.h"
#include "training/config/config.h"

namespace strata {

using formats::PyValue;

namespace {

// An args value as YAML text; empty for None and values without a YAML form.
std::string yaml_text(const PyValue& v) {
  switch (v.kind) {
    case PyValue::Kind::Bool: return v.boolean ? "true" : "false";
    case PyValue::Kind::Int: return std::to_string(v.integer);
    case PyValue::Kind::Float: {
      char buf[40];
      std::snprintf(buf, sizeof buf, "%.17g", v.real);
      return buf;
    }
    case PyValue::Kind::Str: {
      YAML::Emitter e;
      e << YAML::DoubleQuoted << v.text;
      return e.c_str();
    }
    case PyValue::Kind::List:
    case PyValue::Kind::Tuple: {
      std::string s = "[";
      for (size_t i = 0; i < v.items.size(); ++i) {
        const std::string item = yaml_text(*v.items[i]);
        if (item.empty()) return {};
        s += (i ? ", " : "") + item;
      }
      return s + "]";
    }
    default: return {};
  }
}

// "--num-layers" → "num_layers" (argparse's dest).
std::string dest_of(const std::string& flag) {
  std::string d = flag.substr(flag.find_first_not_of('-'));
  std::replace(d.begin(), d.end(), '-', '_');
  return d;
}

}  // namespace

formats::PyRef read_megatron_args(const std::string& iteration_dir) {
  const CheckpointFormat format = detect_checkpoint_format(iteration_dir);
  STRATA_CHECK(format == CheckpointFormat::MegatronTorchDist || format == CheckpointFormat::MegatronTorch,
               "checkpoint: ", iteration_dir, " is not a Megatron torch_dist or torch checkpoint");
  const formats::PyRef common = format == CheckpointFormat::MegatronTorchDist ? read_megatron_common_state(iteration_dir)
                                                                              : read_megatron_legacy_common(iteration_dir);
  const PyValue* args = common->find("args");
  STRATA_CHECK(args && args->is_instance_of("argparse", "Namespace"), "checkpoint: ", iteration_dir,
               ": its common state has no saved args");
  return std::make_shared<PyValue>(*args);
}

std::string megatron_args_config_yaml(const PyValue& args, std::vector<std::string>* notes) {
  const auto& arch = architecture_field_names();
  const std::set<std::string> architecture(arch.begin(), arch.end());
  const config::MegatronFlags flags(StrataConfig::table().untyped());
  StrataConfig cfg;
  std::set<std::string> set_by_field;  // a field's own (or renamed) flag wins over constants
  for (int pass = 0; pass < 2; ++pass)
    for (const config::FlagEntry& e : flags.entries()) {
      if (e.section != "model" || !architecture.count(e.field)) continue;
      const bool field = e.kind == config::FlagEntry::Kind::Field;
      if ((pass == 0) != field) continue;
      if (!field && (e.kind != config::FlagEntry::Kind::Constant || set_by_field.count(e.field))) continue;
      const PyValue* v = args.attr(dest_of(e.flag));
      if (!v || v->is_none()) continue;
      std::string text;
      if (field) text = yaml_text(*v);
      else if (v->kind == PyValue::Kind::Bool && v->boolean) text = e.value;  // a switch that was given
      if (text.empty()) continue;
      if (field && e.value == "false" && v->kind == PyValue::Kind::Bool) continue;  // --no-X spellings
      try {
        cfg.apply_override("model." + e.field + "=" + text);
        if (field) set_by_field.insert(e.field);
      } catch (const std::exception& ex) {
        if (notes) notes->push_back("model." + e.field + ": args." + dest_of(e.flag) + "=" + text + " (" + ex.what() + ")");
      }
    }
  return cfg.to_yaml();
}

}  // namespace strata
