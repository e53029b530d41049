// Argument checks shared by the MPI and NCCL communicators (parallel/communicator_checks.h).
#include "parallel/communicator_checks.h"

#include "core/error.h"

namespace strata::comm_checks {

void same_dtype(const Tensor& input, const Tensor& output, const char* collective) {
  STRATA_CHECK(input.dtype() == output.dtype(), collective, ": input is ", dtype_name(input.dtype()), ", output ",
               dtype_name(output.dtype()));
}

void reduce_op(ReduceOp op, DType dtype, const char* collective) {
  STRATA_CHECK(!(dtype == DType::Bool && op == ReduceOp::Avg), collective,
               ": avg of a bool tensor is undefined (use sum, max or min)");
}

void reduce_scatter(const Tensor& input, const Tensor& output, int size) {
  same_dtype(input, output, "reduce_scatter");
  STRATA_CHECK(input.numel() == output.numel() * size, "reduce_scatter: input has ", input.numel(),
               " elements, expected size·output = ", size, "·", output.numel());
}

void all_gather(const Tensor& input, const Tensor& output, int size) {
  same_dtype(input, output, "all_gather");
  STRATA_CHECK(output.numel() == input.numel() * size, "all_gather: output has ", output.numel(),
               " elements, expected size·input = ", size, "·", input.numel());
}

int64_t all_gather_v(const Tensor& input, const Tensor& output, const std::vector<int64_t>& counts, int size,
                     int rank) {
  same_dtype(input, output, "all_gather_v");
  STRATA_CHECK(static_cast<int>(counts.size()) == size, "all_gather_v: ", counts.size(), " counts for ", size,
               " ranks");
  STRATA_CHECK(counts[rank] == input.numel(), "all_gather_v: counts[", rank, "] = ", counts[rank],
               " but this rank's input has ", input.numel(), " elements");
  int64_t total = 0;
  for (int r = 0; r < size; ++r) {
    STRATA_CHECK(counts[r] >= 0, "all_gather_v: counts[", r, "] = ", counts[r], " is negative");
    total += counts[r];
  }
  STRATA_CHECK(output.numel() == total, "all_gather_v: output has ", output.numel(), " elements, counts sum to ",
               total);
  return total;
}

void all_to_all(const Tensor& input, const Tensor& output, int size) {
  same_dtype(input, output, "all_to_all");
  STRATA_CHECK(input.numel() % size == 0, "all_to_all: input has ", input.numel(),
               " elements, not divisible by the group size ", size);
  STRATA_CHECK(output.numel() == input.numel(), "all_to_all: output has ", output.numel(), " elements, input ",
               input.numel());
}

void all_to_all_v(const Tensor& input, const std::vector<int64_t>& send_counts, const Tensor& output,
                  const std::vector<int64_t>& recv_counts, int size) {
  same_dtype(input, output, "all_to_all_v");
  STRATA_CHECK(static_cast<int>(send_counts.size()) == size && static_cast<int>(recv_counts.size()) == size,
               "all_to_all_v: ", send_counts.size(), " send counts and ", recv_counts.size(), " receive counts for ",
               size, " ranks");
  int64_t send_total = 0, recv_total = 0;
  for (int r = 0; r < size; ++r) {
    STRATA_CHECK(send_counts[r] >= 0 && recv_counts[r] >= 0, "all_to_all_v: negative count for rank ", r);
    send_total += send_counts[r];
    recv_total += recv_counts[r];
  }
  STRATA_CHECK(send_total <= input.numel(), "all_to_all_v: send counts sum to ", send_total, " but input has ",
               input.numel(), " elements");
  STRATA_CHECK(recv_total <= output.numel(), "all_to_all_v: receive counts sum to ", recv_total, " but output has ",
               output.numel(), " elements");
}

void root(int root, int size, const char* collective) {
  STRATA_CHECK(root >= 0 && root < size, collective, ": root ", root, " outside a group of ", size, " ranks");
}

bool at_offset(const Tensor& input, const Tensor& output, int64_t offset) {
  return input.storage() == output.storage() &&
         bytes(input) == bytes(output) + offset * static_cast<int64_t>(output.element_size());
}

bool overlap(const Tensor& a, const Tensor& b) {
  if (a.storage() != b.storage() || a.numel() == 0 || b.numel() == 0) return false;
  const char* pa = bytes(a);
  const char* pb = bytes(b);
  return pa < pb + b.nbytes() && pb < pa + a.nbytes();
}

Tensor unaliased(const Tensor& input, const Tensor& output, int64_t in_place_offset) {
  if (!overlap(input, output)) return input;
  if (in_place_offset >= 0 && at_offset(input, output, in_place_offset)) return input;
  return input.clone();
}

}  // namespace strata::comm_checks
