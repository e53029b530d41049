// The Mamba-2 mixer (Megatron-Core MambaMixer with TE's fused pre-norm) over the residual stream
// [s, b, h]: in_proj, causal depthwise conv1d, the SSD scan (kernels/ssd_scan.h), the gated group
// RMSNorm and out_proj; MambaLayer adds the residual. Tensor parallel by heads and groups, and
// KV-cache style generation through a MambaStateCache; packed sequences restart the conv1d and
// the scan at each document.
// Reference: Megatron-Core ssm/mamba_mixer.py, models/hybrid/hybrid_layer_specs.py.
// Details: the comments below; the hybrid model: docs/hybrid.md.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "kernels/ssd_scan.h"
#include "models/layers/inference_cache.h"
#include "models/layers/layer_common.h"
#include "models/layers/linear.h"
#include "models/layers/norm.h"
#include "models/config/mamba_config.h"
#include "models/config/model_config.h"
#include "parallel/process_group.h"

namespace strata::layers {

//   zxBCdt = in_proj(norm(x))                 order [z | x | B | C | dt], no bias
//   xBC    = SiLU(causal depthwise conv1d(xBC; conv1d.weight [conv_dim, 1, 4], conv1d.bias))
//   dt     = softplus(dt + dt_bias), A = −exp(A_log), y = SSD scan(x, dt, A, B, C, D)
//   y      = RMSNorm_group(y·SiLU(z)) · norm.weight   (groups of d_inner/G, eps 1e-5)
//   out    = out_proj(y)                      no bias
class MambaMixer {
 public:
  struct Saved {
    Norm::Saved norm;
    Tensor h;         // in_proj input [s, b, h] (the sequence shard under sequence parallelism)
    Tensor xbc_in;    // conv input [b, s, conv_dim]
    Tensor xbc;       // conv output [b, s, conv_dim]
    Tensor z;         // gate [b, s, d_inner]
    Tensor dt_raw;    // [b, s, H] before softplus
    Tensor dt;        // [b, s, H]
    Tensor A;         // [H]
    Tensor y;         // scan output [b, s, d_inner]
    Tensor normed;    // out_proj input [s, b, d_inner]
    std::shared_ptr<const PackedSequence> packed;  // the forward's documents (null: none)
  };
  // One sample's rows [begin, end): a document of a packed sequence.
  struct Piece {
    int64_t sample, begin, end;
  };
  // prefix: "decoder.layers.{i}.mixer". Checks the mamba_* config against tp before allocating.
  // Tensor parallelism: heads and groups split over tp (in_proj column-parallel with the five parts
  // sharded separately, conv1d by its three parts, dt_bias/A_log/D/norm.weight by rows, out_proj
  // row-parallel); sequence parallelism as the MLP (the norm on sequence shards, in_proj gathers,
  // out_proj reduce-scatters).
  MambaMixer(const std::string& prefix, const ModelConfig& cfg, const LayerEnv& env, const ParallelGroups& groups);
  // x: [s, b, h] -> [s, b, h]; cache: generation (state read and updated, nothing saved).
  // packed: documents of packed sequences; the conv1d and the SSD scan restart at each one (zero
  // history and state), as Megatron's seq_idx does.
  Tensor forward(const Tensor& x, MambaStateCache* cache, Saved* saved,
                 const std::shared_ptr<const PackedSequence>& packed = nullptr) const;
  // dy: [s, b, h] -> dx: [s, b, h]; adds parameter gradients into main_grad.
  Tensor backward(const Saved& saved, const Tensor& dy);
  void collect(std::vector<Parameter*>& out);
  // A zero generation state for `batch` sequences. The MambaStateCache carries the conv inputs and
  // the SSM state from call to call (the same outputs as one forward over the whole sequence).
  MambaStateCache make_cache(int64_t batch) const;

  const MambaDims& dims() const { return dims_; }
  int64_t local_heads() const { return heads_; }
  int64_t local_groups() const { return groups_; }

  // Megatron's state-dict names under the prefix: in_proj.layer_norm_weight (+ layer_norm_bias
  // under LayerNorm), in_proj.weight, conv1d.weight, conv1d.bias, dt_bias, A_log (f32), D (f32),
  // norm.weight, out_proj.weight. Init: in_proj N(0, init_method_std); out_proj N(0,
  // init_method_std/√(1.0·num_layers)); conv1d weight and bias U(±1/2) (kaiming_uniform a=√5 and
  // U(±1/√fan_in), fan_in = 4); dt_bias = softplus⁻¹(clamp(exp(U(log 1e-3, log 0.1)), 1e-4));
  // A_log = log U(1, 16); D = 1; norm.weight = 1; all from Philox keyed by name at global indices,
  // so any shard draws its slice.
  Norm in_proj_norm;  // in_proj.layer_norm_weight / layer_norm_bias
  Linear in_proj;
  Parameter conv1d_weight, conv1d_bias, dt_bias, A_log, D, norm_weight;
  Linear out_proj;

 private:
  // The scan inputs of a forward (from the conv output and dt).
  struct ScanParts {
    Tensor x, B, C;
  };
  ScanParts split_xbc(const Tensor& xbc) const;
  // The documents of every sample when some sample holds more than one (else empty: the whole
  // batch runs as one piece, with the generation cache when given).
  static std::vector<Piece> pieces(const PackedSequence* packed, int64_t b);
  // conv1d + SiLU of xbc_in [b, s, conv_dim] into xbc, per piece.
  void conv_forward(const Tensor& xbc_in, const Tensor& xbc, const std::vector<Piece>& pieces,
                    MambaStateCache* cache) const;
  // The SSD scan into y [b, s, H, P], per piece; its backward (dA, dD summed over the pieces).
  void scan_forward(const kernels::SsdScanInputs& in, const Tensor& y, const std::vector<Piece>& pieces,
                    MambaStateCache* cache) const;
  void scan_backward(const kernels::SsdScanInputs& in, const Tensor& dy, const kernels::SsdScanGrads& g,
                     const std::vector<Piece>& pieces) const;

  MambaDims dims_;
  int64_t heads_, groups_, d_inner_, conv_dim_;  // this rank's
  LayerEnv env_;
};

}  // namespace strata::layers
