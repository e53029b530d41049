// LoggingConfig: the `logging` config section (Megatron's logging, profiling, router-trace and
// tensor-metric arguments) and its field table. A section file: below training/config, which
// gathers the sections into StrataConfig (scripts/check_includes.py).
// Reference: megatron/training/arguments.py (_add_logging_args, _add_profile_args).
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/config_table.h"

namespace strata {

struct LoggingConfig {
  int64_t log_interval = 100;
  std::optional<std::string> tensorboard_dir;
  std::optional<std::string> metrics_jsonl;
  bool log_num_zeros_in_grad = false;
  bool log_throughput = false;
  bool log_params_norm = false;
  // Megatron's straggler detector (training/observability/straggler_detector.h).
  bool log_straggler = false;
  int64_t straggler_minmax_count = 1;
  bool disable_straggler_on_startup = false;
  int64_t straggler_ctrlr_port = 65535;
  // Megatron's --profile: a trace of iterations profile_step_start + 1 … profile_step_end on the
  // ranks in profile_ranks (core/phase_timer.h: Chrome trace-event JSON, NVTX ranges on CUDA).
  bool profile = false;
  int64_t profile_step_start = 10;
  int64_t profile_step_end = 12;
  std::vector<int64_t> profile_ranks = {0};
  // Megatron's --record-memory-history (core/memory_history.h): snapshots to <base>_<rank><ext>.
  bool record_memory_history = false;
  std::string memory_snapshot_path = "snapshot.pickle";
  // The MoE router tracer (training/observability/router_tracer.h; Megatron's LoggerConfig moe_routing_trace_*).
  std::optional<std::string> moe_routing_trace_path;               // null: no tracing
  std::optional<int64_t> moe_routing_trace_max_training_iters;     // null: training.train_iters
  std::optional<int64_t> moe_routing_trace_max_inference_steps;    // null: 10^9
  bool moe_routing_trace_capture_logits = false;
  bool moe_routing_trace_capture_hidden_states = false;
  bool moe_routing_trace_dump_weights = false;
  // The tensor dumper (training/observability/tensor_dumper.h): site-name globs, 0-based iterations, directory.
  std::vector<std::string> tensor_dump_sites;
  std::vector<int64_t> tensor_dump_iters;
  std::optional<std::string> tensor_dump_dir;
  // Tensor metrics (training/observability/tensor_metrics/; Megatron's --tensor-metrics): "NAME:INTERVAL" specs.
  std::vector<std::string> tensor_metrics;
};

// Whether global rank `rank` records the memory history: record_memory_history on and the rank in
// profile_ranks ([]: every rank, as Megatron's should_prof_rank).
bool memory_history_rank(const LoggingConfig& l, int64_t rank);

// The `logging` section's fields (names, docs, validators) for the config table.
config::SectionFields<LoggingConfig> logging_config_fields();

}  // namespace strata
