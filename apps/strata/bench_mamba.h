// `strata bench mamba`: the Mamba2 mixer (models/layers/mamba_mixer.h: pre-norm, in_proj, causal
// conv1d + SiLU, softplus dt, the chunked SSD scan, gated grouped RMSNorm, out_proj) forward +
// backward on one device for a stated shape, optionally against the PyTorch eager reference of the
// same computation (scripts/bench/mamba2_torch_ref.py: ssd_minimal's chunked scan with autograd),
// in the same command, with the same thread count, from the same parameters and inputs. Before
// timing, the reference's output, input gradient and parameter gradients are compared with ours
// (a benchmark against another computation would be worthless): the command fails when they
// differ by more than a float32 tolerance. Prints ms per forward + backward, the ratio
// reference / ours, and writes JSON with --json.
// Reference: Megatron-Core ssm/mamba_mixer.py; Mamba-2 (Dao & Gu 2024) ssd_minimal.
#pragma once
#include <cstdint>
#include <string>

namespace strata::app {

struct BenchMambaOptions {
  int64_t batch = 2, seq = 512, hidden = 256;  // d_inner = 2·hidden
  int64_t head_dim = 64, state = 128, groups = 1, chunk = 128;
  int iters = 5, warmup = 1, repeat = 1;
  std::string dtype = "f32";         // f32 or f64
  std::string reference;             // "" or "torch"
  std::string python = "/usr/bin/python3";
  std::string torch_script;          // "": scripts/bench/mamba2_torch_ref.py of this source tree
  std::string json_out;
  std::string save_results;          // write parameters, x, dy, y, dx and gradients here (safetensors)
  uint64_t seed = 1234;
};

// 0, or 1 when the reference disagrees with ours (or fails to run for a reason other than a
// missing torch, which is reported and leaves our timing alone).
int run_mamba_benchmark(const BenchMambaOptions& options);

}  // namespace strata::app
