// The tensor dumper's site selection (training/observability/tensor_dumper.h): glob patterns (`*` any run of
// characters, `?` one character) over Megatron's forward-site names "<owner>.<name>"
// (decoder.layers.3.residual_contribution, decoder.layers.3.mlp.router.router_logits,
// output_layer.output_logits), the site names a model has, the source kinds the
// patterns can reach (a kind no pattern can match is never turned on: a pattern on the residual
// contribution does not compute router_scores), and the logging.tensor_dump_* config rules.
// Reference: megatron/core/tensor_observation.py (owners, names), Python's fnmatch (* and ?).
#pragma once
#include <string>
#include <string_view>
#include <vector>

#include "core/observe.h"

namespace strata {

class ResolvedModelConfig;
class ResolvedConfig;

// True iff `pattern` matches all of `text` (`*`: any run of characters, dots included; `?`: one).
bool glob_match(std::string_view pattern, std::string_view text);

// Every site name the model of `m` emits: the paths of its manifest's sites (models/model_manifest.h).
std::vector<std::string> model_site_names(const ResolvedModelConfig& m);

// The kinds of the sites of `m` that some pattern matches (exact: no other kind is turned on).
SourceKinds site_kinds(const std::vector<std::string>& patterns, const ResolvedModelConfig& m);

// logging.tensor_dump_*: non-empty patterns that each match a site of the model, iterations
// only together with sites (and sites only with iterations), iterations the run reaches
// (<= training.train_iters: the last evaluation runs at train_iters), the directory only with
// sites. Throws config::ConfigError naming the field.
void validate_tensor_dump(const ResolvedConfig& c);

// logging.tensor_dump_dir, else <checkpoint.save>/tensor_dump, else ./tensor_dump.
std::string tensor_dump_dir(const ResolvedConfig& c);

// <dir>/iter_<7 digits>/rank_<4 digits>.safetensors
std::string tensor_dump_path(const std::string& dir, int64_t iteration, int rank);

}  // namespace strata
