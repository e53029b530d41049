// Tensor observation: layers emit short-lived tensors at fixed sites to the observer of the
// current scope, with the 7-field callback of Megatron's later revision (owner, name, source kind,
// tensor, tp_shard_dim, sequence_dim, batch_dim). With no observer a site costs a thread-local load
// and a branch (no allocation, copy or device synchronisation; tests/unit/test_observe.cpp).
// Reference: megatron/core/tensor_observation.py (capture_tensor_observations,
// suspend_tensor_observations, is_observing_tensor, observe_tensor).
// Details (API, owners and site names, dims, every source kind's shape): docs/observation.md.
#pragma once
#include <cstdint>
#include <optional>
#include <string_view>
#include <vector>

#include "core/tensor.h"

namespace strata {

// Megatron's source kinds, plus Strata's router_input / router_top_indices / router_top_kept
// (what the router tracer records), router_diagnostic_sums (router diagnostics that merge
// across sequence shards), attention_logit_max (the tensor metric of the same name) and the mHC
// sites (mhc_h_pre, mhc_h_post, mhc_h_res, mhc_sinkhorn_residual; owner: the hyper-connection
// module, e.g. "decoder.layers.3.self_attention_hyper_connection", with mhc_layer_input and
// mhc_layer_output, the pair an outside check needs to verify a site's merge). With mHC the residual sites'
// tensors are [s, b, n, h] (n streams).
enum class SourceKind : uint32_t {
  ResidualAccumulator = 0,   // hidden state entering a layer                     [s, b, h]
  ResidualContribution = 1,  // layer output − layer input (only when observed)   [s, b, h]
  OutputLogits = 2,          // output layer logits, this rank's vocab shard      [s, b, v/tp]
  MtpLogits = 3,             // MTP head logits (the MTP issue's site)            [s, b, v/tp]
  RouterLogits = 4,          // raw gating output, before forced balancing        [s, b, E] router dtype
  RouterScores = 5,          // normalised scores over all experts (only when observed) [s, b, E] f32
  RouterTopkProbs = 6,       // routed top-k probabilities before dropping, padding 0   [s, b, E]
  RouterDiagnostics = 7,     // per local sequence, 7 channels (training only)    [b, 7, E] f32
  RouterInput = 8,           // Strata: the router's input (after the pre-MLP norm, before jitter) [s, b, h]
  RouterTopIndices = 9,      // Strata: selected experts, descending selection score [s·b, k] i64
  RouterTopKept = 10,        // Strata: 1 = the pair survived capacity               [s·b, k] u8
  RouterDiagnosticSums = 11, // Strata: router_diagnostics as sums over this rank's tokens, additive
                             // over sequence shards (sp, cp), training only   [b, 8, E] f32
  AttentionLogitMax = 12,    // Strata: per-head max pre-softmax attention logit (only when observed) [np] f32
  MhcHPre = 13,              // Strata: an mHC site's h_pre = σ(·) + 1e-6          [s, b, n] f32
  MhcHPost = 14,             // Strata: an mHC site's h_post = 2σ(·)              [s, b, n] f32
  MhcHRes = 15,              // Strata: an mHC site's Sinkhorn-projected H_res     [s, b, n, n] f32
  MhcSinkhornResidual = 16,  // Strata: per token max_i |row sum − 1|, max_j |column sum − 1| of
                             // H_res (only when observed)                          [s, b, 2] f32
  MhcLayerInput = 17,        // Strata: an mHC site's aggregated sub-layer input Σ_i h_pre[i]·x_i
                             // (what the wrapped sub-layer reads)                  [s, b, h]
  MhcLayerOutput = 18,       // Strata: the wrapped sub-layer's output y + bias, before dropout and
                             // the merge (only when observed)                      [s, b, h]
};
inline constexpr int kNumSourceKinds = 19;
// Megatron's names ("residual_accumulator", …; Strata's "router_input", "router_top_indices",
// "router_top_kept", "router_diagnostic_sums", "attention_logit_max", "mhc_h_pre", "mhc_h_post",
// "mhc_h_res", "mhc_sinkhorn_residual", "mhc_layer_input", "mhc_layer_output"), and back (nullopt for an
// unknown name).
const char* source_kind_name(SourceKind kind);
std::optional<SourceKind> source_kind_from_name(std::string_view name);

// A set of source kinds.
class SourceKinds {
 public:
  constexpr SourceKinds() = default;
  constexpr SourceKinds(std::initializer_list<SourceKind> kinds) {
    for (SourceKind k : kinds) bits_ |= bit(k);
  }
  static constexpr SourceKinds all() { return SourceKinds((1u << kNumSourceKinds) - 1); }
  constexpr bool contains(SourceKind k) const { return (bits_ & bit(k)) != 0; }
  constexpr bool empty() const { return bits_ == 0; }
  constexpr SourceKinds operator|(SourceKinds o) const { return SourceKinds(bits_ | o.bits_); }
  constexpr SourceKinds operator&(SourceKinds o) const { return SourceKinds(bits_ & o.bits_); }
  constexpr bool operator==(const SourceKinds&) const = default;
  constexpr uint32_t bits() const { return bits_; }

 private:
  constexpr explicit SourceKinds(uint32_t b) : bits_(b) {}
  static constexpr uint32_t bit(SourceKind k) { return 1u << static_cast<uint32_t>(k); }
  uint32_t bits_ = 0;
};

// One notification (the 7 fields of Megatron's callback). owner: the module name with GLOBAL layer
// numbers ("decoder.layers.3", "decoder.layers.3.mlp.router", "output_layer"); name: local to the
// owner ("residual_accumulator", …). Dims: tp_shard_dim split over tp ranks (none: replicated),
// sequence_dim the sequence population (split over cp), batch_dim the batch population (over dp).
struct Observation {
  std::string_view owner;
  std::string_view name;
  SourceKind kind;
  const Tensor& tensor;
  std::optional<int> tp_shard_dim, sequence_dim, batch_dim;
};

class Observer {
 public:
  virtual ~Observer() = default;
  virtual void on_tensor(const Observation& o) = 0;
};

// Several observers in one scope: each receives the kinds it subscribed to, in insertion order.
class ObserverFanout : public Observer {
 public:
  void add(Observer& observer, SourceKinds kinds) { members_.push_back({&observer, kinds}); }
  SourceKinds kinds() const;  // the union (what the CaptureScope should select)
  bool empty() const { return members_.empty(); }
  void on_tensor(const Observation& o) override;

 private:
  struct Member {
    Observer* observer;
    SourceKinds kinds;
  };
  std::vector<Member> members_;
};

// Which forward is running (set by the trainer, the evaluator and the generator), a second
// thread-local for observers that record the iteration, micro-batch and phase.
enum class ObservationPhase { Train, Eval, Generate };
const char* observation_phase_name(ObservationPhase p);  // "train" | "eval" | "generate"
struct ObservationContext {
  int64_t iteration = 0;    // training: the 0-based iteration; generation: the forward's step
  int64_t micro_batch = 0;  // within the iteration
  int model_chunk = 0;      // virtual-pipeline chunk
  ObservationPhase phase = ObservationPhase::Train;
};

namespace detail {
struct ObserverState {
  Observer* observer = nullptr;
  SourceKinds kinds;
};
inline thread_local ObserverState t_observer;
// Apart from t_observer: a CaptureScope neither clears nor restores it (SuspendScope owns it).
inline thread_local bool t_suspended = false;
inline thread_local ObservationContext t_observation_context;
}  // namespace detail

// True iff not suspended and the scope's kinds include `kind`: sites test it before building a
// derived tensor (the residual contribution, the normalised router scores, …).
inline bool is_observing(SourceKind kind) {
  const detail::ObserverState& s = detail::t_observer;
  return s.kinds.contains(kind) && !detail::t_suspended;
}

// Notifies the observer when `kind` is observed. The tensor is valid during the call only:
// observers copy or reduce it there.
inline void observe(std::string_view owner, std::string_view name, SourceKind kind, const Tensor& t,
                    std::optional<int> tp_shard_dim = std::nullopt, std::optional<int> sequence_dim = std::nullopt,
                    std::optional<int> batch_dim = std::nullopt) {
  if (!is_observing(kind)) return;
  detail::t_observer.observer->on_tensor(Observation{owner, name, kind, t, tp_shard_dim, sequence_dim, batch_dim});
}

// The [s, b, …] activations' dims: sequence 0, batch 1, tp-sharded along the sequence under
// sequence parallelism (Megatron: tp_shard_dim 0 if sequence_parallel else None).
struct ActivationDims {
  std::optional<int> tp_shard_dim;
  static ActivationDims of(bool sequence_parallel) {
    return ActivationDims{sequence_parallel ? std::optional<int>(0) : std::nullopt};
  }
};
inline void observe_activation(std::string_view owner, std::string_view name, SourceKind kind, const Tensor& t,
                               ActivationDims d) {
  observe(owner, name, kind, t, d.tp_shard_dim, 0, 1);
}

// Installs an observer for a set of source kinds on this thread; a nested scope replaces the outer
// one and restores it on exit.
class CaptureScope {
 public:
  CaptureScope(Observer& observer, SourceKinds kinds) : saved_(detail::t_observer) {
    detail::t_observer = detail::ObserverState{&observer, kinds};
  }
  ~CaptureScope() { detail::t_observer = saved_; }
  CaptureScope(const CaptureScope&) = delete;
  CaptureScope& operator=(const CaptureScope&) = delete;

 private:
  detail::ObserverState saved_;
};

// Nothing is observed inside (activation recompute). The suspension is separate state, as
// Megatron's context variable: a CaptureScope opened inside a suspended region stays suspended.
class SuspendScope {
 public:
  SuspendScope() : was_(detail::t_suspended) { detail::t_suspended = true; }
  ~SuspendScope() { detail::t_suspended = was_; }
  SuspendScope(const SuspendScope&) = delete;
  SuspendScope& operator=(const SuspendScope&) = delete;

 private:
  bool was_;
};

inline const ObservationContext& observation_context() { return detail::t_observation_context; }
class ObservationContextScope {
 public:
  explicit ObservationContextScope(const ObservationContext& c) : saved_(detail::t_observation_context) {
    detail::t_observation_context = c;
  }
  ~ObservationContextScope() { detail::t_observation_context = saved_; }
  ObservationContextScope(const ObservationContextScope&) = delete;
  ObservationContextScope& operator=(const ObservationContextScope&) = delete;

 private:
  ObservationContext saved_;
};

}  // namespace strata
