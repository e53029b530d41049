// mHC hyper-connections: the per-site module that wraps one sub-layer F (attention, MLP/MoE, a
// hybrid layer) over n residual streams, the block entry (mhc_expand) and the stack-exit
// contraction. The caller (a layer or block) owns the saved state. Math: kernels/mhc.h.
// Reference: Megatron-LM dev megatron/core/transformer/hyper_connection.py (HyperConnectionModule,
// learned_output_contract / output_contract, input_expand).
// Details (formulas, parameters, dropout, wiring, observation sites): docs/mhc.md.
#pragma once
#include <string>
#include <vector>

#include "core/parameter.h"
#include "core/tensor.h"
#include "kernels/mhc_composed.h"
#include "models/layers/layer_common.h"
#include "models/config/mhc_config.h"
#include "parallel/process_group.h"

namespace strata::layers {

// What one site's forward keeps for the merge and the backward.
struct HyperConnectionState {
  Tensor x;                           // [T, n·C] the site input, T = s·b
  Shape shape;                        // the input's shape [s, b, n·C]
  Tensor proj, rinv;                  // [T, n²+2n], [T]: the mapping projection and norm factor
  Tensor h_pre, h_post, h_res_logits, h_res;  // [T, n], [T, n], [T, n, n], [T, n, n] (f32)
  Tensor y, bias;                     // the merge's sub-layer output [T, C] and bias [C] (may be undefined)
  DropoutSpec dropout;                // the merge's dropout (inactive: none)
  Tensor g_x;                         // [T, n·C] f32: x's gradient, summed over its three consumers
  Tensor g_h_post, g_res_logits;      // from merge_backward, for backward
  void clear() { *this = HyperConnectionState{}; }
};

// One site: (h_pre, h_post, H_res) = mappings(x); agg = Σ_i h_pre[i]·x_i → F(agg) = (y, bias);
// merge x_next_j = Σ_i H_res[i,j]·x_i + h_post[j]·(y + bias) (training with hidden dropout: the
// h_post terms under one mask over the whole [s, b, n·C] tensor); backward: merge_backward →
// F's backward → backward, g_x summed over x's three consumers in f32. x, x_next [s, b, n·C]
// (stream j = columns j·C .. (j+1)·C), agg, y [s, b, C], bias [C]. Parameters (f32; f64 in an f64
// model) <prefix>.mapping_proj.weight [n²+2n, n·C], alpha_pre / alpha_post / alpha_res [1],
// bias [n²+2n], replicated over tp (gradients summed over tp under sp). Observation sites (owner
// the prefix): mhc_h_pre, mhc_h_post, mhc_h_res, mhc_sinkhorn_residual, mhc_layer_input,
// mhc_layer_output, sequence-sharded under sp.
class HyperConnection {
 public:
  // hidden = C; sp: the sequence-parallel group (tp under SP, else single).
  HyperConnection(const std::string& prefix, int64_t hidden, const MhcOptions& o, const LayerEnv& env,
                  const ProcessGroup& sp = ProcessGroup::single("tp"));

  // x [s, b, n·C] → agg [s, b, C] (the input of the wrapped sub-layer); fills st.
  Tensor forward(const Tensor& x, HyperConnectionState& st) const;
  // y [s, b, C] (the sub-layer's output without residual), bias [C] or undefined → x_next [s, b, n·C].
  Tensor merge(const Tensor& y, const Tensor& bias, const DropoutSpec& dropout, HyperConnectionState& st) const;

  struct MergeGrads {
    Tensor g_y;     // [s, b, C] activation dtype
    Tensor g_bias;  // [C] f32 (undefined without bias)
  };
  // g_next [s, b, n·C] → the sub-layer's output gradients; the residual part of g_x kept in st.
  MergeGrads merge_backward(const Tensor& g_next, HyperConnectionState& st) const;
  // g_agg [s, b, C] → g_x [s, b, n·C] (activation dtype); accumulates the parameters' main grads and
  // clears st.
  Tensor backward(const Tensor& g_agg, HyperConnectionState& st);

  void collect(std::vector<Parameter*>& out);
  int64_t streams() const { return o_.streams; }

  // Selective mhc recompute (models/blocks/mhc_recompute.h): drop the kept input x (after the
  // merge), and later rebuild the site from x (the same tensor as in the forward): restores st.x,
  // returns the merge output [s, b, n·C] (the kept mappings, y, bias and dropout key; bit-identical)
  // and *agg the aggregation [T, C]. No observation fires.
  static void release_input(HyperConnectionState& st) { st.x = Tensor(); }
  Tensor replay(const Tensor& x, HyperConnectionState& st, Tensor* agg) const;

  Parameter mapping_weight, alpha_pre, alpha_post, alpha_res, bias;

 private:
  Tensor alpha3() const;  // [3] = (α_pre, α_post, α_res)
  void observe_mappings(const HyperConnectionState& st) const;
  void observe_layer_output(const HyperConnectionState& st) const;
  std::string prefix_;
  bool sequence_parallel_ = false;
  MhcOptions o_;
  int64_t hidden_;
  ProcessGroup sp_;
};

// Block entry: x [s, b, C] → [s, b, n·C] with every stream = x; and its backward (the stream sum).
Tensor mhc_expand(const Tensor& x, int64_t n);
Tensor mhc_expand_backward(const Tensor& g, int64_t n);

// Block exit: the learned contraction (<prefix>.hc_head_fn [n, n·C] xavier-uniform, hc_head_base
// [n] zeros, hc_head_scale [1] ones; f32) or, with mhc_learned_output_contract false, the mean of
// the streams (no parameters).
class HyperConnectionHead {
 public:
  HyperConnectionHead(const std::string& prefix, int64_t hidden, const MhcOptions& o, const LayerEnv& env,
                      const ProcessGroup& sp = ProcessGroup::single("tp"));
  // x [s, b, n·C] → [s, b, C]; `saved` receives the input for the backward.
  Tensor forward(const Tensor& x, Tensor* saved) const;
  // g [s, b, C] → g_x [s, b, n·C]; accumulates the head parameters' main grads.
  Tensor backward(const Tensor& saved, const Tensor& g);
  void collect(std::vector<Parameter*>& out);
  bool learned() const { return o_.learned_output_contract; }

  Parameter fn, base, scale;  // undefined values for the mean contraction

 private:
  MhcOptions o_;
  int64_t hidden_;
  ProcessGroup sp_;
};

}  // namespace strata::layers
