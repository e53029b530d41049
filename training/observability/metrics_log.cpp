// Megatron log line formatting and metric sinks (see metrics_log.h).
#include "training/observability/metrics_log.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <fstream>

#include "core/error.h"
#include "core/logging.h"

#include "core/formats/jsonl.h"
#include "core/formats/tfevents.h"

namespace strata {

namespace {
template <typename... Args>
std::string fmt_c(const char* f, Args... args) {
  char buf[256];
  const int n = std::snprintf(buf, sizeof buf, f, args...);
  return std::string(buf, static_cast<size_t>(n > 0 ? std::min<int>(n, sizeof buf - 1) : 0));
}

// Python's str(float) for the values Megatron prints with '{}' (num zeros is a float count).
std::string python_float(double v) {
  if (v == static_cast<double>(static_cast<int64_t>(v)) && std::abs(v) < 1e16) return fmt_c("%.1f", v);
  return fmt_c("%.17g", v);
}
}  // namespace

std::string format_iteration_log(const IterationLog& f, std::chrono::system_clock::time_point now) {
  const std::time_t t = std::chrono::system_clock::to_time_t(now);
  const auto micros =
      std::chrono::duration_cast<std::chrono::microseconds>(now.time_since_epoch()).count() % 1000000;
  std::tm tm{};
  localtime_r(&t, &tm);
  char ts[64];
  std::strftime(ts, sizeof ts, "%Y-%m-%d %H:%M:%S", &tm);

  std::string s = fmt_c(" [%s.%06lld]", ts, static_cast<long long>(micros));
  s += fmt_c(" iteration %8lld/%8lld |", static_cast<long long>(f.iteration), static_cast<long long>(f.train_iters));
  s += fmt_c(" consumed samples: %12lld |", static_cast<long long>(f.consumed_samples));
  if (f.skipped_samples > 0) s += fmt_c(" skipped samples: %12lld |", static_cast<long long>(f.skipped_samples));
  s += fmt_c(" elapsed time per iteration (ms): %.1f |", f.elapsed_ms_per_iteration);
  if (f.throughput_tflops_per_gpu) s += fmt_c(" throughput per GPU (TFLOP/s/GPU): %.1f |", *f.throughput_tflops_per_gpu);
  if (f.learning_rate)
    s += fmt_c(" learning rate: %.6E |", *f.learning_rate);
  else
    s += " learning rate: None |";
  s += fmt_c(" global batch size: %5lld |", static_cast<long long>(f.global_batch_size));
  for (const auto& [key, avg] : f.losses)
    if (avg > 0.0) s += fmt_c(" %s: %.6E |", key.c_str(), avg);
  s += fmt_c(" loss scale: %.1f |", f.loss_scale);
  if (f.grad_norm) s += fmt_c(" grad norm: %.3f |", *f.grad_norm);
  if (f.num_zeros) s += " num zeros: " + python_float(*f.num_zeros) + " |";
  if (f.params_norm) s += fmt_c(" params norm: %.3f |", *f.params_norm);
  s += fmt_c(" number of skipped iterations: %3lld |", static_cast<long long>(f.skipped_iterations));
  s += fmt_c(" number of nan iterations: %3lld |", static_cast<long long>(f.nan_iterations));
  if (f.tokens_per_second) s += fmt_c(" tokens/s: %.1f |", *f.tokens_per_second);
  if (f.mfu_percent) s += fmt_c(" MFU: %.2f%% |", *f.mfu_percent);
  if (f.seconds_left) {
    const long long t = std::llround(std::max(0.0, *f.seconds_left));
    s += fmt_c(" time left: %lld:%02lld:%02lld |", t / 3600, t / 60 % 60, t % 60);
  }
  return s;
}

std::string format_validation_log(const std::string& prefix, double loss, double ppl) {
  return " validation loss at " + prefix + " | " + fmt_c("lm loss value: %.6E | ", loss) +
         fmt_c("lm loss PPL: %.6E | ", ppl);
}

bool is_per_layer_metric(const std::string& tag) { return tag.rfind("moe/", 0) == 0; }

bool has_samples_twin(const std::string& tag) {
  if (is_per_layer_metric(tag)) return false;
  static const char* const kIterationOnly[] = {"iteration-time",          "throughput",          "mem-reserved-bytes",
                                               "mem-allocated-bytes",     "mem-max-allocated-bytes",
                                               "mem-allocated-count",     "max_attention_logit", "samples vs steps"};
  for (const char* t : kIterationOnly)
    if (tag == t) return false;
  const std::string suffix = " vs samples";
  return !(tag.size() >= suffix.size() && tag.compare(tag.size() - suffix.size(), suffix.size(), suffix) == 0);
}

void add_scalar_with_samples_twin(MetricsSink& sink, const std::string& tag, double value, int64_t iteration,
                                  int64_t consumed_samples) {
  sink.add_scalar(tag, value, iteration);
  if (has_samples_twin(tag)) sink.add_scalar(tag + " vs samples", value, consumed_samples);
}

namespace {
class TensorBoardSink : public MetricsSink {
 public:
  explicit TensorBoardSink(const std::string& dir) : w_(dir) {}
  void add_scalar(const std::string& tag, double value, int64_t step) override { w_.add_scalar(tag, value, step); }
  void flush() override { w_.flush(); }

 private:
  formats::TensorBoardWriter w_;
};
}  // namespace
std::unique_ptr<MetricsSink> make_tensorboard_sink(const std::string& dir) {
  return std::make_unique<TensorBoardSink>(dir);
}

namespace {
void make_parent_dir(const std::string& path) {
  const auto parent = std::filesystem::path(path).parent_path();
  if (!parent.empty()) std::filesystem::create_directories(parent);
}

class JsonlSink : public MetricsSink {
 public:
  // Appends (a resumed run continues the same file); creates the parent directory.
  explicit JsonlSink(const std::string& path) : w_((make_parent_dir(path), path), /*append=*/true) {}
  void write_record(const nlohmann::json& record) override { w_.write(record); }
  void flush() override { w_.flush(); }

 private:
  formats::JsonlWriter w_;

 public:
  void add_scalar(const std::string&, double, int64_t) override {}
};
}  // namespace

std::unique_ptr<MetricsSink> make_jsonl_sink(const std::string& path) { return std::make_unique<JsonlSink>(path); }

}  // namespace strata
