// training::run (training/run.h): Megatron's pretrain() — joins the launched job (init_distributed:
// one process, or every rank of `mpirun -np N strata train …`), builds the process groups of the
// parallel layout, the tokenizer (for the vocabulary size), the datasets (indexed .bin/.idx blends
// or mock data, split train/valid/test; each data-parallel rank reads its micro-batches), the GPT
// model chunks from the model factory, and the Trainer loop. An error on any rank aborts every rank with the
// rank in the message (run_or_abort). Log lines come from the last rank (Megatron's
// print_rank_last); other ranks log warnings and errors only.
// Reference: megatron/training/training.py (pretrain), initialize.py (initialize_megatron),
// pretrain_gpt.py (train_valid_test_datasets_provider).
#include "training/run.h"

#include <algorithm>
#include <sstream>

#include "core/device.h"
#include "core/logging.h"
#include "core/memory_history.h"
#include "core/config_table.h"
#include "data/blended_dataset.h"
#include "data/document_source.h"
#include "data/tokenizer.h"
#include "kernels/cpu/blas_core.h"
#include "kernels/gemm.h"
#include "models/config/model_stacks.h"
#include "parallel/distributed.h"
#include "parallel/nccl_communicator.h"
#include "parallel/rank_grid.h"
#include "training/checkpointing/checkpoint_paths.h"
#include "training/planning/memory_check.h"
#include "training/dataset_batch_source.h"
#include "training/config/model_factory.h"
#include "training/pipeline_setup.h"
#include "training/observability/tensor_dumper.h"
#include "training/trainer.h"

namespace strata::training {
namespace {

std::string trimmed(std::string s) {
  while (!s.empty() && s.back() == ' ') s.pop_back();
  return s;
}

// Dense peak FLOP/s of one device for MFU (H100/H200 SXM datasheet); 0 (no MFU) on the CPU.
double peak_flops(Device device, Precision precision) {
  if (!device.is_cuda()) return 0.0;
  return precision == Precision::Fp32 ? 67e12 : 989e12;
}

// Packed sequences find documents by their EOD tokens: data preprocessed without --append-eod
// would silently stay one document per sample. Refused, naming the flag, before allocation.
void check_documents_end_with_eod(const DataConfig& data, int64_t eod) {
  const char* field = data.dataloader_inter_document_masking ? "data.dataloader_inter_document_masking"
                      : data.reset_attention_mask            ? "data.reset_attention_mask"
                      : data.reset_position_ids  ? "data.reset_position_ids"
                                                 : nullptr;
  if (!field) return;
  if (eod < 0)
    throw config::ConfigError(field, "true needs the tokenizer's end-of-document token, and this tokenizer has none");
  if (data.mock_data) return;  // mock documents end with EOD
  std::vector<DataConfig::Blend> blends = data.blend();
  if (data.per_split())
    for (const std::vector<DataConfig::Blend>& split : data.split_blends())
      blends.insert(blends.end(), split.begin(), split.end());
  for (const DataConfig::Blend& b : blends)
    if (!data::some_document_ends_with(data::IndexedDocuments(b.prefix), eod))
      throw config::ConfigError(field, "true, but no document of data.data_path " + b.prefix +
                                           " ends with the tokenizer's EOD token (id " + std::to_string(eod) +
                                           "): preprocess it with --append-eod, or turn the flag off");
}

TrainResult run_on_rank(const ResolvedConfig& given, const DistributedRuntime& rt, const RunHooks& hooks) {
  check_checkpoint_paths(given, /*create_save=*/true);  // before anything is allocated or trained
  const ResolvedConfig validated = with_pretrained_checkpoint(given);
  std::unique_ptr<TensorDumper> tensor_dumper = TensorDumper::from_config(validated, rt.rank);  // creates its directory
  const Device device = rt.device;
  const ParallelGroups groups = build_parallel_groups(*validated.parallel, rt.world_host, rt.world_device);
  const bool last_rank = rt.rank == rt.world_size - 1;
  if (!last_rank) log::set_level("warn");
  if (validated.checkpoint->load != given.checkpoint->load)
    log::info("checkpoint.load {} holds no checkpoint: finetuning from checkpoint.pretrained_checkpoint {}",
              given.checkpoint->load.value_or("(null)"), *validated.checkpoint->load);
  std::unique_ptr<data::Tokenizer> tokenizer =
      data::build_checked_tokenizer(*validated.data, validated.model->vocab_size);
  const ResolvedConfig cfg =
      validated.model->vocab_size ? validated : validated.with_vocab_size(tokenizer->vocab_size());
  log::info("tokenizer {}: vocab size {} (eod {}); device {}", tokenizer->name(), tokenizer->vocab_size(),
            tokenizer->eod(), device.str());
  check_documents_end_with_eod(cfg.data, tokenizer->eod());
  check_rank_memory(cfg, device, rt.local_size);  // a layout that cannot fit, refused before allocation

  const int64_t gbs = *cfg.training->global_batch_size;  // resolved by validate()
  const int64_t evals = cfg.training->eval_interval > 0 ? *cfg.training->train_iters / cfg.training->eval_interval + 1 : 0;
  data::GPTDataConfig dc;
  std::ostringstream blend;
  for (const auto& b : cfg.data->blend()) blend << b.weight << " " << b.prefix << " ";
  dc.data_path = blend.str();
  dc.split = cfg.data->split;
  dc.seq_length = cfg.model->seq_length;
  dc.seed = static_cast<uint64_t>(cfg.training->seed);
  dc.num_samples = {cfg.batch_size_schedule().samples_for_iterations(*cfg.training->train_iters),
                    evals * cfg.training->eval_iters * gbs,
                    cfg.training->eval_iters * gbs};
  dc.mock = cfg.data->mock_data;
  if (cfg.data->per_split()) {  // Megatron's blend_per_split: each split its own datasets
    dc.per_split = true;
    const auto splits = cfg.data->split_blends();
    for (int s = 0; s < 3; ++s) {
      std::ostringstream text;
      for (const auto& b : splits[s]) text << b.weight << " " << b.prefix << " ";
      dc.per_split_data_path[s] = text.str();
      if (!splits[s].empty()) blend << (s == 0 ? "train: " : s == 1 ? "valid: " : "test: ") << text.str();
    }
  }
  dc.mock_config.vocab_size = tokenizer->vocab_size();
  dc.mock_config.eod_token = tokenizer->eod();
  dc.mock_config.seed = static_cast<uint64_t>(cfg.training->seed);
  auto datasets = data::build_gpt_datasets(dc);
  STRATA_CHECK_KIND(ErrorKind::Config, datasets[0] != nullptr,
                    "data.split: the training split of '", cfg.data->split, "' is empty");

  const int64_t nmb = cfg.num_micro_batches();
  // Megatron's sampler: micro-batches split over the dp group (cp ranks share their samples).
  const int64_t dp_rank = groups.dp.rank(), dp_size = groups.dp.size();
  const EodRules eod{tokenizer->eod(), cfg.data->eod_mask_loss, cfg.data->reset_position_ids,
                     cfg.data->reset_attention_mask};
  DatasetBatchSource train(datasets[0], cfg.training->micro_batch_size, nmb, eod, dp_rank, dp_size);
  const std::string data_name = cfg.data->mock_data   ? std::string("mock data")
                                : cfg.data->per_split() ? "the per-split data [" + trimmed(blend.str()) + "]"
                                                        : "data.data_path [" + trimmed(blend.str()) + "]";
  train.check_vocabulary(*cfg.model->vocab_size, data_name);
  const bool cyclic = cfg.data->dataloader_type == DataloaderType::Cyclic;  // Megatron's random sampler
  if (cyclic) train.use_random_sampler(cfg.data->data_sharding);
  std::unique_ptr<DatasetBatchSource> valid;
  if (datasets[1] && evals > 0) {
    valid = std::make_unique<DatasetBatchSource>(datasets[1], cfg.training->micro_batch_size, nmb, eod, dp_rank,
                                                 dp_size);
    valid->check_vocabulary(*cfg.model->vocab_size, data_name);
    if (cyclic) valid->use_random_sampler(cfg.data->data_sharding);
  }

  // logging.record_memory_history: from before the model's parameters are allocated (the trainer
  // starts it otherwise).
  if (memory_history_rank(cfg.logging, groups.global_rank)) memory_history::start(device);
  // This rank's model chunks (one without pipeline parallelism; vpp with interleaving).
  std::vector<std::unique_ptr<LanguageModel>> chunks = make_model_chunks(cfg, device, groups);
  LanguageModel& model = *chunks.front();
  TrainerOptions options;
  options.pipeline = make_pipeline_layout(chunks, groups);
  options.model_parallel = groups.mp;
  options.sinks = hooks.sinks;
  options.log_stream = hooks.log_stream;
  options.groups = groups;
  std::vector<Parameter*> params;
  for (const auto& c : chunks)
    for (Parameter* p : c->parameters()) params.push_back(p);
  const double fpt = model_flops_per_token(cfg, params);
  options.flops_per_token = [fpt] { return fpt; };
  options.peak_flops_per_second = peak_flops(device, cfg.training->precision);
  int64_t n_params = 0;
  for (const Parameter* p : params) n_params += p->value.numel();
  log::info("model: {} parameters, {:.3g} model FLOPs per token", n_params, fpt);
  if (const std::string note = kernels::cpu::blas_core_restart_note(); !note.empty()) log::info("{}", note);

  std::unique_ptr<BatchSource> given_train = hooks.train_data ? hooks.train_data(dp_rank, dp_size) : nullptr;
  std::unique_ptr<BatchSource> given_valid = hooks.valid_data ? hooks.valid_data(dp_rank, dp_size) : nullptr;
  BatchSource& train_source = given_train ? *given_train : static_cast<BatchSource&>(train);
  BatchSource* valid_source = given_valid ? given_valid.get() : valid.get();
  Trainer trainer(cfg, model, train_source, valid_source, options);
  if (hooks.with_trainer) hooks.with_trainer(trainer);
  if (tensor_dumper) trainer.observers().add(std::move(tensor_dumper));
  log::info("layout: world {} = tp {} x cp {} x pp {} x dp {}; optimizer state {} bytes on this rank{}", rt.world_size,
            cfg.parallel->tensor_model_parallel_size, cfg.parallel->context_parallel_size,
            cfg.parallel->pipeline_model_parallel_size, dp_size, trainer.optimizer().state_bytes(),
            cfg.parallel->use_distributed_optimizer ? " (distributed optimizer: sharded over dp)" : "");
  if (hooks.before_training) hooks.before_training(params, train_source);
  TrainResult result = trainer.train();
  if (rt.world_size > 1 && result.train_step_seconds > 0)
    log::info("communication: {:.1f}% of the train-step time in data-parallel collectives",
              100.0 * result.communication_seconds / result.train_step_seconds);
  return result;
}

// Joins the launched job (one process, or every rank under mpirun), with deterministic
// (rank-ordered) collectives when training.deterministic is set.
DistributedRuntime join_job(const ResolvedConfig& validated) {
  const Device device = resolve_device(validated.training->device);
  if (validated.training->deterministic && device.is_cuda()) nccl_prepare_deterministic_env();
  kernels::set_reduced_precision_reduction(!validated.training->disable_bf16_reduced_precision_matmul);
  DistributedRuntime rt = init_distributed(validated.parallel, device);
  log::set_rank(rt.rank, rt.world_size);
  if (validated.training->deterministic) {  // rank-ordered sums (parallel/communicator.h)
    if (rt.world_host) rt.world_host->set_deterministic(true);
    if (rt.world_device) rt.world_device->set_deterministic(true);
  }
  return rt;
}

}  // namespace

// Model FLOPs per token for forward + backward: 6·N (weights multiplied by activations, a routed
// expert's weighted by the share of tokens it sees, top-k / experts; lookup tables such as learned
// positions excluded) + 12·L·h·s (attention scores and context, causal
// masking not discounted) — the PaLM / Megatron convention for MFU. The attention term is each
// decoder layer kind's own (models/config/layer_kind.h: GPT's layers and a hybrid pattern's `*` count it).
double model_flops_per_token(const ResolvedConfig& cfg, const std::vector<Parameter*>& params) {
  const ResolvedModelConfig& m = cfg.model;
  // A token passes through top-k of the routed experts: their weights count k / num_experts times
  // (Megatron's num_floating_point_operations counts moe_router_topk expert MLPs per token).
  const double routed_share =
      m->num_experts ? static_cast<double>(m->moe_router_topk) / static_cast<double>(*m->num_experts) : 1.0;
  double n = 0;
  for (const Parameter* p : params)
    if (p->counted_in_model_flops)
      n += static_cast<double>(p->value.numel()) * (p->expert_parallel ? routed_share : 1.0);
  double attention = 0;  // the decoder layers' attention products (each layer kind's own count)
  for (const StackLayerSpec& s : decoder_stack_specs(m, 0, m->num_layers)) attention += s.kind->attention_flops_per_token(m);
  return 6.0 * n + attention;
}

int run(const ResolvedConfig& validated) { return run_training(validated).exit_code; }

TrainResult run_training(const ResolvedConfig& validated, const RunHooks& hooks) {
  DistributedRuntime rt = join_job(validated);
  TrainResult result;
  result.exit_code = run_or_abort(rt, [&] {
    result = run_on_rank(validated, rt, hooks);
    return result.exit_code;
  });
  return result;
}

}  // namespace strata::training
