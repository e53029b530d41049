// `strata train [--config FILE] [section.field=value | Megatron flag ...] [--print-config] [--validate-only]
// [--help-config] [--overwrite]` (`--help` prints the usage and the same field table as --help-config):
// loads the StrataConfig (training/config/config.h; without --config, the defaults), applies the overrides and Megatron flags in order
// (core/megatron_flags.h; flags without effect are listed in one line), validates it with the
// launched world size (launched_world_size, parallel/distributed.h; --validate-only and
// --print-config without a launcher: parallel.world_size as given), checks model.vocab_size
// against the tokenizer and the checkpoint paths (training/checkpointing/checkpoint_paths.h), prints Megatron's
// argument table and calls training::run (training/run.h). Config errors exit 1 with
// "strata: error: ConfigError: section.field: ..." before anything is allocated.
// Reference: megatron/training/arguments.py (parse_args, validate_args, _print_args),
// megatron/training/training.py (pretrain).
#include <cstdio>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "apps/strata/commands.h"
#include "core/error.h"
#include "data/tokenizer.h"
#include "parallel/distributed.h"
#include "training/checkpointing/checkpoint_paths.h"
#include "training/config/config.h"
#include "training/run.h"

namespace strata::app {

void register_train(CLI::App& app) {
  CLI::App* train = app.add_subcommand(
      "train", "train a model from a YAML config and/or Megatron-LM's flags (docs/config.md)");
  struct Opts {
    std::string config;
    bool print_config = false, validate_only = false, help_config = false, overwrite = false;
  };
  auto o = std::make_shared<Opts>();
  train->add_option("--config", o->config,
                    "the run config (YAML), e.g. configs/gpt_tiny.yaml; without it, the defaults and the flags");
  accept_config_args(train);
  train->add_flag("--print-config", o->print_config, "print the resolved config as YAML and exit");
  train->add_flag("--validate-only", o->validate_only, "validate the config and exit 0 (valid) or 1 (invalid)");
  train->add_flag("--help-config", o->help_config, "list every config field with its type, default and doc");
  train->add_flag("--overwrite", o->overwrite,
                  "replace the Strata checkpoints already in checkpoint.save (= checkpoint.overwrite=true)");
  // `strata train --help`: the usage above, then every config field with its default and doc.
  train->footer([] { return "\n" + StrataConfig::help_text(); });
  add_runner(train, [o, train] {
    if (o->help_config) {
      std::printf("%s", StrataConfig::help_text().c_str());
      return 0;
    }
    // Without --config: the defaults plus the flags, as Megatron's pretrain_gpt.py takes its arguments.
    // Decoding and validation are pure: nothing is allocated before the config is known good.
    std::vector<std::string> no_effect;
    std::vector<std::string> args = config_args(train);
    if (o->overwrite) args.push_back("checkpoint.overwrite=true");
    StrataConfig cfg = StrataConfig::load(o->config, args, &no_effect, own_flags(train));
    apply_checkpoint_args(cfg);
    // Checking without running: parallel.world_size may describe a layout other than this launch
    // (`--validate-only parallel.world_size=8` on one process). Under a launcher it must match.
    const bool dry = o->print_config || o->validate_only;
    const std::optional<int64_t> launched = launched_world_size();
    const ResolvedConfig resolved = cfg.validate(dry ? launched : launched.value_or(1));
    report_no_effect_flags(no_effect);
    if (o->print_config) {
      std::printf("%s", resolved.to_yaml().c_str());
      return 0;
    }
    // model.vocab_size against the tokenizer, and the tokenizer's vocabulary padded, before allocation.
    const ResolvedModelConfig& m = resolved.model;
    const int64_t vocab = data::build_checked_tokenizer(*resolved.data, m->vocab_size)->vocab_size();
    if (!m->vocab_size && !m->padded_vocab_size)
      padded_vocab_size(vocab, m->make_vocab_size_divisible_by, resolved.parallel->tensor_model_parallel_size);
    training::check_checkpoint_paths(resolved, /*create_save=*/false);
    if (o->validate_only) {
      std::printf("strata train: %s is valid\n", o->config.empty() ? "the configuration" : o->config.c_str());
      return 0;
    }
    // A multi-task Slurm job's batch script (no srun) would train alone instead of on its ranks.
    if (auto tasks = slurm_tasks_outside_step())
      STRATA_THROW_KIND(ErrorKind::Config, "this process runs in a Slurm allocation of ", *tasks,
                        " tasks (SLURM_NTASKS) but was not started by srun: run `srun strata train …`");
    std::printf("%s", resolved.argument_table().c_str());
    std::fflush(stdout);
    return training::run(resolved);
  });
}

}  // namespace strata::app
