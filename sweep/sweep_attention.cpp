// Sweep cases for kernels/attention.h: forward out and lse, backward dq, dk, dv of the target
// (device, dtype) against the f64 CPU reference on the same rounded inputs; odd shapes always
// (s = 1, s = 77, d = 64/128, GQA, offsets, dropout, packed documents), a realistic one when !quick; plus a check
// that two backward calls on the target are bitwise equal (bound 0). Packed sequences
// (document_start, tag ".docs"): documents of odd lengths, different per sample, boundaries inside
// a tile and on a 32-row tile edge, 1-token documents, q offsets, non-monotonic starts; these also
// exercise the CUDA kernels' skipping of key/query tiles wholly outside the rows' documents.
// A value head dim dv != d (multi-latent attention, tag ".vdim<dv>"): DeepSeek-V3's d = 192,
// dv = 128 (the CUDA (256, 128) tile pair), its scaled-down absorbed shape d = 40, dv = 32 with one
// kv head, dv > d (a pair the CUDA kernels run with square tiles), and the absorbed decoding
// shape itself, d = 576, dv = 512, forward only (the CUDA kernels have no backward for it).
// Sliding windows (tag ".window<left>_<right>") and attention sinks (".sink_off_by_one",
// ".sink_learnable", with the sink gradient ".dsink" and its determinism): windows inside and
// across tiles, with q/k offsets, packed documents, non-causal windows, dv != d; these exercise
// the CUDA kernels' skipping of key/query tiles outside the window and the sink reduction kernel.
#include <algorithm>

#include "kernels/attention.h"
#include "sweep/sweep.h"

using namespace strata;
using namespace strata::kernels;

namespace {
const std::vector<DType> kFloat = {DType::F64, DType::F32, DType::BF16, DType::F16};

struct Case {
  int64_t sq, sk, b, hq, hkv, d;
  bool causal = true;
  double dropout = 0;
  int64_t q_off = 0;
  bool repeat = false;  // also check backward determinism
  // Packed sequences: document lengths per sample (sample b uses docs[b % docs.size()]), laid
  // out from global position 0; positions past their sum form one last document. Empty: none.
  std::vector<std::vector<int64_t>> docs = {};
  bool irregular = false;  // also let rows i % 7 == 3 see from position 0 (non-monotonic starts)
  int64_t k_off = 0;       // global position of key row 0 (context parallelism's narrowed K/V)
  int64_t dv = 0;          // value head dim; 0: d
  bool forward_only = false;  // out and lse only (MLA's absorbed decoding shape)
  int64_t window_left = -1, window_right = -1;  // sliding window (kernels/attention.h); -1 unbounded
  int sink = 0;  // attention sink: 0 none, 1 off-by-one (zeros), 2 learnable (random logits)
  int64_t vdim() const { return dv > 0 ? dv : d; }
};

// document_start [b, sq] i64 on the CPU: for q row i of sample b (global position q_off + i), the
// global position of its document's first token.
Tensor document_starts(const Case& cs) {
  const int64_t total = std::max(cs.k_off + cs.sk, cs.q_off + cs.sq);  // keys at k_off.., q rows at q_off..
  std::vector<int64_t> starts(static_cast<size_t>(cs.b * cs.sq));
  std::vector<int64_t> start_of(static_cast<size_t>(total));
  for (int64_t bb = 0; bb < cs.b; ++bb) {
    const std::vector<int64_t>& lens = cs.docs[static_cast<size_t>(bb) % cs.docs.size()];
    int64_t start = 0;
    size_t doc = 0;
    for (int64_t t = 0; t < total; ++t) {
      while (doc < lens.size() && t >= start + lens[doc]) start += lens[doc++];
      start_of[static_cast<size_t>(t)] = start;
    }
    for (int64_t i = 0; i < cs.sq; ++i)
      starts[static_cast<size_t>(bb * cs.sq + i)] =
          cs.irregular && i % 7 == 3 ? 0 : start_of[static_cast<size_t>(cs.q_off + i)];
  }
  return Tensor::from_data<int64_t>(starts, {cs.b, cs.sq});
}

void attention_case(sweep::Context& c, const Case& cs) {
  const Shape qs{cs.sq, cs.b, cs.hq, cs.d}, ks{cs.sk, cs.b, cs.hkv, cs.d}, ls{cs.b, cs.hq, cs.sq};
  const Shape vs{cs.sk, cs.b, cs.hkv, cs.vdim()}, os{cs.sq, cs.b, cs.hq, cs.vdim()};  // v; out and dout
  AttentionParams p;
  p.causal = cs.causal;
  p.dropout_p = cs.dropout;
  p.dropout_key = {2024, 7};
  p.q_position_offset = cs.q_off;
  p.k_position_offset = cs.k_off;
  p.global_seq_len = std::max(cs.k_off + cs.sk, cs.q_off + cs.sq);
  p.window_left = cs.window_left;
  p.window_right = cs.window_right;
  // The sink logits, f32-rounded: f64 for the reference, f32 on the target.
  const Tensor sink = cs.sink == 0 ? Tensor()
                      : cs.sink == 1 ? Tensor::zeros({cs.hq}, DType::F64)
                                     : c.input({cs.hq}, 5, -2.0, 2.0).to(DType::F32).to(DType::F64);
  p.softmax_offset = sink;
  Tensor q = c.input(qs, 1), k = c.input(ks, 2), v = c.input(vs, 3), dout = c.input(os, 4);
  const Tensor doc_start = cs.docs.empty() ? Tensor() : document_starts(cs);  // CPU, for the reference
  p.document_start = doc_start;

  // f64 CPU reference (lse in f64).
  Tensor out_r = Tensor::empty(os, DType::F64), lse_r = Tensor::empty(ls, DType::F64);
  attention_forward(q, k, v, out_r, lse_r, p);

  // Target: its own forward outputs feed its backward; document_start on the target device.
  Tensor doc_start_t = doc_start.defined() ? doc_start.to(c.device) : Tensor();
  AttentionParams pt = p;
  pt.document_start = doc_start_t;
  if (sink.defined()) pt.softmax_offset = sink.to(DType::F32).to(c.device);
  Tensor qt = c.on_target(q), kt = c.on_target(k), vt = c.on_target(v), dot = c.on_target(dout);
  Tensor out = c.empty(os), lse = Tensor::empty(ls, DType::F32, c.device);
  attention_forward(qt, kt, vt, out, lse, pt);

  const std::string tag = std::string(cs.causal ? "causal" : "full") + (cs.dropout > 0 ? ".drop" : "") +
                          (cs.q_off ? ".offset" : "") + (cs.hq != cs.hkv ? ".gqa" : "") +
                          (cs.docs.empty() ? "" : ".docs") + (cs.irregular ? ".irregular" : "") +
                          (cs.k_off ? ".k_offset" : "") + (cs.vdim() != cs.d ? ".vdim" + std::to_string(cs.dv) : "") +
                          (cs.window_left >= 0 || cs.window_right >= 0
                               ? ".window" + std::to_string(cs.window_left) + "_" + std::to_string(cs.window_right)
                               : "") +
                          (cs.sink == 1 ? ".sink_off_by_one" : cs.sink == 2 ? ".sink_learnable" : "");
  const Shape shown{cs.sq, cs.sk, cs.b, cs.hq, cs.hkv, cs.d};  // [sq, sk, b, hq, hkv, d]; dv in the tag
  c.compare(tag + ".out", shown, out, out_r, c.bound(1e-5, 1e-2, 2e-3));
  c.compare(tag + ".lse", shown, lse, lse_r, c.bound(1e-6, 1e-3, 1e-3));
  if (cs.forward_only) return;

  Tensor dq_r = Tensor::empty(qs, DType::F64), dk_r = Tensor::empty(ks, DType::F64);
  Tensor dv_r = Tensor::empty(vs, DType::F64);
  // The sink gradient is added into zeros, on both sides.
  const Tensor dsink_r = sink.defined() ? Tensor::zeros({cs.hq}, DType::F64) : Tensor();
  const Tensor dsink = sink.defined() ? Tensor::zeros({cs.hq}, DType::F32, c.device) : Tensor();
  p.softmax_offset_grad = dsink_r;
  pt.softmax_offset_grad = dsink;
  attention_backward(q, k, v, out_r, dout, lse_r, dq_r, dk_r, dv_r, p);
  Tensor dq = c.empty(qs), dk = c.empty(ks), dv = c.empty(vs);
  attention_backward(qt, kt, vt, out, dot, lse, dq, dk, dv, pt);
  if (sink.defined()) c.compare(tag + ".dsink", shown, dsink, dsink_r, c.bound(2e-5, 2e-2, 5e-3));
  if (cs.sk > 1) {  // with a single key, P = 1 and dq = dk = 0 exactly: nothing to compare
    c.compare(tag + ".dq", shown, dq, dq_r, c.bound(2e-5, 2e-2, 5e-3));
    c.compare(tag + ".dk", shown, dk, dk_r, c.bound(2e-5, 2e-2, 5e-3));
  }
  c.compare(tag + ".dv", shown, dv, dv_r, c.bound(2e-5, 2e-2, 5e-3));
  if (cs.repeat) {  // a second backward, its sink gradient into fresh zeros: bitwise the same
    AttentionParams pt2 = pt;
    if (sink.defined()) pt2.softmax_offset_grad = Tensor::zeros({cs.hq}, DType::F32, c.device);
    Tensor dq2 = c.empty(qs), dk2 = c.empty(ks), dv2 = c.empty(vs);
    attention_backward(qt, kt, vt, out, dot, lse, dq2, dk2, dv2, pt2);
    c.compare(tag + ".dq.repeat", shown, dq2, dq, 0.0);
    c.compare(tag + ".dk.repeat", shown, dk2, dk, 0.0);
    c.compare(tag + ".dv.repeat", shown, dv2, dv, 0.0);
    if (sink.defined()) c.compare(tag + ".dsink.repeat", shown, pt2.softmax_offset_grad, dsink, 0.0);
  }
}
}  // namespace

STRATA_SWEEP_OP("attention", kFloat, "attention_forward attention_backward", [](sweep::Context& c) {
  std::vector<Case> cases = {
      {1, 1, 1, 2, 2, 64},                            // s = 1
      {77, 77, 2, 4, 2, 64, true, 0, 0, true},        // odd s, GQA, determinism
      {77, 77, 1, 4, 1, 128, false},                  // non-causal, MQA, d = 128
      {45, 70, 2, 2, 2, 96, true, 0.1, 25},           // offsets (q rows at 25..69), dropout, d = 96
      {33, 33, 1, 2, 2, 256, true},                   // d = 256
      {3, 5, 2, 2, 1, 7, true, 0.2, 2},               // tiny odd d
      // Packed sequences. Sample 0: documents [0,5) [5,32) [32,33) [33,63) [63,77) (boundary on
      // the 32-row tile edge, a 1-token document); sample 1: [0,32) [32,45) [45,77). GQA.
      {77, 77, 2, 4, 2, 64, true, 0, 0, false, {{5, 27, 1, 30, 14}, {32, 13, 32}}},
      // q rows at global positions 66..129, keys 0..129, dropout. Sample 0: [0,40) [40,71)
      // [71,73) [73,130): key tiles before 40 are seen by no row (dk = dv = 0 there); sample 1:
      // [0,97) [97,130), the boundary on the last row of the first q tile.
      {64, 130, 2, 2, 2, 64, true, 0.1, 66, false, {{40, 31, 2, 57}, {97, 33}}},
      // Determinism with documents, MQA, dropout, d = 96; 1-token documents at 0, 32, 64, 65.
      {100, 100, 2, 4, 1, 96, true, 0.1, 0, true, {{1, 31, 1, 32, 35}, {64, 1, 1, 34}}},
      // Non-monotonic starts: documents [0,20) [20,64) [64,90), and rows i % 7 == 3 see from 0,
      // so the q tile of rows 64.. has first row start 64 but min 0 (no key tile may be skipped).
      {90, 90, 1, 2, 2, 64, true, 0, 0, false, {{20, 44, 26}}, true},
      // Context parallelism, all-gather: keys narrowed to start at global 37 (not a tile edge),
      // q rows at 70..109 in documents from 57 and 87 (sample 0) or 40 and 100 (sample 1): the
      // last q tile skips the first key tile, the dK/dV of that key tile skips the last q tile.
      {40, 73, 2, 2, 2, 64, true, 0.1, 70, false, {{37, 20, 30, 23, 50}, {40, 60, 50}}, false, 37},
      // Context parallelism, ring: a KV block wholly before the queries (keys 0..31, q rows
      // 64..95), every row's document starting inside the block, so only some keys are seen.
      {32, 32, 2, 4, 2, 64, true, 0, 64, false, {{10, 120}, {25, 100}}, false, 0},
      // Value head dim dv != d. MLA's absorbed shape scaled down (d 576 -> 40, dv 512 -> 32, one kv
      // head), determinism; DeepSeek-V3's d = 192, dv = 128 with GQA and dropout, non-causal,
      // with packed documents (determinism); dv > d with offsets and dropout.
      {.sq = 77, .sk = 77, .b = 2, .hq = 4, .hkv = 1, .d = 40, .repeat = true, .dv = 32},
      {.sq = 77, .sk = 77, .b = 2, .hq = 4, .hkv = 2, .d = 192, .dropout = 0.1, .dv = 128},
      {.sq = 45, .sk = 70, .b = 1, .hq = 2, .hkv = 2, .d = 160, .causal = false, .dv = 100},
      {.sq = 100, .sk = 100, .b = 2, .hq = 4, .hkv = 1, .d = 192, .dropout = 0.1, .repeat = true,
       .docs = {{1, 31, 1, 32, 35}, {64, 1, 1, 34}}, .dv = 128},
      {.sq = 45, .sk = 70, .b = 2, .hq = 4, .hkv = 2, .d = 24, .dropout = 0.1, .q_off = 25, .dv = 72},
      {.sq = 33, .sk = 33, .b = 1, .hq = 2, .hkv = 1, .d = 40, .q_off = 7, .docs = {{12, 9, 50}}, .dv = 32},
      // MLA's absorbed decoding: d = 576, dv = 512, one kv head, forward only; a prefill-like tile
      // and decoding rows at the end of a long cache.
      {.sq = 40, .sk = 40, .b = 1, .hq = 4, .hkv = 1, .d = 576, .dv = 512, .forward_only = true},
      {.sq = 2, .sk = 300, .b = 2, .hq = 16, .hkv = 1, .d = 576, .q_off = 298, .dv = 512, .forward_only = true},
  };
  // Sliding windows and attention sinks (gpt-oss: window 128, learnable sinks). Windows shorter
  // than a 32-row tile and spanning tiles, so key tiles are skipped on both sides of a q tile and
  // q tiles on both sides of a k tile; q/k position offsets (decoding, context parallelism);
  // packed documents with a window; non-causal (left, right); sinks alone and with windows;
  // determinism of the sink gradient.
  const std::vector<Case> windowed = {
      {.sq = 77, .sk = 77, .b = 2, .hq = 4, .hkv = 2, .d = 64, .repeat = true, .window_left = 20},
      {.sq = 100, .sk = 100, .b = 1, .hq = 2, .hkv = 1, .d = 64, .dropout = 0.1, .window_left = 40, .sink = 2},
      {.sq = 77, .sk = 77, .b = 2, .hq = 4, .hkv = 4, .d = 128, .repeat = true, .sink = 2},
      {.sq = 45, .sk = 70, .b = 1, .hq = 2, .hkv = 2, .d = 64, .sink = 1},
      {.sq = 3, .sk = 130, .b = 2, .hq = 4, .hkv = 1, .d = 64, .q_off = 127, .window_left = 50, .sink = 2},
      {.sq = 40, .sk = 73, .b = 2, .hq = 2, .hkv = 2, .d = 64, .q_off = 70, .k_off = 37, .window_left = 33},
      {.sq = 90, .sk = 90, .b = 2, .hq = 4, .hkv = 2, .d = 64, .dropout = 0.1, .repeat = true,
       .docs = {{20, 44, 26}, {5, 85}}, .window_left = 17, .sink = 2},
      {.sq = 70, .sk = 70, .b = 1, .hq = 2, .hkv = 2, .d = 64, .causal = false, .window_left = 9, .window_right = 35,
       .sink = 2},
      {.sq = 66, .sk = 66, .b = 1, .hq = 2, .hkv = 1, .d = 96, .window_left = 0, .sink = 1},
      {.sq = 60, .sk = 60, .b = 2, .hq = 4, .hkv = 2, .d = 192, .dv = 128, .window_left = 13, .sink = 2},
      {.sq = 40, .sk = 40, .b = 1, .hq = 4, .hkv = 1, .d = 576, .dv = 512, .forward_only = true, .window_left = 10,
       .sink = 2},
  };
  cases.insert(cases.end(), windowed.begin(), windowed.end());
  if (!c.quick) {
    cases.push_back({1024, 1024, 2, 16, 4, 128, true});       // realistic
    // gpt-oss-like: window 128, learnable sinks, GQA 64/8 cut to 16/2.
    cases.push_back({.sq = 1024, .sk = 1024, .b = 1, .hq = 16, .hkv = 2, .d = 64, .window_left = 128, .sink = 2});
    cases.push_back({300, 300, 1, 8, 8, 64, true, 0.1, 0, true});
    // Realistic packed batch: 8 documents per sample, different boundaries in each sample.
    cases.push_back({1024, 1024, 2, 16, 4, 128, true, 0, 0, false,
                     {{100, 37, 300, 64, 200, 123, 80, 120}, {128, 128, 128, 128, 128, 128, 128, 128}}});
    // DeepSeek-V3's head dims at a realistic length (its 128 heads cut to 8).
    cases.push_back({.sq = 1024, .sk = 1024, .b = 1, .hq = 8, .hkv = 8, .d = 192, .dv = 128});
  }
  for (const Case& cs : cases) attention_case(c, cs);
});
