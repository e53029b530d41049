// Train/valid/test document ranges from a split string, exactly as Megatron-Core:
// megatron/core/datasets/utils.py parse_and_normalize_split + blended_megatron_dataset_config.py
// convert_split_vector_to_split_matrix + blended_megatron_dataset_builder.py
// (_build_megatron_dataset_splits).
//   "969,30,1": numbers are every run of [.0-9] (so "969/30/1" and "0.9 0.1" work), missing ones
//   are 0; weights are normalized (w / sum); cumulative bounds c = [0, w0, w0+w1, w0+w1+w2];
//   split k is [round(c_k · n), round(c_{k+1} · n)) with round-half-to-even (Python's round), and
//   is absent when its weight is 0 (c_{k+1} <= c_k). The last bound is n.
#pragma once
#include <array>
#include <cstdint>
#include <optional>
#include <string>

namespace strata::data {

enum class Split : int { Train = 0, Valid = 1, Test = 2 };
const char* split_name(Split s);  // "train", "valid", "test"

struct DocumentRange {
  int64_t begin = 0, end = 0;  // [begin, end)
  int64_t size() const { return end - begin; }
  friend bool operator==(const DocumentRange&, const DocumentRange&) = default;
};

// The normalized weights (Config error for a malformed string, negative or all-zero weights,
// or more than three numbers).
std::array<double, 3> parse_split(const std::string& split);

std::array<std::optional<DocumentRange>, 3> split_document_ranges(const std::string& split, int64_t num_documents);

}  // namespace strata::data
