// The checkpoint architecture check (see checkpoint_architecture.h).
#include "training/checkpointing/checkpoint_architecture.h"

#include <yaml-cpp/yaml.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/error.h"
#include "training/checkpointing/checkpoint.h"
#include "training/checkpointing/megatron/megatron_args.h"
#include "training/checkpointing/megatron/megatron_checkpoint.h"

namespace strata {

namespace fs = std::filesystem;

std::string read_checkpoint_config(const std::string& load_dir, int64_t iteration) {
  const std::string dir = (fs::path(load_dir) / checkpoint_dir_name(iteration)).string();
  if (const CheckpointFormat f = detect_checkpoint_format(dir);
      f == CheckpointFormat::MegatronTorchDist || f == CheckpointFormat::MegatronTorch)  // Megatron's saved args
    return megatron_args_config_yaml(*read_megatron_args(dir));
  const fs::path manifest = fs::path(load_dir) / checkpoint_dir_name(iteration) / "manifest.json";
  std::ifstream in(manifest);
  STRATA_CHECK(in.good(), "checkpoint: cannot read ", manifest.string());
  std::stringstream text;
  text << in.rdbuf();
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text.str());
  } catch (const nlohmann::json::exception& e) {
    STRATA_THROW("checkpoint: ", manifest.string(), " is not valid JSON: ", e.what());
  }
  if (!j.is_object() || !j.contains("config")) return {};
  STRATA_CHECK(j.at("config").is_string(), "checkpoint: ", manifest.string(), ": \"config\" is ",
               j.at("config").type_name(), ", not a string");
  return j.at("config").get<std::string>();
}

namespace {
std::string shown(const YAML::Node& n) {
  YAML::Emitter e;
  e.SetSeqFormat(YAML::Flow);
  e << n;
  return e.c_str();
}
}  // namespace

std::vector<std::string> architecture_differences(const std::string& saved_config_yaml, const ResolvedConfig& cfg) {
  STRATA_INTERNAL_ASSERT(!saved_config_yaml.empty(), "architecture_differences without a saved config");
  YAML::Node saved, ours, defaults;
  try {
    saved = YAML::Load(saved_config_yaml)["model"];
    ours = YAML::Load(cfg.to_yaml())["model"];
  } catch (const YAML::Exception& e) {
    STRATA_THROW("checkpoint: the saved config is not valid YAML: ", e.what());
  }
  std::vector<std::string> out;
  if (!saved || !saved.IsMap()) return {"the checkpoint's config has no model section"};
  for (const std::string& f : architecture_field_names()) {
    YAML::Node a;
    a.reset(saved[f]);
    const YAML::Node b = ours[f];
    STRATA_INTERNAL_ASSERT(b.IsDefined(), "architecture field model.", f, " is not in the config table");
    // Not resolved yet in this run (a null model.vocab_size is the tokenizer's; the Trainer checks
    // again once it is known).
    if (b.IsNull()) continue;
    // A field the saved config lacks (written before the field existed) held its default then.
    if (!a.IsDefined()) {
      if (!defaults.IsDefined() || defaults.IsNull()) defaults.reset(YAML::Load(StrataConfig().to_yaml())["model"]);
      a.reset(defaults[f]);
    }
    if (shown(a) != shown(b)) out.push_back("model." + f + ": the checkpoint has " + shown(a) + ", this run " + shown(b));
  }
  return out;
}

namespace {

// The saved run's padded vocabulary against this run's (Megatron pads vocab_size up to a multiple
// of make_vocab_size_divisible_by × tensor_model_parallel_size, so another tp pads differently):
// a ConfigError naming model.make_vocab_size_divisible_by with the value that pads to the
// checkpoint's rows again, when one exists.
void check_vocabulary_padding(const std::string& saved_yaml, const ResolvedConfig& cfg, const std::string& load_dir) {
  if (saved_yaml.empty()) return;
  const YAML::Node saved = YAML::Load(saved_yaml);
  const YAML::Node v = saved["model"]["vocab_size"], m = saved["model"]["make_vocab_size_divisible_by"],
                   t = saved["parallel"]["tensor_model_parallel_size"];
  if (!v || !m || !t || v.IsNull() || m.IsNull() || t.IsNull()) return;
  // An explicit model.padded_vocab_size on either side: the rows are compared with the tensors' shapes.
  if (cfg.model->padded_vocab_size || (saved["model"]["padded_vocab_size"] && !saved["model"]["padded_vocab_size"].IsNull()))
    return;
  const int64_t vocab = v.as<int64_t>(), saved_tp = t.as<int64_t>();
  // (a null model.vocab_size is the tokenizer's, checked against the checkpoint's tensors later)
  if (cfg.model->vocab_size && vocab != *cfg.model->vocab_size) return;  // an architecture difference
  const int64_t rows = padded_vocab_size(vocab, m.as<int64_t>(), saved_tp);
  const int64_t tp = cfg.parallel->tensor_model_parallel_size;
  const int64_t ours = padded_vocab_size(vocab, cfg.model->make_vocab_size_divisible_by, tp);
  if (rows == ours) return;
  std::string fix = "no make_vocab_size_divisible_by pads it to " + std::to_string(rows) + " rows at this tp";
  for (int64_t d = rows / tp; d >= 1; --d)
    if (rows % (d * tp) == 0 && padded_vocab_size(vocab, d, tp) == rows) {
      fix = "set model.make_vocab_size_divisible_by=" + std::to_string(d) + " to pad it to the same rows";
      break;
    }
  throw config::ConfigError(
      "model.make_vocab_size_divisible_by",
      "the checkpoint in '" + load_dir + "' pads the vocabulary (" + std::to_string(vocab) + ") to " +
          std::to_string(rows) + " rows (make_vocab_size_divisible_by " + std::to_string(m.as<int64_t>()) +
          " × tensor_model_parallel_size " + std::to_string(saved_tp) + "), this run to " + std::to_string(ours) +
          " (" + std::to_string(cfg.model->make_vocab_size_divisible_by) + " × " + std::to_string(tp) + "): " + fix);
}

}  // namespace

std::vector<std::string> check_checkpoint_architecture(const std::string& load_dir, int64_t iteration,
                                                       const ResolvedConfig& cfg) {
  const std::string saved = read_checkpoint_config(load_dir, iteration);
  const std::string where = "'" + load_dir + "' (iteration " + std::to_string(iteration) + ")";
  if (saved.empty()) {  // nothing to compare: refused unless the user says how to treat it
    const std::string why = where + ": its manifest.json has no \"config\", so its model cannot be compared with this run's";
    if (cfg.checkpoint->finetune) return {why};
    if (cfg.checkpoint->allow_unchecked_architecture) return {};
    throw config::ConfigError("checkpoint.load",
                              why + ". Set checkpoint.finetune=true to load only the tensors the two models share, or "
                                    "checkpoint.allow_unchecked_architecture=true to resume trusting that the models "
                                    "are the same (the tensors' shapes are still checked)");
  }
  const std::vector<std::string> diffs = architecture_differences(saved, cfg);
  if (diffs.empty() && !cfg.checkpoint->finetune) check_vocabulary_padding(saved, cfg, load_dir);
  if (diffs.empty() || cfg.checkpoint->finetune) return diffs;
  std::string list;
  for (const std::string& d : diffs) list += "\n  " + d;
  throw config::ConfigError("checkpoint.load",
                            where + " holds another model than this run's:" + list +
                                "\nResume with the checkpoint's model, or set checkpoint.finetune=true to load only "
                                "the tensors the two models share (each skipped tensor is listed)");
}

}  // namespace strata
