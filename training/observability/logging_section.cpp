// The `logging` section's field table (see logging_section.h).
// Reference: megatron/training/arguments.py (_add_logging_args, _add_profile_args).
#include "training/observability/logging_section.h"

#include <algorithm>

namespace strata {

using config::non_negative;
using config::positive;

bool memory_history_rank(const LoggingConfig& l, int64_t rank) {
  return l.record_memory_history &&
         (l.profile_ranks.empty() || std::find(l.profile_ranks.begin(), l.profile_ranks.end(), rank) != l.profile_ranks.end());
}

config::SectionFields<LoggingConfig> logging_config_fields() {
  using L = LoggingConfig;
  config::SectionFields<L> f;
  f.add("log_interval", &L::log_interval, "Print the iteration log line every this many steps.").check(positive());
  f.add("tensorboard_dir", &L::tensorboard_dir, "Write TensorBoard event files here. null: none.");
  f.add("metrics_jsonl", &L::metrics_jsonl, "Write one JSON object per logged step to this file. null: none.");
  f.add("log_num_zeros_in_grad", &L::log_num_zeros_in_grad, "Log the number of zero gradient elements.");
  f.add("log_throughput", &L::log_throughput, "Log throughput (TFLOP/s per GPU) in the iteration line.");
  f.add("log_params_norm", &L::log_params_norm, "Log the L2 norm of the parameters.");
  f.add("log_straggler", &L::log_straggler,
        "Straggler detection (Megatron --log-straggler): at every log interval, each rank's compute time per "
        "iteration (its step time less its communication time) is gathered and the slowest and fastest ranks are "
        "named in the log.");
  f.add("straggler_minmax_count", &L::straggler_minmax_count,
        "With log_straggler: also list this many slowest and fastest ranks (when above 1 and below the world "
        "size).")
      .check(positive());
  f.add("disable_straggler_on_startup", &L::disable_straggler_on_startup,
        "With log_straggler: start the detector off; a connection to straggler_ctrlr_port turns it on.");
  f.add("straggler_ctrlr_port", &L::straggler_ctrlr_port,
        "With log_straggler: rank 0 listens on this TCP port; each connection (curl localhost:PORT) toggles the "
        "detector at the next log interval. 0: a free port the log names.")
      .check(config::in_range(0, true, 65535, true));
  f.add("profile", &L::profile,
        "Record a trace of iterations profile_step_start + 1 to profile_step_end on the ranks in profile_ranks "
        "(Megatron's --profile): trace_rank<R>_iterations<a>-<b>.json in logging.tensorboard_dir (else the "
        "working directory), Chrome trace-event JSON for chrome://tracing or ui.perfetto.dev, with NVTX ranges "
        "for Nsight Systems on CUDA.");
  f.add("profile_step_start", &L::profile_step_start, "The trace starts after this many iterations.")
      .check(non_negative());
  f.add("profile_step_end", &L::profile_step_end, "The trace ends after this many iterations.").check(positive());
  f.add("profile_ranks", &L::profile_ranks,
        "Global ranks that record the trace (profile) and the memory history (record_memory_history; there [] "
        "means every rank, as in Megatron).");
  f.add("record_memory_history", &L::record_memory_history,
        "Record every tensor allocation and free of the training device from before the model is built "
        "(Megatron --record-memory-history: the latest 100000 events, each with the phase-timer scopes open at "
        "the time as its frames) on the ranks of profile_ranks, and write a snapshot at the first iteration and "
        "every log_interval to memory_snapshot_path with _<rank> before its extension: a pickle in PyTorch's "
        "memory-snapshot layout that pytorch.org/memory_viz and torch.cuda._memory_viz read "
        "(docs/memory.md).");
  f.add("memory_snapshot_path", &L::memory_snapshot_path,
        "Where record_memory_history writes its snapshots (<base>_<rank><ext>).");
  f.add("moe_routing_trace_path", &L::moe_routing_trace_path,
        "Trace the MoE routers' top-k selections into this directory (router_trace_rank<R>.jsonl per rank, "
        "docs/router_trace.md); needs MoE layers. null: no tracing.");
  f.add("moe_routing_trace_max_training_iters", &L::moe_routing_trace_max_training_iters,
        "Training iterations to trace (counted from the first traced one, so a resumed run traces); then the "
        "tracer detaches. null: training.train_iters.")
      .check(positive());
  f.add("moe_routing_trace_max_inference_steps", &L::moe_routing_trace_max_inference_steps,
        "Generation forwards to trace (the prompt, then each decode step). null: 10^9.")
      .check(positive());
  f.add("moe_routing_trace_capture_logits", &L::moe_routing_trace_capture_logits,
        "Also write the raw router logits [T, E] as bf16 to logits_rank<R>.bin.");
  f.add("moe_routing_trace_capture_hidden_states", &L::moe_routing_trace_capture_hidden_states,
        "Also write the router inputs [T, H] (after the pre-MLP norm, before jitter) as bf16 to "
        "hidden_states_rank<R>.bin.");
  f.add("moe_routing_trace_dump_weights", &L::moe_routing_trace_dump_weights,
        "Also write each traced router's weight, expert bias, score function and top-k (at its first traced "
        "forward) to router_state_rank<R>.safetensors.");
  f.add("tensor_metrics", &L::tensor_metrics,
        "Tensor metrics as NAME:INTERVAL (Megatron --tensor-metrics), e.g. [layer-router-health:100, "
        "global-param-l2:100]: each computed on iterations where (iteration + 1) % INTERVAL == 0 (0-based), "
        "written to TensorBoard as tensor-metrics/<metric>/<label>, to the JSONL file, or as one log line "
        "without either (docs/metrics.md lists every metric). []: none.");
  f.add("tensor_dump_sites", &L::tensor_dump_sites,
        "Tensor dumper: glob patterns (* and ?) over forward-site names <owner>.<name>, e.g. "
        "decoder.layers.*.residual_contribution, decoder.layers.3.mlp.router.router_logits, "
        "output_layer.output_logits (docs/observation.md). []: no dump.");
  f.add("tensor_dump_iters", &L::tensor_dump_iters,
        "Tensor dumper: the 0-based iterations whose matching tensors are written (training forwards, and the "
        "evaluation run at that iteration). Required with tensor_dump_sites.")
      .check(non_negative());
  f.add("tensor_dump_dir", &L::tensor_dump_dir,
        "Tensor dumper output directory (iter_NNNNNNN/rank_NNNN.safetensors). null: <checkpoint.save>/tensor_dump, "
        "or ./tensor_dump without checkpoint.save.");
  return f;
}

}  // namespace strata
