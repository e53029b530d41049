// KV-cached sampling, scoring and checkpoint loading for inference (see generation.h).
#include "training/inference/generation.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <numeric>
#include <sstream>

#include "core/device.h"
#include "core/error.h"
#include "core/philox.h"
#include "training/checkpointing/checkpoint.h"
#include "training/checkpointing/checkpoint_tokenizer.h"
#include "training/config/model_factory.h"
#include "training/checkpointing/tensor_file.h"

namespace strata::generation {

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

constexpr double kNegInf = -std::numeric_limits<double>::infinity();

int64_t argmax(const std::vector<double>& v) {
  int64_t best = 0;
  for (size_t i = 1; i < v.size(); ++i)
    if (v[i] > v[static_cast<size_t>(best)]) best = static_cast<int64_t>(i);
  return best;
}

std::vector<double> softmax(const std::vector<double>& logits) {
  double m = kNegInf;
  for (double x : logits) m = std::max(m, x);
  std::vector<double> p(logits.size());
  double s = 0;
  for (size_t i = 0; i < logits.size(); ++i) {
    p[i] = logits[i] == kNegInf ? 0.0 : std::exp(logits[i] - m);
    s += p[i];
  }
  for (double& x : p) x /= s;
  return p;
}

// The logits of the last position of a [1, s, v] logits tensor.
std::vector<double> last_row(const Tensor& logits) {
  const int64_t s = logits.shape()[1];
  return logits.narrow(1, s - 1, 1).contiguous().to_vector();
}

Tensor token_tensor(const std::vector<int64_t>& ids, Device device) {
  return Tensor::from_data(ids, Shape{1, static_cast<int64_t>(ids.size())}, device);
}

void check_ids(const LanguageModel& model, const std::vector<int64_t>& prompt) {
  STRATA_CHECK(!prompt.empty(), "generate: the prompt is empty");
  const int64_t v = model.vocab_size();
  for (int64_t t : prompt)
    STRATA_CHECK(t >= 0 && t < v, "generate: prompt token ", t, " is outside the vocabulary [0, ", v, ")");
  const int64_t max_pos = model.max_positions();
  STRATA_CHECK(static_cast<int64_t>(prompt.size()) <= max_pos, "generate: the prompt has ", prompt.size(),
               " tokens, more than the model's ", max_pos, " positions (model.max_position_embeddings)");
}

}  // namespace

void apply_top_k(std::vector<double>& logits, int64_t k) {
  if (k <= 0 || k >= static_cast<int64_t>(logits.size())) return;
  std::vector<double> sorted = logits;
  std::nth_element(sorted.begin(), sorted.begin() + (k - 1), sorted.end(), std::greater<double>());
  const double kth = sorted[static_cast<size_t>(k - 1)];
  for (double& x : logits)
    if (x < kth) x = kNegInf;
}

void apply_top_p(std::vector<double>& logits, double p) {
  if (p <= 0.0 || p >= 1.0) return;
  const std::vector<double> probs = softmax(logits);
  std::vector<size_t> order(logits.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return probs[a] > probs[b]; });
  double cum = 0.0;
  for (size_t r = 0; r < order.size(); ++r) {
    if (r > 0 && cum >= p) logits[order[r]] = kNegInf;
    cum += probs[order[r]];
  }
}

std::vector<double> sampling_probabilities(std::vector<double> logits, const SamplingOptions& opt) {
  STRATA_CHECK(opt.temperature > 0.0, "generate: temperature must be > 0 for sampling, got ", opt.temperature);
  STRATA_CHECK(!logits.empty(), "generate: empty logits");
  for (double& x : logits) x /= opt.temperature;
  apply_top_k(logits, opt.top_k);
  apply_top_p(logits, opt.top_p);
  return softmax(logits);
}

int64_t sample_token(const std::vector<double>& logits, const SamplingOptions& opt, int64_t step) {
  STRATA_CHECK(opt.temperature >= 0.0, "generate: temperature must be >= 0, got ", opt.temperature);
  if (opt.temperature == 0.0) return argmax(logits);
  const std::vector<double> probs = sampling_probabilities(logits, opt);
  const double u = philox::uniform(philox::Key{opt.seed, philox::stream_id("generate")}, static_cast<uint64_t>(step));
  double cum = 0.0;
  int64_t last = -1;
  for (size_t i = 0; i < probs.size(); ++i) {
    if (probs[i] <= 0.0) continue;
    last = static_cast<int64_t>(i);
    cum += probs[i];
    if (u < cum) return last;
  }
  return last;  // rounding: u beyond the accumulated sum
}

std::vector<int64_t> generate(LanguageModel& model, const std::vector<int64_t>& prompt, const GenerateOptions& opt) {
  check_ids(model, prompt);
  STRATA_CHECK(opt.max_new_tokens >= 0, "generate: max_new_tokens must be >= 0, got ", opt.max_new_tokens);
  const int64_t n = static_cast<int64_t>(prompt.size());
  const int64_t new_tokens = std::min(opt.max_new_tokens, model.max_positions() - n);
  std::vector<int64_t> out;
  if (new_tokens <= 0) return out;
  InferenceCache cache = model.make_inference_cache(1, n + new_tokens);
  RunObservers none;
  RunObservers& observers = opt.observers ? *opt.observers : none;
  int64_t forward = 0;  // the observation step of each forward
  auto run = [&](const std::vector<int64_t>& ids, int64_t position) {
    RunObservers::Step observed(observers, ObservationContext{forward++, 0, 0, ObservationPhase::Generate});
    return last_row(model.logits_for(token_tensor(ids, model.device()), &cache, position));
  };
  std::vector<double> logits = run(prompt, 0);
  for (int64_t step = 0; step < new_tokens; ++step) {
    const int64_t tok = sample_token(logits, opt.sampling, step);
    out.push_back(tok);
    if (opt.on_token) opt.on_token(tok);
    if ((opt.eod && tok == *opt.eod) || step + 1 == new_tokens) break;
    logits = run({tok}, n + step);
  }
  return out;
}

std::vector<double> log_softmax(const std::vector<double>& logits) {
  double m = kNegInf;
  for (double x : logits) m = std::max(m, x);
  double s = 0;
  for (double x : logits) s += std::exp(x - m);
  const double lse = m + std::log(s);
  std::vector<double> out(logits.size());
  for (size_t i = 0; i < logits.size(); ++i) out[i] = logits[i] - lse;
  return out;
}

ScoreResult score(LanguageModel& model, const std::vector<int64_t>& prompt) {
  check_ids(model, prompt);
  const int64_t n = static_cast<int64_t>(prompt.size());
  const std::vector<double> all = model.logits_for(token_tensor(prompt, model.device()), nullptr, 0).to_vector();
  const size_t v = all.size() / static_cast<size_t>(n);
  ScoreResult r;
  r.tokens = prompt;
  r.logprobs.push_back(std::nullopt);
  for (int64_t i = 1; i < n; ++i) {
    std::vector<double> row(all.begin() + static_cast<std::ptrdiff_t>((i - 1) * v),
                            all.begin() + static_cast<std::ptrdiff_t>(i * v));
    const double lp = log_softmax(row)[static_cast<size_t>(prompt[static_cast<size_t>(i)])];
    r.logprobs.push_back(lp);
    r.sum_logprob += lp;
  }
  if (n > 1) r.perplexity = std::exp(-r.sum_logprob / static_cast<double>(n - 1));
  return r;
}

std::string ScoreResult::to_json() const {
  nlohmann::ordered_json j;  // keys in the documented order
  j["tokens"] = tokens;
  nlohmann::ordered_json lps = nlohmann::ordered_json::array();
  for (const auto& lp : logprobs) lps.push_back(lp ? nlohmann::ordered_json(*lp) : nlohmann::ordered_json(nullptr));
  j["logprobs"] = lps;
  j["sum_logprob"] = sum_logprob;
  j["perplexity"] = perplexity ? nlohmann::ordered_json(*perplexity) : nlohmann::ordered_json(nullptr);
  return j.dump();
}

namespace {
// A config in one process (the saving or configured layout dropped): its tokenizer (the vocabulary
// from it when unset), validated, and its model on training.device, not yet initialized.
LoadedModel build_single_process_model(StrataConfig raw, int64_t iteration) {
  raw.parallel = ParallelConfig{};  // any saving layout (tp/pp/dp); generation runs in one process
  std::unique_ptr<data::Tokenizer> tokenizer = data::build_checked_tokenizer(raw.data, raw.model.vocab_size);
  if (!raw.model.vocab_size) raw.model.vocab_size = tokenizer->vocab_size();
  ResolvedConfig cfg = raw.validate(1);
  std::unique_ptr<LanguageModel> model = make_model(cfg, resolve_device(cfg.training->device));
  return LoadedModel{std::move(cfg), std::move(tokenizer), std::move(model), iteration};
}
}  // namespace

LoadedModel init_for_inference(const std::string& config_file, const std::vector<std::string>& overrides) {
  LoadedModel lm = build_single_process_model(StrataConfig::load(config_file, overrides), 0);
  lm.model->init_parameters(static_cast<uint64_t>(lm.config.training->seed));
  return lm;
}

LoadedModel load_for_inference(const std::string& dir, const std::vector<std::string>& overrides,
                               std::optional<int64_t> iteration) {
  STRATA_CHECK(fs::is_directory(dir), "generate: --load ", dir, " is not a directory");
  if (iteration) {
    STRATA_CHECK(*iteration >= 0, "generate: --iteration must be >= 0, got ", *iteration);
    STRATA_CHECK(fs::is_directory(fs::path(dir) / checkpoint_dir_name(*iteration)), "generate: no checkpoint at "
                 "iteration ", *iteration, " under ", dir, " (", checkpoint_dir_name(*iteration), " is missing)");
  } else {
    iteration = read_checkpoint_tracker(dir);
  }
  STRATA_CHECK(iteration.has_value(), "generate: no checkpoint under ", dir, " (", kTrackerFile,
               " is missing); train with checkpoint.save set first");
  const fs::path manifest_path = fs::path(dir) / checkpoint_dir_name(*iteration) / "manifest.json";
  std::ifstream in(manifest_path, std::ios::binary);
  STRATA_CHECK(in.good(), "generate: cannot read ", manifest_path.string());
  std::stringstream ss;
  ss << in.rdbuf();
  json manifest;
  try {
    manifest = json::parse(ss.str());
  } catch (const std::exception& e) {
    STRATA_CHECK(false, "generate: ", manifest_path.string(), " is not valid JSON: ", e.what());
  }
  const auto jc = manifest.find("config");  // end() when the manifest is not an object
  STRATA_CHECK(jc != manifest.end() && jc->is_string() && !jc->get<std::string>().empty(), "generate: ",
               manifest_path.string(), " holds no config (a non-empty \"config\" string)");
  const std::string yaml = jc->get<std::string>();

  StrataConfig raw = StrataConfig::from_yaml_text(yaml, {}, manifest_path.string() + " (config)");
  use_checkpoint_tokenizer(manifest, manifest_path, raw.data);  // the checkpoint's own copies
  // The training run's router-trace settings are not generation's (its trace would be truncated):
  // generation traces only when the overrides ask (logging.moe_routing_trace_path=…).
  const LoggingConfig untraced;
  LoggingConfig& lg = raw.logging;
  lg.moe_routing_trace_path = untraced.moe_routing_trace_path;
  lg.moe_routing_trace_max_training_iters = untraced.moe_routing_trace_max_training_iters;
  lg.moe_routing_trace_max_inference_steps = untraced.moe_routing_trace_max_inference_steps;
  lg.moe_routing_trace_capture_logits = untraced.moe_routing_trace_capture_logits;
  lg.moe_routing_trace_capture_hidden_states = untraced.moe_routing_trace_capture_hidden_states;
  lg.moe_routing_trace_dump_weights = untraced.moe_routing_trace_dump_weights;
  StrataConfig::table().apply_command_line(overrides, raw, nullptr);
  LoadedModel lm = build_single_process_model(std::move(raw), *iteration);
  std::unique_ptr<TensorFileIO> io = make_default_tensor_file_io();
  CheckpointLoadOptions lo;
  lo.load_optimizer = false;
  lo.load_rng = false;
  lo.vocab_padding_may_differ = true;  // a checkpoint saved under tp > 1 pads the vocabulary more
  lo.holds_whole_model = true;
  // The parameters and the MoE routers' expert biases (inference routing selects with them).
  load_checkpoint(dir, checkpoint_tensors({lm.model.get()}), nullptr, *io, lo, *iteration);
  return lm;
}

GenerateOptions options_from_config(const ResolvedConfig& cfg) {
  GenerateOptions o;
  o.max_new_tokens = cfg.inference->max_new_tokens;
  o.sampling.temperature = cfg.inference->temperature;
  o.sampling.top_k = cfg.inference->top_k;
  o.sampling.top_p = cfg.inference->top_p;
  o.sampling.seed = static_cast<uint64_t>(cfg.inference->random_seed.value_or(cfg.training->seed));
  return o;
}

}  // namespace strata::generation
