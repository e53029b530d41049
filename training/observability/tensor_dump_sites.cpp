// The tensor dumper's site selection and config rules (see tensor_dump_sites.h).
#include "training/observability/tensor_dump_sites.h"

#include <algorithm>
#include <cstdio>

#include "core/config_table.h"
#include "models/model_manifest.h"
#include "training/config/config.h"

namespace strata {

using config::ConfigError;

bool glob_match(std::string_view p, std::string_view t) {
  // Greedy match with one backtrack point (the last `*`): linear in practice, exact for * and ?.
  size_t i = 0, j = 0, star = std::string_view::npos, mark = 0;
  while (j < t.size()) {
    if (i < p.size() && (p[i] == '?' || p[i] == t[j])) {
      ++i;
      ++j;
    } else if (i < p.size() && p[i] == '*') {
      star = i++;
      mark = j;
    } else if (star != std::string_view::npos) {
      i = star + 1;
      j = ++mark;
    } else {
      return false;
    }
  }
  while (i < p.size() && p[i] == '*') ++i;
  return i == p.size();
}

namespace {

bool matches_any(const std::vector<std::string>& patterns, std::string_view site) {
  for (const std::string& p : patterns)
    if (glob_match(p, site)) return true;
  return false;
}

std::string str(int64_t x) {
  return std::to_string(x);
}

}  // namespace

std::vector<std::string> model_site_names(const ResolvedModelConfig& m) {
  std::vector<std::string> names;
  for (const ObservationSite& site : describe_model(m).sites) names.push_back(site.path());
  return names;
}

SourceKinds site_kinds(const std::vector<std::string>& patterns, const ResolvedModelConfig& m) {
  SourceKinds kinds;
  for (const ObservationSite& site : describe_model(m).sites)
    if (matches_any(patterns, site.path())) kinds = kinds | SourceKinds{site.kind};
  return kinds;
}

void validate_tensor_dump(const ResolvedConfig& c) {
  const LoggingConfig& l = c.logging;
  if (l.tensor_dump_sites.empty()) {
    if (!l.tensor_dump_iters.empty())
      throw ConfigError("logging.tensor_dump_iters", "needs logging.tensor_dump_sites (the site patterns to dump)");
    if (l.tensor_dump_dir)
      throw ConfigError("logging.tensor_dump_dir", "needs logging.tensor_dump_sites (the site patterns to dump)");
    return;
  }
  if (l.tensor_dump_iters.empty())
    throw ConfigError("logging.tensor_dump_iters",
                      "required with logging.tensor_dump_sites (the 0-based iterations to dump, e.g. [0, 10])");
  for (int64_t it : l.tensor_dump_iters)
    if (it > *c.training->train_iters)
      throw ConfigError("logging.tensor_dump_iters", "iteration " + str(it) + " is never reached (training.train_iters " +
                                                         str(*c.training->train_iters) + ")");
  const std::vector<std::string> sites = model_site_names(c.model);
  for (size_t i = 0; i < l.tensor_dump_sites.size(); ++i) {
    const std::string& p = l.tensor_dump_sites[i];
    if (p.empty()) throw ConfigError("logging.tensor_dump_sites", "pattern " + str(static_cast<int64_t>(i)) + " is empty");
    if (std::any_of(sites.begin(), sites.end(), [&](const std::string& site) { return glob_match(p, site); })) continue;
    throw ConfigError("logging.tensor_dump_sites",
                      "pattern '" + p + "' matches no site of this model (sites are named like " + sites.front() +
                          ", " + sites.back() + "; `*` matches any characters, dots included)");
  }
}

std::string tensor_dump_dir(const ResolvedConfig& c) {
  if (c.logging->tensor_dump_dir) return *c.logging->tensor_dump_dir;
  if (c.checkpoint->save) return *c.checkpoint->save + "/tensor_dump";
  return "tensor_dump";
}

std::string tensor_dump_path(const std::string& dir, int64_t iteration, int rank) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "/iter_%07lld/rank_%04d.safetensors", static_cast<long long>(iteration), rank);
  return dir + buf;
}

}  // namespace strata
