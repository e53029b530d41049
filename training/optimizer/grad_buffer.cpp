// GradBuffer (training/optimizer/grad_buffer.h): layout, buckets, and their reduction over data parallelism.
#include "training/optimizer/grad_buffer.h"

#include <algorithm>
#include <chrono>
#include <numeric>

#include "core/error.h"
#include "kernels/elementwise.h"

namespace strata {

namespace {
int64_t round_up(int64_t x, int64_t m) { return (x + m - 1) / m * m; }
}  // namespace

int64_t default_ddp_bucket_size(std::optional<int64_t> configured, bool overlap_grad_reduce, int64_t dp_size) {
  if (!overlap_grad_reduce) return 0;  // Megatron: bucket_size = None → one bucket
  if (configured) return *configured;
  return std::max<int64_t>(40000000, 1000000 * dp_size);
}

GradBuffer::GradBuffer(const std::vector<Parameter*>& params, ProcessGroup dp, const GradBufferOptions& options)
    : params_(params), dp_(std::move(dp)), options_(options) {
  STRATA_CHECK(!params_.empty(), "GradBuffer: no parameters");
  STRATA_CHECK(options_.bucket_size >= 0, "GradBuffer: bucket size must be >= 0, got ", options_.bucket_size);
  const bool dist = options_.distributed_optimizer;
  const int64_t dp_size = dp_.size();
  const int64_t bucket_divisor = dist ? std::lcm<int64_t>(dp_size, 128) : 1;
  const Device device = params_.front()->value.device();

  offsets_.assign(params_.size(), 0);
  bucket_of_param_.assign(params_.size(), 0);
  int64_t cursor = 0;
  GradBucket current;
  auto close_bucket = [&]() {
    cursor = round_up(cursor, bucket_divisor);
    current.numel = cursor - current.offset;
    current.shard_numel = dist ? current.numel / dp_size : current.numel;
    buckets_.push_back(current);
    current = GradBucket{};
    current.offset = cursor;
  };
  // Reverse model order: the backward pass finishes the last parameters first.
  for (size_t k = params_.size(); k-- > 0;) {
    Parameter* p = params_[k];
    STRATA_CHECK(p != nullptr && p->value.defined(), "GradBuffer: parameter ", k, " has no value");
    STRATA_CHECK(p->value.device() == device, "GradBuffer: parameter ", p->name, " is on ", p->value.device().str(),
                 ", the others on ", device.str());
    const bool alone =
        dist && std::find(options_.own_bucket.begin(), options_.own_bucket.end(), p) != options_.own_bucket.end();
    if (alone && !current.params.empty()) close_bucket();
    if (dist) cursor = round_up(cursor, 64);
    offsets_[k] = cursor;
    cursor += p->value.numel();
    current.params.push_back(k);
    bucket_of_param_[k] = buckets_.size();
    if ((alone || (options_.bucket_size > 0 && cursor - current.offset >= options_.bucket_size)) && k > 0)
      close_bucket();
  }
  close_bucket();

  data_ = Tensor::zeros({cursor}, DType::F32, device);
  for (size_t k = 0; k < params_.size(); ++k)
    params_[k]->main_grad = data_.narrow(0, offsets_[k], params_[k]->value.numel()).view(params_[k]->value.shape());
  pending_.assign(buckets_.size(), 0);
  started_.assign(buckets_.size(), false);
  work_.resize(buckets_.size());
  shards_.resize(buckets_.size());
  wire_.resize(buckets_.size());
  STRATA_CHECK(options_.reduce_dtype == DType::F32 || options_.reduce_dtype == DType::BF16 ||
                   options_.reduce_dtype == DType::F16,
               "GradBuffer: main grads are f32, bf16 or f16, got ", dtype_name(options_.reduce_dtype));
  start_time_.resize(buckets_.size());
  complete_.assign(buckets_.size(), false);
  for (size_t k = 0; k < params_.size(); ++k) index_of_[params_[k]] = k;
  zero();
}

GradBuffer::~GradBuffer() {
  // A step abandoned by an exception: complete the collectives in flight before their buffers go.
  for (auto& w : work_) {
    if (!w) continue;
    try {
      w->wait();
    } catch (...) {
    }
  }
}

std::pair<int64_t, int64_t> GradBuffer::owned_range(size_t bucket) const {
  const GradBucket& b = buckets_.at(bucket);
  if (!options_.distributed_optimizer) return {b.offset, b.offset + b.numel};
  const int64_t begin = b.offset + static_cast<int64_t>(dp_.rank()) * b.shard_numel;
  return {begin, begin + b.shard_numel};
}

void GradBuffer::zero() {
  for (const auto& w : work_)
    STRATA_INTERNAL_ASSERT(w == nullptr, "GradBuffer::zero: a bucket reduction is still in flight (finish_grad_sync first)");
  data_.zero_();
  for (size_t b = 0; b < buckets_.size(); ++b) {
    pending_[b] = static_cast<int64_t>(buckets_[b].params.size());
    started_[b] = false;
  }
  started_early_step_ = 0;
}

void GradBuffer::register_grad_ready(size_t i) {
  STRATA_CHECK(i < params_.size(), "GradBuffer::register_grad_ready: parameter index ", i, " out of range");
  const size_t b = bucket_of_param_[i];
  STRATA_INTERNAL_ASSERT(pending_[b] > 0, "GradBuffer: parameter ", params_[i]->name, " marked ready twice");
  poll_in_flight();
  if (--pending_[b] == 0) {
    start_bucket(b);
    ++started_early_step_;
    ++started_early_total_;
  }
}

void GradBuffer::register_grad_ready(const Parameter* p) {
  auto it = index_of_.find(p);
  STRATA_CHECK(it != index_of_.end(), "GradBuffer::register_grad_ready: parameter ", p ? p->name : std::string("null"),
               " is not in this buffer");
  register_grad_ready(it->second);
}

void GradBuffer::finish_grad_sync() {
  for (size_t b = 0; b < buckets_.size(); ++b) {
    if (!work_[b]) continue;
    const auto t0 = Clock::now();
    work_[b]->wait();
    const auto t1 = Clock::now();
    comm_seconds_ += std::chrono::duration<double>(t1 - t0).count();
    if (!complete_[b]) inflight_seconds_ += std::chrono::duration<double>(t1 - start_time_[b]).count();
    work_[b].reset();
    finish_bucket(b);
  }
  for (size_t b = 0; b < buckets_.size(); ++b)
    if (!started_[b]) reduce_bucket(b);
}

namespace {
// The f32 values of `slice` rounded to `dtype` (bf16 or f16, round to nearest even; beyond f16's
// range: ±Inf), in place.
void round_to(Tensor slice, DType dtype) { slice.copy_(slice.to(dtype)); }
}  // namespace

void GradBuffer::round_accumulated() {
  if (options_.reduce_dtype == DType::F32) return;
  for (size_t b = 0; b < buckets_.size(); ++b)
    if (!started_[b]) round_to(data_.narrow(0, buckets_[b].offset, buckets_[b].numel), options_.reduce_dtype);
}

void GradBuffer::scale(double factor) {
  for (const auto& w : work_)
    STRATA_INTERNAL_ASSERT(w == nullptr, "GradBuffer::scale: a bucket reduction is still in flight");
  kernels::scale(data_, factor, data_);
}

ReduceOp GradBuffer::collective_op() const {
  return options_.reduce_dtype == DType::F32 ? op_ : ReduceOp::Sum;  // 16-bit: scaled first, then summed (Megatron)
}

void GradBuffer::apply_gradient_scale(size_t b) {
  const bool half = options_.reduce_dtype != DType::F32;
  double scale = options_.gradient_scale;
  if (half && op_ == ReduceOp::Avg) scale /= static_cast<double>(dp_.size());  // Megatron's 1/dp scaling
  Tensor whole = data_.narrow(0, buckets_[b].offset, buckets_[b].numel);
  if (half) round_to(whole, options_.reduce_dtype);  // the last backward's sum
  if (scale != 1.0) kernels::scale(whole, scale, whole);
  if (half && scale != 1.0) round_to(whole, options_.reduce_dtype);  // the 16-bit main_grad *= scale
}

Tensor GradBuffer::wire_input(size_t b) {
  Tensor whole = data_.narrow(0, buckets_[b].offset, buckets_[b].numel);
  if (options_.reduce_dtype == DType::F32) return whole;
  wire_[b] = whole.to(options_.reduce_dtype);
  return wire_[b];
}

void GradBuffer::finish_bucket(size_t b) {
  if (options_.distributed_optimizer) {
    const auto [begin, end] = owned_range(b);
    data_.narrow(0, begin, end - begin).copy_(shards_[b]);  // (16-bit → f32 with a 16-bit reduce_dtype)
    shards_[b] = Tensor();
  } else if (wire_[b].defined()) {
    data_.narrow(0, buckets_[b].offset, buckets_[b].numel).copy_(wire_[b]);
  }
  wire_[b] = Tensor();
}

namespace {
// One bucket's collective over dp, blocking (returns null) or started (returns its work): the
// slice all-reduced in place, or with the distributed optimizer reduce-scattered into shard.
std::unique_ptr<CommWork> bucket_collective(const ProcessGroup& dp, Tensor whole, Tensor& shard, bool distributed,
                                            ReduceOp op, bool async) {
  if (distributed) {
    if (async) return dp.reduce_scatter_async(whole, shard, op);
    dp.reduce_scatter(whole, shard, op);
    return nullptr;
  }
  if (async) return dp.all_reduce_async(whole, op);
  dp.all_reduce(whole, op);
  return nullptr;
}
}  // namespace

std::optional<GradBuffer::Clock::time_point> GradBuffer::begin_bucket_reduction(size_t b, bool async) {
  started_[b] = true;
  apply_gradient_scale(b);
  if (dp_.size() == 1) return std::nullopt;
  const auto t0 = Clock::now();
  const GradBucket& bucket = buckets_[b];
  if (options_.distributed_optimizer)
    shards_[b] = Tensor::empty({bucket.shard_numel}, options_.reduce_dtype, data_.device());
  work_[b] = bucket_collective(dp_, wire_input(b), shards_[b], options_.distributed_optimizer, collective_op(), async);
  return t0;
}

void GradBuffer::reduce_bucket(size_t b) {
  const auto t0 = begin_bucket_reduction(b, /*async=*/false);
  if (!t0) return;
  finish_bucket(b);
  const double seconds = std::chrono::duration<double>(Clock::now() - *t0).count();
  comm_seconds_ += seconds;
  inflight_seconds_ += seconds;
}

void GradBuffer::start_bucket(size_t b) {
  const auto t0 = begin_bucket_reduction(b, /*async=*/true);
  if (!t0) return;
  complete_[b] = false;
  start_time_[b] = *t0;
  comm_seconds_ += std::chrono::duration<double>(Clock::now() - *t0).count();
}

void GradBuffer::poll_in_flight() {
  for (size_t b = 0; b < buckets_.size(); ++b) {
    if (!work_[b] || complete_[b]) continue;
    const auto t0 = Clock::now();
    const bool done = work_[b]->test();
    const auto t1 = Clock::now();
    comm_seconds_ += std::chrono::duration<double>(t1 - t0).count();
    if (done) {
      complete_[b] = true;
      inflight_seconds_ += std::chrono::duration<double>(t1 - start_time_[b]).count();
    }
  }
}

void GradBuffer::all_gather_grads() {
  for (const auto& w : work_)
    STRATA_INTERNAL_ASSERT(w == nullptr, "GradBuffer::all_gather_grads: call finish_grad_sync first");
  if (!options_.distributed_optimizer || dp_.size() == 1) return;
  for (size_t b = 0; b < buckets_.size(); ++b) {
    const auto [begin, end] = owned_range(b);
    const Tensor shard = data_.narrow(0, begin, end - begin).clone();
    Tensor whole = Tensor::empty({buckets_[b].numel}, DType::F32, data_.device());
    dp_.all_gather(shard, whole);
    data_.narrow(0, buckets_[b].offset, buckets_[b].numel).copy_(whole);
  }
}

}  // namespace strata
