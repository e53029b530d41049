// `strata generate --load DIR [--iteration N] (--prompt TEXT | --prompt-ids 1,2,3) [--max-new-tokens N]
//  [--temperature T] [--top-k K] [--top-p P] [--seed S] [--score] [--config-override k=v ...]`:
// loads the latest checkpoint under DIR (or iteration N; model weights only) and prints the
// prompt and its continuation as text, or with --score the JSON log-probabilities of the prompt
// tokens. Defaults come from the checkpoint config's inference section; the flags obey that
// section's rules (temperature >= 0 with 0 greedy, top_k >= 0, top_p in [0, 1], not both filters),
// and a --max-new-tokens beyond the model's positions is said on stderr. The logic is in
// training/inference/generation.h.
// Reference: Megatron-LM tools/run_text_generation_server.py, megatron/inference/text_generation.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "apps/strata/commands.h"
#include "core/error.h"
#include "training/inference/generation.h"
#include "training/observability/router_tracer.h"

namespace strata::app {
namespace {

std::vector<int64_t> parse_ids(const std::string& s) {
  std::vector<int64_t> ids;
  size_t pos = 0;
  while (pos <= s.size()) {
    const size_t comma = s.find(',', pos);
    const std::string part = s.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos);
    size_t used = 0;
    long long v = 0;
    try {
      v = std::stoll(part, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    STRATA_CHECK(used > 0 && used == part.size(), "strata generate: --prompt-ids '", s,
                 "' is not a comma-separated list of token ids");
    ids.push_back(v);
    if (comma == std::string::npos) break;
    pos = comma + 1;
  }
  return ids;
}

// The sampling flags checked as the config's inference section checks its fields (CLI errors
// name the flag). A filter given on the command line replaces the config's other filter.
struct SamplingFlags {
  std::optional<int64_t> max_new_tokens, top_k, seed;
  std::optional<double> temperature, top_p;
};
void check_flags(const SamplingFlags& f) {
  if (f.temperature)
    STRATA_CHECK(std::isfinite(*f.temperature) && *f.temperature >= 0, "strata generate: --temperature must be >= 0 "
                 "(0: greedy), got ", *f.temperature);
  if (f.top_k) STRATA_CHECK(*f.top_k >= 0, "strata generate: --top-k must be >= 0 (0: off), got ", *f.top_k);
  if (f.top_p)
    STRATA_CHECK(std::isfinite(*f.top_p) && *f.top_p >= 0 && *f.top_p <= 1,
                 "strata generate: --top-p must be in [0, 1] (0: off), got ", *f.top_p);
  STRATA_CHECK(!(f.top_k && f.top_p && *f.top_k > 0 && *f.top_p > 0),
               "strata generate: --top-k and --top-p cannot be combined; use one of them");
  if (f.max_new_tokens)
    STRATA_CHECK(*f.max_new_tokens > 0, "strata generate: --max-new-tokens must be > 0, got ", *f.max_new_tokens);
  if (f.seed) STRATA_CHECK(*f.seed >= 0, "strata generate: --seed must be >= 0, got ", *f.seed);
}

void apply_flags(const SamplingFlags& f, generation::GenerateOptions& go) {
  if (f.max_new_tokens) go.max_new_tokens = *f.max_new_tokens;
  if (f.temperature) go.sampling.temperature = *f.temperature;
  if (f.top_k) {
    go.sampling.top_k = *f.top_k;
    if (*f.top_k > 0) go.sampling.top_p = 0.0;  // the chosen filter replaces the config's top_p
  }
  if (f.top_p) {
    go.sampling.top_p = *f.top_p;
    if (*f.top_p > 0) go.sampling.top_k = 0;
  }
  if (f.seed) go.sampling.seed = static_cast<uint64_t>(*f.seed);
}

}  // namespace

void register_generate(CLI::App& app) {
  CLI::App* gen = app.add_subcommand("generate", "generate text from (or score a prompt with) a checkpoint");
  struct Opts {
    std::string load, config;
    std::optional<std::string> prompt, prompt_ids;
    SamplingFlags flags;
    std::optional<int64_t> iteration;
    bool score = false;
    std::vector<std::string> overrides;
  };
  auto o = std::make_shared<Opts>();
  gen->add_option("--load", o->load, "checkpoint directory (holds latest_checkpointed_iteration.txt)");
  gen->add_option("--config", o->config,
                  "instead of --load: this config's model as `strata train` initializes it, untrained");
  gen->add_option("--iteration", o->iteration, "iteration to load (default: the tracker's latest)");
  gen->add_option("--prompt", o->prompt, "prompt text (encoded with the checkpoint's tokenizer)");
  gen->add_option("--prompt-ids", o->prompt_ids, "prompt token ids, comma-separated (1,2,3)");
  SamplingFlags& f = o->flags;
  gen->add_option("--max-new-tokens", f.max_new_tokens, "tokens to generate, > 0 (default inference.max_new_tokens)");
  gen->add_option("--temperature", f.temperature,
                  "sampling temperature >= 0, 0 = greedy (default inference.temperature)");
  gen->add_option("--top-k", f.top_k,
                  "keep the k most likely tokens, 0 = off (default inference.top_k; replaces its top_p)");
  gen->add_option("--top-p", f.top_p,
                  "nucleus filtering in [0, 1], 0 = off (default inference.top_p; replaces its top_k)");
  gen->add_option("--seed", f.seed, "sampling seed >= 0 (default inference.random_seed, else training.seed)");
  gen->add_flag("--score", o->score, "print the prompt tokens' log-probabilities as JSON instead of generating");
  gen->add_option("--config-override", o->overrides, "section.field=value applied to the checkpoint's config")
      ->expected(1, -1);
  add_one_process_runner(gen, [o] {
    STRATA_CHECK(o->load.empty() != o->config.empty(),
                 "strata generate: give exactly one of --load DIR (a checkpoint) and --config FILE (untrained)");
    STRATA_CHECK(o->prompt.has_value() != o->prompt_ids.has_value(),
                 "strata generate: give exactly one of --prompt TEXT and --prompt-ids 1,2,3");
    check_flags(o->flags);  // before the checkpoint is read
    std::vector<int64_t> ids;
    if (o->prompt_ids) ids = parse_ids(*o->prompt_ids);
    STRATA_CHECK(!(o->iteration && !o->config.empty()), "strata generate: --iteration needs --load");
    generation::LoadedModel lm = o->config.empty() ? generation::load_for_inference(o->load, o->overrides, o->iteration)
                                                   : generation::init_for_inference(o->config, o->overrides);
    if (o->prompt) ids = lm.tokenizer->encode(*o->prompt);
    STRATA_CHECK(!ids.empty(), "strata generate: the prompt has no tokens");
    if (o->score) {
      std::printf("%s\n", generation::score(*lm.model, ids).to_json().c_str());
      return 0;
    }
    generation::GenerateOptions go = generation::options_from_config(lm.config);
    apply_flags(o->flags, go);
    go.eod = lm.tokenizer->eod();
    const int64_t positions = lm.model->max_positions();
    const int64_t room = positions - static_cast<int64_t>(ids.size());
    if (go.max_new_tokens > room)
      std::fprintf(stderr,
                   "strata generate: warning: %lld new tokens asked for, but the model has %lld positions "
                   "(model.max_position_embeddings) and the prompt takes %lld: generating at most %lld\n",
                   static_cast<long long>(go.max_new_tokens), static_cast<long long>(positions),
                   static_cast<long long>(ids.size()), static_cast<long long>(std::max<int64_t>(room, 0)));
    // logging.moe_routing_trace_path (e.g. --config-override): trace the routers, one step per forward.
    RunObservers observers;
    if (auto tracer = make_router_tracer(lm.config, {lm.model.get()}, 0)) observers.add(std::move(tracer));
    go.observers = &observers;
    // The prompt, then each token as it comes; the detokenizer never splits a UTF-8 character.
    data::StreamingDetokenizer stream(*lm.tokenizer);
    go.on_token = [&](int64_t id) {
      std::fputs(stream.push(id).c_str(), stdout);
      std::fflush(stdout);
    };
    bool prompt_printed = false;  // after generate() has checked the prompt's ids
    go.on_token = [&, print = go.on_token](int64_t id) {
      if (!prompt_printed) {
        for (int64_t p : ids) std::fputs(stream.push(p).c_str(), stdout);
        prompt_printed = true;
      }
      print(id);
    };
    generation::generate(*lm.model, ids, go);
    if (!prompt_printed)
      for (int64_t p : ids) std::fputs(stream.push(p).c_str(), stdout);
    observers.finish();
    std::printf("%s\n", stream.finish().c_str());
    return 0;
  });
}

}  // namespace strata::app
