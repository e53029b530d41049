// Argument checks and buffer helpers shared by the MPI and NCCL communicators
// (parallel/mpi_communicator.cpp, parallel/nccl_communicator.cpp): the shape/count rules of each
// collective (parallel/communicator.h), the reduce-op rules every backend applies the same way
// (avg of a bool tensor is undefined), and the aliasing tests both backends need before handing
// buffers to a library that forbids overlapping send and receive buffers. Each check throws
// strata::Error naming the collective and the offending argument. The backend-specific parts
// (MPI_Datatype / ncclDataType_t mapping, the device or host check) stay in the backends.
// Reference: MPI 3.1 §5 (buffer rules), NCCL user guide (in-place operations).
#pragma once
#include <cstdint>
#include <vector>

#include "core/tensor.h"
#include "parallel/communicator.h"

namespace strata::comm_checks {

inline char* bytes(const Tensor& t) { return static_cast<char*>(t.data_ptr()); }

// a and b have the same dtype ("<collective>: input is f32, output f64").
void same_dtype(const Tensor& input, const Tensor& output, const char* collective);
// Avg of a bool tensor is rejected (sum/max are logical or, min logical and).
void reduce_op(ReduceOp op, DType dtype, const char* collective);
// input: [size·n] → output: [n].
void reduce_scatter(const Tensor& input, const Tensor& output, int size);
// input: [n] → output: [size·n].
void all_gather(const Tensor& input, const Tensor& output, int size);
// counts: one per rank, non-negative, counts[rank] == input.numel(), Σ counts == output.numel().
// Returns Σ counts.
int64_t all_gather_v(const Tensor& input, const Tensor& output, const std::vector<int64_t>& counts, int size,
                     int rank);
// input: [size·n] → output: [size·n].
void all_to_all(const Tensor& input, const Tensor& output, int size);
// One send and one receive count per rank, non-negative, sums within input / output.
void all_to_all_v(const Tensor& input, const std::vector<int64_t>& send_counts, const Tensor& output,
                  const std::vector<int64_t>& recv_counts, int size);
// 0 <= root < size.
void root(int root, int size, const char* collective);

// True when `input` is exactly output's elements [offset, offset + input.numel()) (an in-place
// gather: the library's MPI_IN_PLACE / NCCL in-place all-gather).
bool at_offset(const Tensor& input, const Tensor& output, int64_t offset);
// True when the two tensors' bytes overlap.
bool overlap(const Tensor& a, const Tensor& b);
// input itself unless it overlaps output (then a copy); in_place_offset >= 0: also input itself
// when it is exactly output's elements at that offset (the in-place gather).
Tensor unaliased(const Tensor& input, const Tensor& output, int64_t in_place_offset = -1);

}  // namespace strata::comm_checks
