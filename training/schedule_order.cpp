// Pipeline schedule orders (see schedule_order.h). Reference: megatron/core/pipeline_parallel/schedules.py.
#include "training/schedule_order.h"

#include <algorithm>

#include "core/error.h"

namespace strata {

std::string to_string(const PipelineOp& op) {
  std::string s = (op.kind == PipelineOp::Kind::Forward ? "F" : "B") + std::to_string(op.micro_batch);
  if (op.chunk != 0) s += "." + std::to_string(op.chunk);
  return s;
}

std::string to_string(const std::vector<PipelineOp>& ops) {
  std::string s;
  for (const PipelineOp& op : ops) s += (s.empty() ? "" : " ") + to_string(op);
  return s;
}

int64_t interleaved_chunk_id(int64_t k, int64_t pp, int64_t vpp, bool forward) {
  const int64_t in_group = k % (pp * vpp);
  const int64_t chunk = in_group / pp;
  return forward ? chunk : vpp - chunk - 1;
}

int64_t interleaved_micro_batch_id(int64_t k, int64_t pp, int64_t vpp) {
  const int64_t group = k / (pp * vpp);
  return group * pp + k % pp;
}

namespace {
void check_layout(int64_t pp, int64_t rank, int64_t vpp, int64_t m) {
  STRATA_CHECK(pp >= 1 && rank >= 0 && rank < pp, "pipeline schedule: rank ", rank, " outside a pipeline of ", pp,
               " stages");
  STRATA_CHECK(vpp >= 1, "pipeline schedule: virtual pipeline size must be >= 1, got ", vpp);
  STRATA_CHECK(m >= 1, "pipeline schedule: number of micro-batches must be >= 1, got ", m);
  STRATA_CHECK(vpp == 1 || pp > 1, "pipeline schedule: virtual pipeline size ", vpp, " needs more than one stage");
  STRATA_CHECK(vpp == 1 || m % pp == 0, "pipeline schedule: the interleaved schedule needs the number of "
               "micro-batches (", m, ") to be a multiple of pipeline_model_parallel_size (", pp, ")");
}
}  // namespace

int64_t num_warmup_micro_batches(int64_t pp, int64_t rank, int64_t vpp, int64_t m) {
  check_layout(pp, rank, vpp, m);
  if (vpp == 1) return std::min(pp - rank - 1, m);
  const int64_t total = m * vpp;
  if (m == pp) return total;
  return std::min(2 * (pp - rank - 1) + (vpp - 1) * pp, total);
}

std::vector<PipelineOp> pipeline_schedule_order(int64_t pp, int64_t rank, int64_t vpp, int64_t m) {
  const int64_t warmup = num_warmup_micro_batches(pp, rank, vpp, m);
  const int64_t total = m * vpp;
  const int64_t remaining = total - warmup;
  auto fwd = [&](int64_t k) {
    if (vpp == 1) return PipelineOp{PipelineOp::Kind::Forward, k, 0};
    return PipelineOp{PipelineOp::Kind::Forward, interleaved_micro_batch_id(k, pp, vpp),
                      interleaved_chunk_id(k, pp, vpp, true)};
  };
  auto bwd = [&](int64_t k) {
    if (vpp == 1) return PipelineOp{PipelineOp::Kind::Backward, k, 0};
    return PipelineOp{PipelineOp::Kind::Backward, interleaved_micro_batch_id(k, pp, vpp),
                      interleaved_chunk_id(k, pp, vpp, false)};
  };
  std::vector<PipelineOp> ops;
  for (int64_t k = 0; k < warmup; ++k) ops.push_back(fwd(k));
  for (int64_t k = 0; k < remaining; ++k) {
    ops.push_back(fwd(warmup + k));
    ops.push_back(bwd(k));
  }
  for (int64_t k = remaining; k < total; ++k) ops.push_back(bwd(k));
  return ops;
}

double pipeline_bubble_fraction(int64_t pp, int64_t vpp, int64_t m) {
  return static_cast<double>(pp - 1) / static_cast<double>(vpp * m);
}

}  // namespace strata
