// The hybrid layer pattern: parsing and rules (see hybrid_pattern.h).
// Reference: megatron/core/models/hybrid/hybrid_layer_allocation.py, megatron/training/arguments.py.
#include "models/config/hybrid_pattern.h"

#include <string_view>
#include <utility>

#include "core/config_table.h"
#include "models/config/layer_kind.h"

namespace strata::hybrid {

using config::ConfigError;

namespace {

std::string str(int64_t x) { return std::to_string(x); }

// Megatron's layer symbols that Strata does not build, with what they are.
const char* unsupported_symbol(char c) {
  switch (c) {
    case 'G': return "GatedDeltaNet";
    case 'D': return "DeepSeek sparse attention";
    case 'C': return "DeepSeek-V4 compressed-sparse attention";
    case 'H': return "DeepSeek-V4 heavily-compressed attention";
    case 'W': return "DeepSeek-V4 sliding-window attention";
    default: return nullptr;
  }
}

// A registered layer kind's symbol that model.hybrid_layer_pattern accepts (models/config/layer_kind.h).
bool is_layer_symbol(char c) {
  const LayerKind* k = LayerKindRegistry::instance().find(c);
  return k != nullptr && k->hybrid_pattern;
}

// "M * - E": the pattern's layer symbols.
std::string layer_symbols() {
  std::string out;
  for (const LayerKind& k : LayerKindRegistry::instance().kinds())
    if (k.hybrid_pattern) out += (out.empty() ? "" : " ") + std::string(1, k.symbol);
  return out;
}

// Checks the symbols of `part`, which starts at `offset` in the whole pattern.
void check_symbols(std::string_view part, size_t offset, bool allow_pipe, const char* what) {
  for (size_t i = 0; i < part.size(); ++i) {
    const char c = part[i];
    const std::string at = "'" + std::string(1, c) + "' at position " + str(static_cast<int64_t>(offset + i));
    if (is_layer_symbol(c)) continue;
    if (c == kPipe) {
      if (allow_pipe) continue;
      throw ConfigError(kPatternField, at + ": '|' (pipeline segment) is not allowed inside an MTP pattern");
    }
    if (const char* name = unsupported_symbol(c))
      throw ConfigError(kPatternField, at + " (" + name + ") is not supported by Strata; its layer symbols are " +
                                           layer_symbols());
    throw ConfigError(kPatternField, at + " in the " + what + " pattern is not a layer symbol (" +
                                         LayerKindRegistry::instance().pattern_symbols() +
                                         "; | between pipeline segments, / before each MTP depth)");
  }
}

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out(1);
  for (char c : s) {
    if (c == sep)
      out.emplace_back();
    else
      out.back() += c;
  }
  return out;
}

void parse_main(HybridPattern& p) {
  check_symbols(p.main, 0, true, "main");
  p.segments = split(p.main, kPipe);
  for (size_t i = 0; i < p.segments.size(); ++i) {
    if (p.segments[i].empty() && p.segments.size() > 1)
      throw ConfigError(kPatternField, "pipeline segment " + str(static_cast<int64_t>(i)) + " of '" + p.main +
                                           "' is empty (each '|' segment needs at least one layer)");
    p.layers += p.segments[i];
  }
  if (p.layers.empty()) throw ConfigError(kPatternField, "the main pattern (before the first '/') has no layers");
}

void parse_mtp(HybridPattern& p, const std::vector<std::string>& parts, size_t offset) {
  bool all_empty = true;
  for (size_t i = 1; i < parts.size(); ++i) all_empty = all_empty && parts[i].empty();
  if (all_empty) return;  // Megatron: a trailing '/' without MTP patterns means no MTP
  size_t at = offset;
  for (size_t i = 1; i < parts.size(); ++i) {
    check_symbols(parts[i], at, false, "MTP");
    if (parts[i].empty())
      throw ConfigError(kPatternField, "MTP pattern " + str(static_cast<int64_t>(i)) + " (at position " +
                                           str(static_cast<int64_t>(at)) + ") is empty");
    if (parts[i] != parts[1])
      throw ConfigError(kPatternField, "all MTP patterns must be identical: pattern 1 is '" + parts[1] +
                                           "', pattern " + str(static_cast<int64_t>(i)) + " (at position " +
                                           str(static_cast<int64_t>(at)) + ") is '" + parts[i] + "'");
    at += parts[i].size() + 1;
  }
  p.mtp = parts[1];
  p.mtp_depths = static_cast<int64_t>(parts.size()) - 1;
}

}  // namespace

HybridPattern parse_hybrid_pattern(const std::string& pattern) {
  if (pattern.empty()) throw ConfigError(kPatternField, "is empty (null: not a hybrid model)");
  const std::vector<std::string> parts = split(pattern, kMtpSeparator);
  HybridPattern p;
  p.main = parts[0];
  parse_main(p);
  parse_mtp(p, parts, p.main.size() + 1);
  return p;
}

int64_t hybrid_mtp_depths(const std::string& pattern) { return parse_hybrid_pattern(pattern).mtp_depths; }

std::optional<int64_t> check_hybrid_mtp_num_layers(const std::string& pattern, std::optional<int64_t> mtp_num_layers) {
  const int64_t depths = hybrid_mtp_depths(pattern);
  if (depths == 0) return mtp_num_layers;
  if (mtp_num_layers && *mtp_num_layers != depths)
    throw ConfigError("model.mtp_num_layers", str(*mtp_num_layers) + " conflicts with the " + str(depths) +
                                                  " MTP depths ('/' patterns) of model.hybrid_layer_pattern '" +
                                                  pattern + "'; leave it null (inferred) or make them agree");
  return depths;
}

void check_hybrid_pattern_supported(const HybridPattern& p, const std::string& pattern) {
  if (!kMambaInThisBuild) {
    const size_t m = pattern.find(kMamba);
    if (m != std::string::npos)
      throw ConfigError(kPatternField, "'M' at position " + str(static_cast<int64_t>(m)) +
                                           ": the Mamba2 mixer is not in this build (layers * - E are)");
  }
  if (!kMtpInThisBuild && p.mtp_depths > 0)
    throw ConfigError(kPatternField, "'/' at position " + str(static_cast<int64_t>(p.main.size())) +
                                         ": multi-token prediction is not in this build");
}

std::vector<int64_t> hybrid_moe_layer_map(const HybridPattern& p) {
  std::vector<int64_t> map;
  for (char c : p.layers) map.push_back(c == kMoe ? 1 : 0);
  return map;
}

void apply_hybrid_pipeline_layout(const HybridPattern& p, ParallelConfig& parallel) {
  const int64_t pp = parallel.pipeline_model_parallel_size;
  const int64_t segments = static_cast<int64_t>(p.segments.size());
  auto& vpp = parallel.virtual_pipeline_model_parallel_size;
  if (!p.has_pipes()) {
    if (vpp)
      throw ConfigError("parallel.virtual_pipeline_model_parallel_size",
                        "needs '|' segments in model.hybrid_layer_pattern (a multiple of "
                        "parallel.pipeline_model_parallel_size); the virtual stages are derived from them");
    return;
  }
  if (pp == 1) return;  // one stage holds every segment (generation, export, single-rank runs of the config)
  if (segments % pp != 0)
    throw ConfigError(kPatternField, "has " + str(segments) +
                                         " '|' pipeline segments, not a multiple of "
                                         "parallel.pipeline_model_parallel_size (" + str(pp) + ")");
  const std::pair<const char*, bool> uneven[] = {
      {"parallel.num_layers_in_first_pipeline_stage", parallel.num_layers_in_first_pipeline_stage.has_value()},
      {"parallel.num_layers_in_last_pipeline_stage", parallel.num_layers_in_last_pipeline_stage.has_value()}};
  for (const auto& [field, set] : uneven)
    if (set)
      throw ConfigError(field, "cannot be set when model.hybrid_layer_pattern has '|' segments (they define the stages)");
  const int64_t derived = segments / pp;
  if (vpp && *vpp != derived)
    throw ConfigError("parallel.virtual_pipeline_model_parallel_size",
                      str(*vpp) + " conflicts with model.hybrid_layer_pattern: " + str(segments) +
                          " '|' segments over parallel.pipeline_model_parallel_size " + str(pp) + " give " +
                          str(derived) + " virtual stage(s); leave it null");
  if (derived > 1) vpp = derived;
}

PipelineChunkLayout hybrid_chunk_layout(const HybridPattern& p, const ParallelConfig& parallel, int64_t pp_rank,
                                        int64_t chunk) {
  if (!p.has_pipes() || parallel.pipeline_model_parallel_size == 1)
    return pipeline_chunk_layout(parallel, p.num_layers(), pp_rank, chunk);
  const int64_t pp = parallel.pipeline_model_parallel_size;
  const int64_t segments = static_cast<int64_t>(p.segments.size());
  const int64_t index = chunk * pp + pp_rank;
  STRATA_CHECK(pp_rank >= 0 && pp_rank < pp && chunk >= 0 && index < segments, "hybrid_chunk_layout: segment ",
               index, " (pp_rank ", pp_rank, ", chunk ", chunk, ") outside the ", segments, " segments of '",
               p.main, "'");
  PipelineChunkLayout l;
  for (int64_t i = 0; i < index; ++i) l.first_layer += static_cast<int64_t>(p.segments[static_cast<size_t>(i)].size());
  l.num_layers = static_cast<int64_t>(p.segments[static_cast<size_t>(index)].size());
  l.pre_process = index == 0;
  l.post_process = index == segments - 1;
  return l;
}

}  // namespace strata::hybrid
