// Megatron's per-layer pattern values (see layer_pattern.h).
// Reference: megatron/training/arguments.py (_eval_pattern, no_rope_freq_type),
// megatron/core/transformer/transformer_config.py (__post_init__: no_rope_freq).
#include "models/config/layer_pattern.h"

#include <cctype>

#include "core/config_table.h"

namespace strata {

namespace {

constexpr int64_t kMaxPatternLength = kMaxLayerPatternLength;

std::string str(int64_t x) { return std::to_string(x); }

struct PatternError {
  std::string message;
};

// expr := term ('+' term)* ; term := atom ('*' atom)* ; atom := INT | '[' INT (',' INT)* ']' | '(' expr ')'
// A value is an integer or a list; list + list concatenates, list * int repeats, int op int is arithmetic.
class PatternParser {
 public:
  explicit PatternParser(const std::string& text) : s_(text) {}

  std::vector<int64_t> parse() {
    Val v = expr();
    skip_space();
    if (pos_ != s_.size()) fail(std::string("unexpected '") + s_[pos_] + "'");
    if (!v.is_list) fail("the pattern is the integer " + str(v.n), false);
    return v.list;
  }

 private:
  struct Val {
    bool is_list = false;
    int64_t n = 0;
    std::vector<int64_t> list;
  };

  [[noreturn]] void fail(const std::string& what, bool at = true) const {
    throw PatternError{"cannot parse the pattern '" + s_ + "': " + what +
                       (at ? " at position " + str(static_cast<int64_t>(pos_)) : "") +
                       " (expected lists of integers joined by + and repeated by *, e.g. ([0]*1+[1]*3))"};
  }
  void skip_space() {
    while (pos_ < s_.size() && std::isspace(static_cast<unsigned char>(s_[pos_]))) ++pos_;
  }
  bool eat(char c) {
    skip_space();
    if (pos_ < s_.size() && s_[pos_] == c) return ++pos_, true;
    return false;
  }
  void expect(char c) {
    if (!eat(c)) fail(std::string("expected '") + c + "'");
  }
  int64_t integer() {
    skip_space();
    size_t start = pos_;
    int64_t x = 0;
    while (pos_ < s_.size() && std::isdigit(static_cast<unsigned char>(s_[pos_]))) {
      x = x * 10 + (s_[pos_++] - '0');
      if (x > kMaxPatternLength) fail("integer too large (more than " + str(kMaxPatternLength) + ")");
    }
    if (pos_ == start) {
      if (pos_ == s_.size()) fail("unexpected end");
      fail(std::string("unexpected '") + s_[pos_] + "'");
    }
    return x;
  }
  Val expr() {
    Val v = term();
    while (eat('+')) {
      Val r = term();
      if (v.is_list != r.is_list) fail("cannot add a list and an integer");
      if (v.is_list)
        v.list.insert(v.list.end(), r.list.begin(), r.list.end());
      else
        v.n += r.n;
      check_size(v);
    }
    return v;
  }
  Val term() {
    Val v = atom();
    while (eat('*')) {
      Val r = atom();
      if (v.is_list && r.is_list) fail("cannot multiply two lists");
      if (!v.is_list && !r.is_list) {
        if (r.n != 0 && v.n > kMaxPatternLength / r.n) fail("integer too large");
        v.n *= r.n;
        continue;
      }
      Val& list = v.is_list ? v : r;
      int64_t times = v.is_list ? r.n : v.n;
      if (times != 0 && static_cast<int64_t>(list.list.size()) > kMaxPatternLength / times)
        fail("the list is longer than " + str(kMaxPatternLength));
      std::vector<int64_t> out;
      for (int64_t i = 0; i < times; ++i) out.insert(out.end(), list.list.begin(), list.list.end());
      v.is_list = true;
      v.list = std::move(out);
    }
    return v;
  }
  Val atom() {
    Val v;
    if (eat('(')) {
      v = expr();
      expect(')');
    } else if (eat('[')) {
      v.is_list = true;
      if (!eat(']')) {
        do v.list.push_back(integer());
        while (eat(','));
        expect(']');
      }
    } else {
      v.n = integer();
    }
    return v;
  }
  void check_size(const Val& v) const {
    if (static_cast<int64_t>(v.list.size()) > kMaxPatternLength || v.n > kMaxPatternLength)
      fail("the value is larger than " + str(kMaxPatternLength), false);
  }

  const std::string& s_;
  size_t pos_ = 0;
};


}  // namespace

bool parse_plain_int(const std::string& text, int64_t& out) {
  size_t b = text.find_first_not_of(" \t"), e = text.find_last_not_of(" \t");
  if (b == std::string::npos) return false;
  std::string t = text.substr(b, e - b + 1);
  size_t digits = (t[0] == '-' || t[0] == '+') ? 1 : 0;
  if (t.size() == digits || t.size() > 12 || t.find_first_not_of("0123456789", digits) != std::string::npos)
    return false;
  out = std::stoll(t);
  return true;
}

std::string layer_pattern_problem(const std::string& text, std::vector<int64_t>& out) {
  try {
    out = PatternParser(text).parse();
  } catch (const PatternError& e) {
    out.clear();
    return e.message;
  }
  return "";
}

std::vector<int64_t> parse_layer_pattern(const std::string& text, const std::string& field) {
  std::vector<int64_t> out;
  std::string problem = layer_pattern_problem(text, out);
  if (!problem.empty()) throw config::ConfigError(field, problem);
  return out;
}

std::string layer_map_problem(const std::vector<std::string>& value, int64_t num_layers, const LayerMapRule& rule,
                              std::vector<int64_t>& out) {
  out.clear();
  int64_t n = 0;
  if (value.size() == 1 && value[0].find('[') == std::string::npos) {
    if (!parse_plain_int(value[0], n))
      return "'" + value[0] + "' is neither an integer nor a pattern such as ([0]*1+[1]*3)";
    if (n < 1) return std::string("must be >= 1 (") + rule.int_meaning + "), got " + str(n);
    return num_layers < 0 ? "" : rule.from_int(n, num_layers, out);
  }
  if (value.size() == 1) {
    std::string problem = layer_pattern_problem(value[0], out);
    if (!problem.empty()) return problem;
  } else {
    for (const auto& v : value) {
      if (!parse_plain_int(v, n)) return "the list entry '" + v + "' is not an integer (a list holds 0 or 1 per layer)";
      out.push_back(n);
    }
  }
  for (size_t i = 0; i < out.size(); ++i)
    if (out[i] != 0 && out[i] != 1)
      return "entry " + str(static_cast<int64_t>(i)) + " is " + str(out[i]) + "; entries are 0 (" + rule.zero +
             ") or 1 (" + rule.one + ")";
  if (num_layers >= 0 && static_cast<int64_t>(out.size()) != num_layers)
    return "has " + str(static_cast<int64_t>(out.size())) + " entries but model.num_layers is " + str(num_layers) +
           "; a list needs one entry per layer";
  return "";
}

std::string no_rope_layers_problem(const std::vector<std::string>& value, int64_t num_layers,
                                   std::vector<int64_t>& out) {
  out.clear();
  if (value.empty()) return "";
  // Megatron: [0]*(N-1)+[1] repeated num_layers/N times, N dividing num_layers.
  const LayerMapRule rule{"RoPE", "no RoPE", "every N-th layer skips RoPE", [](int64_t n, int64_t layers, std::vector<int64_t>& map) {
                            if (layers % n != 0)
                              return str(n) + " does not divide model.num_layers (" + str(layers) +
                                     "): Megatron repeats [0]*(N-1)+[1] num_layers/N times";
                            for (int64_t i = 0; i < layers; ++i) map.push_back((i + 1) % n == 0 ? 1 : 0);
                            return std::string();
                          }};
  return layer_map_problem(value, num_layers, rule, out);
}

}  // namespace strata
