// Training metrics output: Megatron's per-iteration log line (exact fields, widths, order and
// ` |` separators, with tokens/s and MFU appended), and metric sinks fed the same values —
// TensorBoard scalars under Megatron's tags and one JSONL object per logged iteration.
// Reference: megatron/training/training.py (training_log, evaluate_and_print_results).
#pragma once
#include <chrono>
#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace strata {

// The values of one Megatron log line (optional fields are printed only when set).
struct IterationLog {
  int64_t iteration = 0;
  int64_t train_iters = 0;
  int64_t consumed_samples = 0;
  int64_t skipped_samples = 0;                       // printed when > 0
  double elapsed_ms_per_iteration = 0.0;
  std::optional<double> throughput_tflops_per_gpu;   // --log-throughput
  std::optional<double> learning_rate;               // "None" when unknown
  int64_t global_batch_size = 0;
  std::vector<std::pair<std::string, double>> losses;  // ("lm loss", avg); printed when > 0
  std::vector<std::pair<std::string, double>> per_layer;  // "moe/…_layer_i" losses: not printed
  double loss_scale = 1.0;
  std::optional<double> grad_norm;
  std::optional<double> num_zeros;                   // --log-num-zeros-in-grad
  std::optional<double> params_norm;                 // --log-params-norm
  int64_t skipped_iterations = 0;                    // since the last log line
  int64_t nan_iterations = 0;                        // since the last log line
  // Appended after Megatron's fields.
  std::optional<double> tokens_per_second;
  std::optional<double> mfu_percent;
  // The iterations left at this interval's pace (evaluation not included), as "time left: H:MM:SS".
  std::optional<double> seconds_left;
};

// " [YYYY-mm-dd HH:MM:SS.ffffff] iteration ... |" exactly as Megatron prints it (local time).
std::string format_iteration_log(const IterationLog& f, std::chrono::system_clock::time_point now);

// Megatron's validation block line:
// " validation loss at iteration 100 | lm loss value: 1.234567E+00 | lm loss PPL: 3.437E+00 | "
std::string format_validation_log(const std::string& prefix, double loss, double ppl);

// A destination for scalar metrics and per-iteration records.
class MetricsSink {
 public:
  virtual ~MetricsSink() = default;
  virtual void add_scalar(const std::string& tag, double value, int64_t step) = 0;
  virtual void write_record(const nlohmann::json& record) {}
  virtual void flush() {}
};

// Megatron's training_log / evaluate_and_print_results write most scalars twice: `<tag>` against
// the iteration and `<tag> vs samples` against the consumed training samples (learning-rate,
// batch-size, every loss key, loss-scale, world-size, grad-norm, num-zeros, params-norm, the
// validation tags). Timing, throughput and memory tags (iteration-time, throughput, mem-*,
// max_attention_logit) are written against the iteration only.
// The MoE per-layer tags ("moe/<loss>_layer_<i>") are written against the iteration only.
bool has_samples_twin(const std::string& tag);
// A per-layer metric ("moe/" prefix: Megatron's tracker writes it to TensorBoard, not the log line).
bool is_per_layer_metric(const std::string& tag);
// Writes `tag` at `iteration`, and `tag + " vs samples"` at `consumed_samples` when it has a twin.
void add_scalar_with_samples_twin(MetricsSink& sink, const std::string& tag, double value, int64_t iteration,
                                  int64_t consumed_samples);

// TensorBoard event files in `dir` (core/formats/tfevents.h). Returns null (with a warning)
// when the tfevents writer is not part of this build.
std::unique_ptr<MetricsSink> make_tensorboard_sink(const std::string& dir);
// JSONL records written to `path` (core/formats/jsonl.h when present); add_scalar is ignored.
std::unique_ptr<MetricsSink> make_jsonl_sink(const std::string& path);

// An in-memory sink (tests, and callers that post-process metrics).
class MemoryMetricsSink : public MetricsSink {
 public:
  struct Scalar {
    std::string tag;
    double value;
    int64_t step;
  };
  void add_scalar(const std::string& tag, double value, int64_t step) override { scalars.push_back({tag, value, step}); }
  void write_record(const nlohmann::json& record) override { records.push_back(record); }
  std::vector<Scalar> scalars;
  std::vector<nlohmann::json> records;
};

}  // namespace strata
