// Implements data/data_split.h (Megatron-Core split semantics, see the header).
#include "data/data_split.h"

#include <cctype>
#include <cmath>
#include <vector>

#include "core/error.h"

namespace strata::data {

const char* split_name(Split s) {
  switch (s) {
    case Split::Train: return "train";
    case Split::Valid: return "valid";
    case Split::Test: return "test";
  }
  return "?";
}

std::array<double, 3> parse_split(const std::string& split) {
  std::vector<double> w;
  for (size_t i = 0; i < split.size();) {
    if (!(std::isdigit(static_cast<unsigned char>(split[i])) || split[i] == '.')) {
      ++i;
      continue;
    }
    size_t j = i;
    while (j < split.size() && (std::isdigit(static_cast<unsigned char>(split[j])) || split[j] == '.')) ++j;
    std::string run = split.substr(i, j - i);
    size_t used = 0;
    double v = 0;
    try {
      v = std::stod(run, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    STRATA_CHECK_KIND(ErrorKind::Config, used == run.size(), "split '", split, "': '", run, "' is not a number");
    w.push_back(v);
    i = j;
  }
  STRATA_CHECK_KIND(ErrorKind::Config, w.size() <= 3, "split '", split, "' has ", w.size(),
                    " numbers; expected at most 3 (train, valid, test)");
  w.resize(3, 0.0);
  double sum = 0;
  for (double x : w) sum += x;
  STRATA_CHECK_KIND(ErrorKind::Config, sum > 0 && std::isfinite(sum), "split '", split, "' has no positive weight");
  return {w[0] / sum, w[1] / sum, w[2] / sum};
}

std::array<std::optional<DocumentRange>, 3> split_document_ranges(const std::string& split, int64_t num_documents) {
  STRATA_CHECK(num_documents >= 0, "split_document_ranges: negative document count ", num_documents);
  std::array<double, 3> w = parse_split(split);
  const double cum[4] = {0.0, w[0], w[0] + w[1], (w[0] + w[1]) + w[2]};
  const double n = static_cast<double>(num_documents);
  std::array<std::optional<DocumentRange>, 3> out;
  for (int k = 0; k < 3; ++k) {
    if (cum[k + 1] <= cum[k]) continue;  // zero weight: no dataset for this split
    int64_t begin = static_cast<int64_t>(std::nearbyint(cum[k] * n));  // ties to even, like Python round
    int64_t end = k == 2 ? num_documents : static_cast<int64_t>(std::nearbyint(cum[k + 1] * n));
    // The last bound is exactly n (Megatron's round(c_3 · n) equals n for any realistic n).
    if (k < 2 && cum[k + 1] >= cum[3]) end = num_documents;
    out[k] = DocumentRange{begin, end};
  }
  return out;
}

}  // namespace strata::data
