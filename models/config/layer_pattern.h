// Megatron's per-layer pattern values (--moe-layer-freq, --no-rope-freq): a list of integers written
// as a Python expression such as "([0]*1+[1]*3)*2", parsed by a small recursive-descent parser (never
// evaluated), and the --no-rope-freq rule that turns an int N or a list into one 0/1 entry per layer.
// Reference: megatron/training/arguments.py (_eval_pattern, moe_freq_type, no_rope_freq_type),
// megatron/core/transformer/transformer_config.py (__post_init__: no_rope_freq).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace strata {

// Patterns and lists longer than this are refused (a config, not a data file).
inline constexpr int64_t kMaxLayerPatternLength = int64_t{1} << 20;

// text: lists of integers joined by + and repeated by * (an integer times a list or a list times an
// integer), with parentheses. Fills `out` and returns "", or returns the problem naming the position.
std::string layer_pattern_problem(const std::string& text, std::vector<int64_t>& out);
// The same, throwing config::ConfigError on `field`.
std::vector<int64_t> parse_layer_pattern(const std::string& text, const std::string& field);
// An integer written alone (surrounding blanks and a sign allowed, at most 12 characters).
bool parse_plain_int(const std::string& text, int64_t& out);

// How a per-layer field reads an int N and names its 0/1 entries (for messages).
struct LayerMapRule {
  const char* zero;  // what entry 0 means: "dense", "RoPE"
  const char* one;   // what entry 1 means: "MoE", "no RoPE"
  const char* int_meaning;  // what an int N means: "layer i is an MoE layer iff i % N == 0"
  // Layer i's entry for an int N >= 1 over `layers` layers; "" or the problem (e.g. N does not divide).
  std::string (*from_int)(int64_t n, int64_t layers, std::vector<int64_t>& out);
};
// A per-layer 0/1 field as the config decodes it (a list of strings: one element for an int N or a
// pattern string, several for an explicit list) → one entry per layer. Fills `out` and returns "", or
// the problem. num_layers < 0: syntax only. An empty value is the caller's to handle.
std::string layer_map_problem(const std::vector<std::string>& value, int64_t num_layers, const LayerMapRule& rule,
                              std::vector<int64_t>& out);

// model.no_rope_freq as decoded (the config's list of strings: one element for an int N or a pattern,
// several for an explicit 0/1 list) → one entry per layer, 1 where the layer skips RoPE. An int N is
// Megatron's [0]*(N-1)+[1] repeated num_layers/N times (num_layers must divide by N); a list or pattern
// must have num_layers entries. An empty value: RoPE on every layer (empty result). Fills `out` and
// returns "", or the problem. num_layers < 0: syntax only.
std::string no_rope_layers_problem(const std::vector<std::string>& value, int64_t num_layers,
                                   std::vector<int64_t>& out);

}  // namespace strata
