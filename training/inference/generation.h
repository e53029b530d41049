// Text generation and scoring with a trained language model (`strata generate`): KV-cached sampling
// (prefill the prompt, then one token at a time) with temperature, top-k and top-p (nucleus)
// filtering, reproducible through the counter-based RNG (philox::uniform keyed by (seed, stream
// "generate"), element = step index); and scoring (log-probability of every prompt token given its
// prefix from one forward, log-softmax in double).
// Reference: Megatron-LM megatron/inference/text_generation/sampling.py (modify_logits_for_top_k_
// filtering, modify_logits_for_top_p_filtering, sample), generation.py (score_and_return_on_first_stage).
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "data/tokenizer.h"
#include "models/language_model.h"
#include "training/config/config.h"
#include "training/observability/run_observers.h"

namespace strata::generation {

struct SamplingOptions {
  double temperature = 1.0;  // 0: greedy (argmax; ties → the lowest id)
  int64_t top_k = 0;         // 0: off
  double top_p = 0.0;        // 0 (or >= 1): off
  uint64_t seed = 0;         // philox key seed; stream is philox::stream_id("generate")
};

// Keeps the k largest logits (ties at the k-th value are all kept) and sets the rest to -inf.
// k <= 0 or k >= size: unchanged.
void apply_top_k(std::vector<double>& logits, int64_t k);
// Nucleus filtering on softmax(logits): sorted by probability (descending, ties by id), a token is
// kept while the cumulative probability of the tokens before it is < p (so the most likely token
// is always kept and the token that crosses p is kept); the rest are set to -inf.
// p <= 0 or p >= 1: unchanged.
void apply_top_p(std::vector<double>& logits, double p);
// The sampling distribution: logits / temperature, then top-k, then top-p, then softmax (double).
// temperature must be > 0.
std::vector<double> sampling_probabilities(std::vector<double> logits, const SamplingOptions& opt);
// One token from `logits` (one position, the real vocabulary) for generation step `step`:
// greedy when temperature == 0, else inverse-CDF over sampling_probabilities with
// u = philox::uniform({seed, stream_id("generate")}, step).
int64_t sample_token(const std::vector<double>& logits, const SamplingOptions& opt, int64_t step);

struct GenerateOptions {
  int64_t max_new_tokens = 64;
  SamplingOptions sampling;
  std::optional<int64_t> eod;  // stop after sampling this id (it is included in the output)
  // The observers of the run (e.g. the router tracer): one RunObservers::Step per forward (the
  // prompt, then each decode step), ObservationPhase::Generate, iteration = the forward's index.
  // Null: none.
  RunObservers* observers = nullptr;
  // Called with each new token as it is sampled (streaming output). Empty: none.
  std::function<void(int64_t)> on_token;
};

// Generates up to max_new_tokens after `prompt` (batch 1) with a KV cache sized prompt + new
// tokens; returns the new tokens only. Throws when the prompt is empty or does not fit the
// model's positions; max_new_tokens is clipped to the positions left.
std::vector<int64_t> generate(LanguageModel& model, const std::vector<int64_t>& prompt, const GenerateOptions& opt);

struct ScoreResult {
  std::vector<int64_t> tokens;
  std::vector<std::optional<double>> logprobs;  // [0] is null
  double sum_logprob = 0.0;
  std::optional<double> perplexity;  // exp(-sum / (n - 1)); null for a one-token prompt
  std::string to_json() const;  // {"tokens":[...],"logprobs":[null,...],"sum_logprob":..,"perplexity":..}
};
// log p(token_i | tokens_<i) for every prompt token from one full forward.
ScoreResult score(LanguageModel& model, const std::vector<int64_t>& prompt);

// log-softmax of one row in double.
std::vector<double> log_softmax(const std::vector<double>& logits);

// A model loaded from a checkpoint directory for inference.
struct LoadedModel {
  ResolvedConfig config;  // the checkpoint's config with the overrides applied, resolved
  std::unique_ptr<data::Tokenizer> tokenizer;
  std::unique_ptr<LanguageModel> model;
  int64_t iteration = 0;
};
// Reads <dir>/latest_checkpointed_iteration.txt (or takes `iteration`) and the manifest's
// config, applies `overrides` ("section.field=value"), builds the tokenizer (model.vocab_size
// checked against it) and the model (training/config/model_factory.h) on training.device and loads the model weights only (no
// optimizer). Throws with a clear message when there is no checkpoint (at that iteration).
LoadedModel load_for_inference(const std::string& dir, const std::vector<std::string>& overrides = {},
                               std::optional<int64_t> iteration = std::nullopt);

// The model of a config file as `strata train` initializes it (training.seed), untrained: what a
// run says before it learns anything (scripts/run.sh prints it beside the trained model's sample).
// The overrides apply to the file; iteration 0.
LoadedModel init_for_inference(const std::string& config_file, const std::vector<std::string>& overrides = {});

// The sampling defaults of the config's inference section (random_seed null → training.seed).
GenerateOptions options_from_config(const ResolvedConfig& cfg);

}  // namespace strata::generation
