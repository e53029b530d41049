// logging.tensor_metrics spec parsing (see metric_specs.h).
#include "training/observability/tensor_metrics/metric_specs.h"

#include <algorithm>
#include <charconv>

#include "core/config_table.h"

namespace strata::tensor_metrics {

using config::ConfigError;

namespace {

std::string available_names(const std::vector<MetricFactory>& available) {
  std::string s;
  for (const MetricFactory& f : available) s += (s.empty() ? "" : ", ") + f.name;
  return s;
}

}  // namespace

std::vector<TensorMetricSpec> parse_tensor_metric_specs(const std::vector<std::string>& specs,
                                                        const std::vector<MetricFactory>& available) {
  const char* field = "logging.tensor_metrics";
  std::vector<TensorMetricSpec> out;
  for (const std::string& spec : specs) {
    const size_t colon = spec.rfind(':');
    if (colon == std::string::npos || colon == 0 || colon + 1 == spec.size())
      throw ConfigError(field, "'" + spec + "' is not NAME:INTERVAL (e.g. layer-router-health:100)");
    TensorMetricSpec s;
    s.name = spec.substr(0, colon);
    const std::string interval = spec.substr(colon + 1);
    const auto [end, ec] = std::from_chars(interval.data(), interval.data() + interval.size(), s.interval);
    if (ec != std::errc() || end != interval.data() + interval.size())
      throw ConfigError(field, "'" + spec + "': the interval '" + interval + "' is not an integer");
    if (s.interval <= 0) throw ConfigError(field, "'" + spec + "': the interval must be positive");
    const bool known = std::any_of(available.begin(), available.end(),
                                   [&](const MetricFactory& f) { return f.name == s.name; });
    if (!known)
      throw ConfigError(field, "unknown metric '" + s.name + "' (available: " + available_names(available) + ")");
    for (const TensorMetricSpec& o : out)
      if (o.name == s.name) throw ConfigError(field, "metric '" + s.name + "' is listed twice");
    out.push_back(s);
  }
  return out;
}

}  // namespace strata::tensor_metrics
