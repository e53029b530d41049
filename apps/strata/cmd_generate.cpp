// `strata generate --load DIR (--prompt TEXT | --prompt-ids 1,2,3) [--max-new-tokens N]
//  [--temperature T] [--top-k K] [--top-p P] [--seed S] [--score] [--config-override k=v ...]`:
// loads the latest checkpoint under DIR (model weights only) and prints the prompt and its
// continuation as text, or with --score the JSON log-probabilities of the prompt tokens.
// Defaults come from the checkpoint config's inference section. The logic is in
// training/generation.h.
// Reference: Megatron-LM tools/run_text_generation_server.py, megatron/inference/text_generation.
#include <cstdio>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "apps/strata/commands.h"
#include "core/error.h"
#include "training/generation.h"

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

}  // namespace

void register_generate(CLI::App& app) {
  CLI::App* gen = app.add_subcommand("generate", "generate text from (or score a prompt with) a checkpoint");
  struct Opts {
    std::string load;
    std::optional<std::string> prompt, prompt_ids;
    std::optional<int64_t> max_new_tokens, top_k, seed;
    std::optional<double> temperature, top_p;
    bool score = false;
    std::vector<std::string> overrides;
  };
  auto o = std::make_shared<Opts>();
  gen->add_option("--load", o->load, "checkpoint directory (holds latest_checkpointed_iteration.txt)");
  gen->add_option("--prompt", o->prompt, "prompt text (encoded with the checkpoint's tokenizer)");
  gen->add_option("--prompt-ids", o->prompt_ids, "prompt token ids, comma-separated (1,2,3)");
  gen->add_option("--max-new-tokens", o->max_new_tokens, "tokens to generate (default inference.max_new_tokens)");
  gen->add_option("--temperature", o->temperature, "sampling temperature, 0 = greedy (default inference.temperature)");
  gen->add_option("--top-k", o->top_k, "keep the k most likely tokens, 0 = off (default inference.top_k)");
  gen->add_option("--top-p", o->top_p, "nucleus filtering, 0 = off (default inference.top_p)");
  gen->add_option("--seed", o->seed, "sampling seed (default inference.random_seed, else training.seed)");
  gen->add_flag("--score", o->score, "print the prompt tokens' log-probabilities as JSON instead of generating");
  gen->add_option("--config-override", o->overrides, "section.field=value applied to the checkpoint's config")
      ->expected(1, -1);
  add_runner(gen, [o] {
    STRATA_CHECK(!o->load.empty(), "strata generate: --load DIR is required");
    STRATA_CHECK(o->prompt.has_value() != o->prompt_ids.has_value(),
                 "strata generate: give exactly one of --prompt TEXT and --prompt-ids 1,2,3");
    std::vector<int64_t> ids;
    if (o->prompt_ids) ids = parse_ids(*o->prompt_ids);
    generation::LoadedModel lm = generation::load_for_inference(o->load, o->overrides);
    if (o->prompt) ids = lm.tokenizer->encode(*o->prompt);
    STRATA_CHECK(!ids.empty(), "strata generate: the prompt has no tokens");
    if (o->score) {
      std::printf("%s\n", generation::score(*lm.model, ids).to_json().c_str());
      return 0;
    }
    generation::GenerateOptions go = generation::options_from_config(lm.config);
    if (o->max_new_tokens) go.max_new_tokens = *o->max_new_tokens;
    if (o->temperature) go.sampling.temperature = *o->temperature;
    if (o->top_k) go.sampling.top_k = *o->top_k;
    if (o->top_p) go.sampling.top_p = *o->top_p;
    if (o->seed) go.sampling.seed = static_cast<uint64_t>(*o->seed);
    go.eod = lm.tokenizer->eod();
    std::vector<int64_t> all = ids;
    for (int64_t t : generation::generate(*lm.model, ids, go)) all.push_back(t);
    std::printf("%s\n", lm.tokenizer->decode(all).c_str());
    return 0;
  });
}

}  // namespace strata::app
