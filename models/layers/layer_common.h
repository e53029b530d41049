// Shared pieces of the GPT layers (models/layers/*): the dtype/device a layer computes in,
// parameter construction (Megatron init recipe carried on the Parameter), main_grad accumulation,
// and the recomputable dropout description (Philox key + GlobalSlice) used for hidden and
// attention dropout. Reference: Megatron-Core transformer/utils.py (init_method_normal,
// scaled_init_method_normal), tensor_parallel/random.py (the RNG tracker these keys replace).
#pragma once
#include <cstdint>
#include <memory>
#include <string>

#include "core/philox.h"
#include "core/random.h"
#include "core/tensor.h"
#include "core/parameter.h"
#include "models/layers/packed_sequence.h"
#include "parallel/parallel_config.h"
#include "parallel/process_group.h"

namespace strata::layers {

// What a layer computes in: parameter values and activations in `dtype` (f32, bf16, or f64 for
// reference/tests) on `device`; gradients accumulate into main_grad of grad_dtype() (f32, f64 for
// an f64 model).
struct LayerEnv {
  DType dtype = DType::F32;
  Device device = Device::cpu();
  // Sequence parallelism (tp > 1): activations between the tensor-parallel regions are
  // [s/tp, b, h] shards of the sequence; norms run on them and reduce their gradients over tp.
  bool sequence_parallel = false;
  // Context parallelism (the cp group given to the layers): how attention communicates.
  CpCommType cp_comm_type = CpCommType::P2P;
  DType grad_dtype() const { return dtype == DType::F64 ? DType::F64 : DType::F32; }
};

// A parameter with value (env.dtype) and zeroed main_grad (env.grad_dtype()). init_std > 0: normal
// init; else the constant init_value. 1-d parameters (biases, norm weights) get no_weight_decay.
Parameter make_parameter(const std::string& name, const Shape& shape, const LayerEnv& env, double init_std,
                         double init_value = 0.0);

// A new tensor of `shape` with t's dtype and device.
inline Tensor empty_like_shape(const Tensor& t, const Shape& shape) {
  return Tensor::empty(shape, t.dtype(), t.device());
}

// One dropout application: keep decisions drawn from (key, global index within `slice`).
// Context parallelism: a rank's rows can be two pieces of the global sequence; then rows
// [0, split_row) draw from `slice` and rows [split_row, s) from `slice2`.
struct DropoutSpec {
  double p = 0.0;
  philox::Key key{};
  GlobalSlice slice = GlobalSlice::whole();
  GlobalSlice slice2 = GlobalSlice::whole();
  int64_t split_row = -1;  // < 0: one piece
  bool active() const { return p > 0.0; }
};

// Which dropout site of a layer (part of the key's stream id).
enum class DropoutSite : uint32_t { Embedding = 1, AttentionOutput = 2, MlpOutput = 3, AttentionProbs = 4, MambaOutput = 5 };

// Where this micro-batch's samples sit in the step's global batch: dropout masks of hidden states
// [s, b, h] are drawn over the global [s, global_batch, h] tensor at batch offset `batch_offset`,
// so any data-parallel / micro-batch layout of the same global batch draws the same masks.
struct DropoutKeys {
  uint64_t seed = 0;
  int64_t step = 0;
  int64_t batch_offset = 0;  // index of this micro-batch's sample 0 within the global batch
  int64_t global_batch = 0;  // samples per step (>= batch_offset + b)
  bool training = false;     // dropout only while training
  // Sequence parallelism: hidden states are rows [seq_offset, seq_offset + s) of a sequence of
  // global_seq positions (0: the local s), so shards draw the unsharded run's masks.
  int64_t seq_offset = 0;
  int64_t global_seq = 0;
  // Context parallelism: the sequence above (global_seq rows, or the local s) is cp rank
  // cp_rank's local sequence, chunks cp_rank and 2·cp_size−1−cp_rank of a global sequence of
  // global_seq·cp_size positions (parallel/context_parallel.h); masks are drawn there.
  int cp_size = 1;
  int cp_rank = 0;
  // Packed sequences: the micro-batch's documents (null: one document per sample). Not a key, but
  // the rest of "where these rows sit", which every layer receives through this struct.
  std::shared_ptr<const PackedSequence> packed;
  // Stream id of (step, layer, site): FNV-1a over the three integers.
  philox::Key key(int64_t layer, DropoutSite site) const;
  // Hidden dropout on a [s, b, h] activation of `layer` at `site`.
  DropoutSpec hidden(double p, int64_t layer, DropoutSite site, const Tensor& x) const;
};

// y = dropout(x) (a new tensor; x itself when the spec is inactive).
Tensor apply_dropout(const Tensor& x, const DropoutSpec& d);
// dx = dropout_backward(dy) (a new tensor; dy itself when the spec is inactive).
Tensor apply_dropout_backward(const Tensor& dy, const DropoutSpec& d);

// The residual connection of a layer, Megatron's bias-dropout-add: x + dropout(y), with y cast to
// x's dtype first. With model.fp32_residual_connection the stream x is f32 and y the sub-layer's
// bf16 output, so the dropout and the sum run in f32 (fused_bias_dropout.py casts x to the
// residual's dtype); otherwise both share a dtype and nothing is cast.
Tensor residual_add(const Tensor& x, const Tensor& y, const DropoutSpec& d);
// Its backward: the branch's gradient dropout_backward(dy) in the branch's dtype, and the
// stream's dy + branch_dx (branch_dx cast to dy's dtype).
Tensor residual_branch_grad(const Tensor& dy, const DropoutSpec& d, DType branch);
Tensor residual_grad_sum(const Tensor& dy, const Tensor& branch_dx);

// The gradient of a parameter replicated over tp while each tp rank sees its own rows (sequence
// parallelism: norm weights, the MoE router and shared-expert gate; Megatron's sequence_parallel
// attribute). The backward accumulates into target(): main_grad itself when `sp` has one rank and
// `dtype` is main_grad's, else a zeroed buffer of `dtype`; finish() sums the buffer over `sp` and
// adds it into main_grad (this micro-batch's part only, so main_grad stays the accumulation).
class SequenceParallelGrad {
 public:
  SequenceParallelGrad(Parameter& p, const ProcessGroup& sp, DType dtype, Device device);
  const Tensor& target() const { return target_; }
  void finish();

 private:
  Parameter& p_;
  const ProcessGroup& sp_;
  Tensor target_;
  bool separate_ = false;
};

}  // namespace strata::layers
