// BatchSizeSchedule and Megatron's schedule-string parser (see batch_size_schedule.h).
#include "training/config/batch_size_schedule.h"

#include <algorithm>
#include <sstream>
#include <cctype>
#include <cmath>
#include <cstdlib>

#include "core/config_table.h"
#include "core/error.h"

namespace strata {

using config::ConfigError;

BatchSizeSchedule BatchSizeSchedule::constant(int64_t global_batch_size) {
  STRATA_INTERNAL_ASSERT(global_batch_size > 0, "BatchSizeSchedule: non-positive batch size");
  BatchSizeSchedule s;
  s.steps_ = {{0, global_batch_size}};
  return s;
}

BatchSizeSchedule BatchSizeSchedule::steps(Steps entries) {
  STRATA_INTERNAL_ASSERT(!entries.empty() && entries.front().first == 0, "BatchSizeSchedule: bad steps");
  BatchSizeSchedule s;
  s.kind_ = Kind::Steps;
  s.steps_ = std::move(entries);
  return s;
}

BatchSizeSchedule BatchSizeSchedule::rampup(int64_t start, int64_t increment, int64_t ramp_samples,
                                            int64_t final_size) {
  STRATA_INTERNAL_ASSERT(start > 0 && increment > 0 && ramp_samples > 0 && final_size > start &&
                             (final_size - start) % increment == 0,
                         "BatchSizeSchedule: bad ramp-up");
  BatchSizeSchedule s;
  s.kind_ = Kind::Rampup;
  s.start_ = start;
  s.increment_ = increment;
  s.ramp_samples_ = ramp_samples;
  s.final_ = final_size;
  // Megatron: rampup_samples_per_increment = ramup_samples / num_increments (a Python float).
  s.samples_per_increment_ = static_cast<double>(ramp_samples) / static_cast<double>((final_size - start) / increment);
  return s;
}

int64_t BatchSizeSchedule::global_batch_size(int64_t consumed_samples) const {
  if (kind_ == Kind::Rampup) {
    if (consumed_samples > ramp_samples_) return final_;
    const auto steps = static_cast<int64_t>(static_cast<double>(consumed_samples) / samples_per_increment_);
    return std::min(final_, start_ + steps * increment_);
  }
  int64_t size = steps_.front().second;
  for (const auto& [threshold, bs] : steps_) {
    if (consumed_samples < threshold) break;
    size = bs;
  }
  return size;
}

int64_t BatchSizeSchedule::iterations_for_samples(int64_t train_samples) const {
  int64_t iterations = 0, consumed = 0;
  switch (kind_) {
    case Kind::Constant: return train_samples / steps_.front().second;
    case Kind::Steps:
      while (consumed < train_samples) {
        consumed += global_batch_size(consumed);
        ++iterations;
      }
      return iterations;
    case Kind::Rampup:
      while (consumed <= ramp_samples_ && consumed <= train_samples) {
        consumed += global_batch_size(consumed);
        ++iterations;
      }
      if (train_samples > consumed) iterations += (train_samples - consumed) / final_;
      return iterations;
  }
  return iterations;
}

int64_t BatchSizeSchedule::samples_for_iterations(int64_t iterations) const {
  if (kind_ == Kind::Constant) return iterations * steps_.front().second;
  int64_t consumed = 0;
  for (int64_t i = 0; i < iterations; ++i) {
    const int64_t bs = global_batch_size(consumed);
    const bool settled = kind_ == Kind::Rampup ? consumed > ramp_samples_ : consumed >= steps_.back().first;
    if (settled) return consumed + (iterations - i) * bs;  // the rest at the final size
    consumed += bs;
  }
  return consumed;
}

std::vector<int64_t> BatchSizeSchedule::sizes() const {
  std::vector<int64_t> out;
  if (kind_ == Kind::Rampup) {
    for (int64_t s = start_; s <= final_; s += increment_) out.push_back(s);
    return out;
  }
  for (const auto& entry : steps_) out.push_back(entry.second);
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

namespace {
std::string trimmed_upper(std::string s) {
  const auto space = [](unsigned char c) { return std::isspace(c) != 0; };
  while (!s.empty() && space(static_cast<unsigned char>(s.back()))) s.pop_back();
  size_t b = 0;
  while (b < s.size() && space(static_cast<unsigned char>(s[b]))) ++b;
  s = s.substr(b);
  for (char& c : s) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return s;
}

// Megatron's _parse_numeric_value: int(float(value) × multiplier), truncating.
int64_t parse_count(const std::string& text, const std::string& entry, const char* field) {
  std::string v = trimmed_upper(text);
  double multiplier = 1.0;
  if (!v.empty()) {
    switch (v.back()) {
      case 'T': multiplier = 1e12; break;
      case 'B': multiplier = 1e9; break;
      case 'M': multiplier = 1e6; break;
      case 'K': multiplier = 1e3; break;
      default: break;
    }
    if (multiplier != 1.0) v.pop_back();
  }
  const bool plain = !v.empty() && v.find_first_not_of("0123456789.E+-") == std::string::npos;
  char* end = nullptr;
  const double x = plain ? std::strtod(v.c_str(), &end) : 0.0;
  const double value = x * multiplier;
  if (!plain || end != v.c_str() + v.size() || !std::isfinite(value) || std::fabs(value) >= 9.2e18)
    throw ConfigError(field, "entry '" + entry + "': '" + text +
                                 "' is not a number (optionally with a K, M, B or T suffix)");
  return static_cast<int64_t>(std::trunc(value));
}
}  // namespace

namespace {
// The schedule's THRESHOLD:BATCH_SIZE entries as written (separated by spaces or commas).
std::vector<std::string> schedule_entries(const std::string& text) {
  std::string spaced = text;
  std::replace(spaced.begin(), spaced.end(), ',', ' ');
  std::vector<std::string> entries;
  std::istringstream in(spaced);
  for (std::string entry; in >> entry;) entries.push_back(entry);
  return entries;
}
}  // namespace

std::optional<std::string> step_batch_size_schedule_in_order(const std::string& text, int64_t seq_length,
                                                             const char* field) {
  const std::vector<std::string> entries = schedule_entries(text);
  const BatchSizeSchedule::Steps as_written = parse_step_batch_size_schedule(text, seq_length, field, false);
  std::vector<size_t> order(entries.size());
  for (size_t k = 0; k < order.size(); ++k) order[k] = k;
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return as_written[a].first < as_written[b].first; });
  if (std::is_sorted(order.begin(), order.end())) return std::nullopt;
  std::string sorted;
  for (size_t k : order) sorted += (sorted.empty() ? "" : " ") + entries[k];
  return sorted;
}

BatchSizeSchedule::Steps parse_step_batch_size_schedule(const std::string& text, int64_t seq_length,
                                                        const char* field, bool sorted) {
  BatchSizeSchedule::Steps steps;
  for (const std::string& entry : schedule_entries(text)) {
    const size_t colon = entry.find(':');
    if (colon == std::string::npos)
      throw ConfigError(field, "invalid entry '" + entry + "'; expected THRESHOLD:BATCH_SIZE");
    const int64_t tokens = parse_count(entry.substr(0, colon), entry, field);
    const int64_t size = parse_count(entry.substr(colon + 1), entry, field);
    if (size <= 0) throw ConfigError(field, "entry '" + entry + "': the batch size must be positive");
    if (tokens < 0) throw ConfigError(field, "entry '" + entry + "': the threshold must not be negative");
    steps.push_back({tokens / seq_length, size});  // Megatron: thresholds in tokens // seq_length
  }
  if (steps.empty()) throw ConfigError(field, "has no THRESHOLD:BATCH_SIZE entry");
  if (!sorted) return steps;
  std::stable_sort(steps.begin(), steps.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  if (steps.front().first != 0)
    throw ConfigError(field, "the first entry must have threshold 0, got " + std::to_string(steps.front().first) +
                                 " samples");
  for (size_t k = 1; k < steps.size(); ++k)
    if (steps[k].first <= steps[k - 1].first)
      throw ConfigError(field, "thresholds must be strictly increasing (in samples of seq_length " +
                                   std::to_string(seq_length) + " tokens), got " +
                                   std::to_string(steps[k - 1].first) + " before " + std::to_string(steps[k].first));
  return steps;
}

}  // namespace strata
