// `strata bench packed`: what packed sequences cost in attention. Attention forward + backward
// (kernels/attention.h) on one sequence of --seq tokens holding one document, and on the same
// sequence holding --docs documents (data.reset_attention_mask, kernels::AttentionParams::
// document_start), alternated --repeat times on one device. Prints the median times, the packed
// run's time ratio and, next to it, the bound Σ doc_len² / seq_len² that a kernel skipping the
// key blocks outside each query's document approaches; the target is a ratio within 1.5× of it.
// With --window W > 0 also a sliding window (kernels::AttentionParams::window_left = W, Megatron
// window_size (W, 0)) on the one-document sequence against full causal attention, next to the
// bound Σ_i min(W + 1, i + 1) / Σ_i (i + 1) (the keys each position sees), same 1.5× target.
// Reference: FlashAttention-2 varlen (cu_seqlens), Megatron-Core PackedSeqParams (THD).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace strata::app {

struct BenchPackedOptions {
  std::string device = "auto";
  int64_t seq = 2048, docs = 8, heads = 8, kv_heads = 8, head_dim = 64, batch = 1;
  int64_t window = 256;  // sliding-window case: window_left; 0: none
  std::string dtype = "f32";  // f32, bf16 (CUDA) or f64
  int iters = 3, warmup = 1, repeat = 3;
  std::string json_out;
};

// Document lengths of a packed sequence: `docs` lengths in the proportions 3:1:4:1:5:9:2:6 (cycled),
// summing to seq, each at least 1.
std::vector<int64_t> packed_document_lengths(int64_t seq, int64_t docs);

// 0, or 1 when the packed run (or the window run) misses the target (time ratio above 1.5× the bound).
int run_packed_benchmark(const BenchPackedOptions& options);

}  // namespace strata::app
