// Golden-value regression in Megatron's scheme: the golden JSON schema (one block per metric:
// start_step, end_step, step_interval, values keyed by 1-based step, "nan" for a missing value),
// extracting the metrics from TensorBoard event files, and the DETERMINISTIC / APPROXIMATE
// comparison rules with Megatron's CHECK_THRESHOLDS table and allowed-failures formula.
// Reference: Megatron-LM tests/functional_tests/python_test_utils/common.py (GoldenValues,
// GoldenValueMetric, pipeline, ApproximateTest, DeterministicTest),
// get_test_results_from_tensorboard_logs.py, test_pretraining_regular_pipeline.py
// (CHECK_THRESHOLDS), test_pretraining_resume_checkpoint_pipeline.py; PR #7087 (full precision,
// "value_precision": "full"). Strata's extension: a CPU golden file records the platform that
// wrote it (a "platform" block, kernels/cpu/cpu_platform.h); on another platform the exact
// checks become cross-platform ones at a tolerance per precision (docs/reproducibility.md).
#pragma once
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "core/formats/tfevents.h"
#include "kernels/cpu/cpu_platform.h"

namespace strata::golden {

// One metric block. A missing value ("nan" in the file) is stored as NaN.
struct MetricSeries {
  int64_t start_step = 0;
  int64_t end_step = 0;
  int64_t step_interval = 1;
  std::map<int64_t, double> values;
  // true: values are stored at full precision ("value_precision": "full", PR #7087) and the
  // deterministic check compares them exactly; false: a legacy block, rounded to 5 decimals.
  bool full_precision = true;
};

// metric name (a TensorBoard tag such as "lm loss") → block. Ordered by name, as json.dump sorts.
using GoldenValues = std::map<std::string, MetricSeries>;

// The metrics Megatron's extractor keeps (get_test_results_from_tensorboard_logs.py whitelist) but
// the MTP depths' losses: a case extracts those as every named loss of its model (the model
// manifest's, models/model_manifest.h), whatever the depth count.
const std::vector<std::string>& extracted_metric_names();
// The checked metrics when model_config.yaml has no METRICS key.
const std::vector<std::string>& default_checked_metrics();

// ---- JSON --------------------------------------------------------------------------------------
// Parses the golden JSON text; `source` (the file name) is named in every error. Accepts legacy
// list-valued `values` (start_step + i·step_interval) and "nan" strings.
// The top-level key "platform" (when present) is the writer's fingerprint, not a metric.
struct GoldenFile {
  GoldenValues values;
  std::optional<kernels::cpu::CpuPlatform> platform;  // none: a file written before fingerprints
};
GoldenFile parse_golden_file(const std::string& text, const std::string& source);
GoldenValues parse_golden_json(const std::string& text, const std::string& source);
GoldenFile read_golden_file(const std::string& path);
// Full precision: every finite value is written as the shortest text that reads back to the same
// double (Python's repr); NaN as "nan". Two-space indent, keys sorted; the platform block first.
std::string to_golden_json(const GoldenValues& values, const kernels::cpu::CpuPlatform* platform = nullptr);
void write_golden_file(const std::string& path, const GoldenValues& values,
                       const kernels::cpu::CpuPlatform* platform = nullptr);  // .tmp + rename

// ---- extraction --------------------------------------------------------------------------------
// Builds the blocks from scalar events: only tags in `metrics`, only steps 1 ≤ s ≤ train_iters
// with s == 1 or s % step_size == 0; a repeated (tag, step) keeps the last value;
// step_interval = gcd of the gaps between kept steps. Values at full precision.
GoldenValues metrics_from_scalars(const std::vector<formats::ScalarEvent>& events,
                                  const std::vector<std::string>& metrics, int64_t train_iters,
                                  int64_t step_size = 1);
// The `events*tfevents*` files in `dir` sorted by modification time (then name); Megatron's
// normal tests read the first one that holds scalars. Throws (naming `dir`) when there is none.
std::string first_tfevents_file_with_scalars(const std::string& dir);
// read_tfevents_scalars(first_tfevents_file_with_scalars(dir)) → metrics_from_scalars.
GoldenValues read_tensorboard_metrics(const std::string& dir, int64_t train_iters,
                                      const std::vector<std::string>& metrics = extracted_metric_names());

// Keeps the steps `> after_step` of every block (resume tests compare the second half).
GoldenValues steps_after(const GoldenValues& values, int64_t after_step);

// ---- comparison --------------------------------------------------------------------------------
// CrossPlatform: Megatron's approximate rule on full-precision values at the tolerance of
// cross_platform_tolerance(); it stands in for Deterministic when the golden file was written on
// another platform.
enum class CheckKind { Deterministic, Approximate, CrossPlatform };
struct Check {
  CheckKind kind = CheckKind::Approximate;
  double rtol = 1e-5;  // ApproximateTest defaults: rtol 1e-5, atol 0
  double atol = 0.0;
};
// Megatron's CHECK_THRESHOLDS: lm/mtp/total loss: Deterministic + Approximate(rtol 0.05);
// num-zeros: Deterministic + Approximate(rtol 0.2); iteration-time, mem-allocated-bytes,
// mem-max-allocated-bytes: Approximate(rtol 0.05) only. Unknown metric: empty.
// A metric in `loss_names` (a named loss of the model) gets the loss checks.
std::vector<Check> check_thresholds(const std::string& metric, const std::vector<std::string>& loss_names = {});

// min(max(N // 100, 1), 50): how many points an approximate check of N points may miss.
int64_t allowed_failures(int64_t n_points);
// np.isclose(actual, golden, rtol, atol) with NaN read as +inf on both sides.
bool is_close(double actual, double golden, double rtol, double atol);
// Python's round(x, 5) (correctly rounded, ties to even on the exact binary value).
double round5(double x);

struct PointMismatch {
  int64_t step;
  double golden;
  double actual;  // NaN: missing in the actual values
};

struct CheckResult {
  std::string metric;
  CheckKind kind = CheckKind::Approximate;
  double rtol = 0.0, atol = 0.0;
  int64_t n_points = 0;
  int64_t n_failed = 0;
  int64_t allowed = 0;  // failures tolerated (0 for deterministic checks and single points)
  bool passed = false;
  bool compared = true;  // false: recorded only (see `note`)
  std::string note;      // why it was skipped, the median window for iteration-time, a missing metric
  std::vector<PointMismatch> mismatches;
  double max_abs_diff = 0.0, max_rel_diff = 0.0;  // over the compared points
};

// How far two CPU platforms (BLAS kernels, compilers) may drift apart over a golden run, by the
// run's precision ("fp32", "bf16"): losses relative, counts (num-zeros) relative plus absolute.
// Measured across OpenBLAS core types with a margin (docs/reproducibility.md).
struct CrossPlatformTolerance {
  double loss_rtol = 0.0;
  double count_rtol = 0.0, count_atol = 0.0;
};
CrossPlatformTolerance cross_platform_tolerance(const std::string& precision);

struct CompareOptions {
  // Megatron's --allow-nondeterministic-algo (ENV_VARS NVTE_ALLOW_NONDETERMINISTIC_ALGO: 1 or
  // NON_DETERMINSTIC_RESULTS: 1): deterministic checks are skipped.
  bool allow_nondeterministic = false;
  // Metrics recorded but not compared (on the CPU: iteration-time and mem-*).
  std::vector<std::string> record_only;
  // The run's named losses (the loss channel, LanguageModel::loss_names(): "lm loss", MoE's
  // load_balancing_loss …): each is checked like "lm loss".
  std::vector<std::string> loss_names;
  // Set: the golden values come from another platform; deterministic checks compare at this
  // tolerance instead (CheckKind::CrossPlatform).
  std::optional<CrossPlatformTolerance> cross_platform;
};

// Megatron's pipeline(): for each metric of `checked_metrics`, its checks from check_thresholds().
// The compared steps are the golden steps; a step missing in `actual` is NaN (= +inf), so NaN
// matches NaN. Deterministic (or a single point): every point must be close. Approximate: passes
// when mean(close) ≥ 1 − allowed_failures(N)/N. Approximate checks compare both sides rounded to 5
// decimals; deterministic checks compare full-precision blocks exactly and legacy blocks after
// rounding to 5 decimals. iteration-time is one point: the median over the finite golden steps in
// 5–20 (largest golden step ≤ 25) or 30–45 (else); if that window is empty, the first 4 steps at or
// after its start. A metric missing from the golden or the actual values is a failed result.
std::vector<CheckResult> compare(const GoldenValues& golden, const GoldenValues& actual,
                                 const std::vector<std::string>& checked_metrics, const CompareOptions& options = {});
bool all_passed(const std::vector<CheckResult>& results);
// One line per check ("PASS lm loss deterministic: 50/50 points equal"), then the first
// mismatching points of each failed check with golden, actual and their difference.
std::string format_report(const std::vector<CheckResult>& results, const std::string& title);

}  // namespace strata::golden
