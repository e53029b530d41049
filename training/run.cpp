// training::run (training/run.h): Megatron's pretrain() on one process — tokenizer (for the
// vocabulary size), datasets (indexed .bin/.idx blends or mock data, split train/valid/test),
// the GPT model, and the Trainer loop. Reference: megatron/training/training.py (pretrain),
// pretrain_gpt.py (train_valid_test_datasets_provider).
#include "training/run.h"

#include <sstream>

#include "core/device.h"
#include "core/logging.h"
#include "data/blended_dataset.h"
#include "data/tokenizer.h"
#include "models/gpt_model.h"
#include "training/dataset_batch_source.h"
#include "training/trainer.h"

namespace strata::training {
namespace {

// Model FLOPs per token for forward + backward: 6·N (weights) + 12·L·h·s (attention scores and
// context, causal masking not discounted) — the PaLM / Megatron convention for MFU.
double gpt_flops_per_token(const StrataConfig& cfg, const std::vector<Parameter*>& params) {
  double n = 0;
  for (const Parameter* p : params)
    if (p->name != "embedding.position_embeddings.weight") n += static_cast<double>(p->value.numel());
  const auto& m = cfg.model;
  return 6.0 * n + 12.0 * m.num_layers * m.hidden_size * m.seq_length;
}

// Dense peak FLOP/s of one device for MFU (H100/H200 SXM datasheet); 0 (no MFU) on the CPU.
double peak_flops(Device device, Precision precision) {
  if (!device.is_cuda()) return 0.0;
  return precision == Precision::Bf16 ? 989e12 : 67e12;
}

}  // namespace

int run(const StrataConfig& validated) { return run_training(validated).exit_code; }

TrainResult run_training(const StrataConfig& validated, const RunHooks& hooks) {
  StrataConfig cfg = validated;
  const Device device = resolve_device(cfg.training.device);
  std::unique_ptr<data::Tokenizer> tokenizer = data::build_tokenizer(cfg);
  if (!cfg.model.vocab_size) {
    cfg.model.vocab_size = tokenizer->vocab_size();
    cfg.validate(1);
  }
  log::info("tokenizer {}: vocab size {} (eod {}); device {}", tokenizer->name(), tokenizer->vocab_size(),
            tokenizer->eod(), device.str());

  const int64_t gbs = *cfg.training.global_batch_size;  // resolved by validate()
  const int64_t evals = cfg.training.eval_interval > 0 ? cfg.training.train_iters / cfg.training.eval_interval + 1 : 0;
  data::GPTDataConfig dc;
  std::ostringstream blend;
  for (const auto& b : cfg.data.blend()) blend << b.weight << " " << b.prefix << " ";
  dc.data_path = blend.str();
  dc.split = cfg.data.split;
  dc.seq_length = cfg.model.seq_length;
  dc.seed = static_cast<uint64_t>(cfg.training.seed);
  dc.num_samples = {cfg.training.train_iters * gbs, evals * cfg.training.eval_iters * gbs,
                    cfg.training.eval_iters * gbs};
  dc.mock = cfg.data.mock_data;
  dc.mock_config.vocab_size = tokenizer->vocab_size();
  dc.mock_config.eod_token = tokenizer->eod();
  dc.mock_config.seed = static_cast<uint64_t>(cfg.training.seed);
  auto datasets = data::build_gpt_datasets(dc);
  STRATA_CHECK_KIND(ErrorKind::Config, datasets[0] != nullptr,
                    "data.split: the training split of '", cfg.data.split, "' is empty");

  const int64_t nmb = cfg.num_micro_batches();
  DatasetBatchSource train(datasets[0], cfg.training.micro_batch_size, nmb, tokenizer->eod(), cfg.data.eod_mask_loss);
  std::unique_ptr<DatasetBatchSource> valid;
  if (datasets[1] && evals > 0)
    valid = std::make_unique<DatasetBatchSource>(datasets[1], cfg.training.micro_batch_size, nmb, tokenizer->eod(),
                                                 cfg.data.eod_mask_loss);

  GPTModel model(cfg, device);
  TrainerOptions options;
  options.sinks = hooks.sinks;
  options.log_stream = hooks.log_stream;
  const std::vector<Parameter*> params = model.parameters();
  const double fpt = gpt_flops_per_token(cfg, params);
  options.flops_per_token = [fpt] { return fpt; };
  options.peak_flops_per_second = peak_flops(device, cfg.training.precision);
  int64_t n_params = 0;
  for (const Parameter* p : params) n_params += p->value.numel();
  log::info("GPT model: {} parameters, {:.3g} model FLOPs per token", n_params, fpt);

  Trainer trainer(cfg, model, train, valid.get(), options);
  return trainer.train();
}

}  // namespace strata::training
