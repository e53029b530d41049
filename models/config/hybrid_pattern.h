// The hybrid layer pattern (Megatron's --hybrid-layer-pattern, model.hybrid_layer_pattern): one
// symbol per layer of a hybrid model — `M` Mamba2, `*` attention only, `-` MLP only, `E` MoE only —
// `|` between pipeline segments and `/` before each multi-token-prediction (MTP) depth's pattern:
// "<main>[/<mtp>/<mtp>…]". Parsing and every rule that needs only the pattern (symbols, identical
// MTP patterns without `|`, no empty segments) and the rules against the parallel layout (segments
// a multiple of pp, segment index = vp_stage·pp + pp_rank, VPP derived from the pattern, no uneven
// first/last stage with `|`). Every error is a ConfigError naming model.hybrid_layer_pattern (or
// the conflicting field) and, for a symbol, its 0-based position in the pattern.
// Reference: megatron/core/models/hybrid/hybrid_layer_allocation.py (Symbols, parse_hybrid_pattern,
// select_pipeline_segment), megatron/training/arguments.py (validate_args: hybrid pattern block).
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "parallel/parallel_config.h"
#include "parallel/pipeline_layout.h"

namespace strata::hybrid {

inline constexpr const char* kPatternField = "model.hybrid_layer_pattern";

// The layer symbols Strata builds, and which of them this build has (`M`: the Mamba2 layer,
// models/layers/mamba_layer.h; `/`: the MTP depths, models/blocks/mtp_block.h).
inline constexpr char kMamba = 'M', kAttention = '*', kMlp = '-', kMoe = 'E', kPipe = '|', kMtpSeparator = '/';
inline constexpr bool kMambaInThisBuild = true;
inline constexpr bool kMtpInThisBuild = true;

struct HybridPattern {
  std::string main;                   // the main decoder pattern, `|` included
  std::vector<std::string> segments;  // main split at `|` (one segment without `|`)
  std::string layers;                 // main without `|`: the symbol of each global layer
  std::string mtp;                    // the pattern of one MTP depth ("" without MTP)
  int64_t mtp_depths = 0;             // number of `/` patterns
  int64_t num_layers() const { return static_cast<int64_t>(layers.size()); }
  bool has_pipes() const { return segments.size() > 1; }
};

// Splits and checks a pattern: valid symbols (unknown ones and Megatron's symbols Strata lacks —
// G, D, +, C, H, W — are errors naming the symbol and its position), at least one main layer, no
// empty `|` segment, MTP patterns all identical, non-empty and without `|`.
HybridPattern parse_hybrid_pattern(const std::string& pattern);

// The number of MTP depths of a pattern (0 without `/`): what model.mtp_num_layers is inferred from.
int64_t hybrid_mtp_depths(const std::string& pattern);
// Megatron infers mtp_num_layers from the pattern; Strata refuses a conflicting value instead of
// overriding it: a ConfigError naming model.mtp_num_layers when it is set and differs from the
// pattern's depth count. Returns the value to use (the depths, or mtp_num_layers without `/`).
std::optional<int64_t> check_hybrid_mtp_num_layers(const std::string& pattern, std::optional<int64_t> mtp_num_layers);

// The symbols of a parsed pattern this build cannot run yet (`M` before the Mamba2 mixer, `/`
// before multi-token prediction): a ConfigError naming the field and the first position.
void check_hybrid_pattern_supported(const HybridPattern& p, const std::string& pattern);

// The MoE layer map of the pattern (1 where the symbol is `E`), as ModelConfig::moe_layer_map.
std::vector<int64_t> hybrid_moe_layer_map(const HybridPattern& p);

// The rules against the parallel section (Megatron validate_args): with `|` and pp > 1, the
// segment count a multiple of pp, VPP = segments / pp when larger than 1 (a set
// parallel.virtual_pipeline_model_parallel_size that differs is an error; the derived value is
// written into it), no num_layers_in_first/last_pipeline_stage; without `|`, no virtual pipeline
// (the even or first/last split of parallel/pipeline_layout.h applies). With pp = 1 one stage holds
// every segment (the same config generates, exports and runs on one rank).
void apply_hybrid_pipeline_layout(const HybridPattern& p, ParallelConfig& parallel);

// The layers of model chunk `chunk` on pipeline rank `pp_rank`: segment chunk·pp + pp_rank with
// `|`, else pipeline_chunk_layout's split of the pattern's layers.
PipelineChunkLayout hybrid_chunk_layout(const HybridPattern& p, const ParallelConfig& parallel, int64_t pp_rank,
                                        int64_t chunk);

}  // namespace strata::hybrid
