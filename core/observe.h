// Tensor observation: a scoped, zero-cost hook (ARCHITECTURE decision 6).
// Layers call observe(...) at fixed sites (residual entering each layer, layer output, output
// logits; later MoE router tensors, MTP logits, mHC streams) and test is_observing(kind) before
// building any derived tensor. With no observer installed both are a thread-local load and a
// branch. Recompute runs inside an ObservationSuspended scope so each forward is seen once.
// Observers (tensor metrics, router tracer, tensor dumper) arrive with the observation issue;
// until then no observer is installed and every site is a no-op.
#pragma once
#include <cstdint>
#include <functional>
#include <string_view>

#include "core/tensor.h"

namespace strata {

enum class ObserveKind : uint32_t {
  ResidualIn = 1u << 0,    // hidden state entering a layer            [s, b, h]
  LayerOutput = 1u << 1,   // hidden state leaving a layer             [s, b, h]
  Contribution = 1u << 2,  // a sublayer's residual contribution       [s, b, h]
  Logits = 1u << 3,        // output logits (vocab shard)              [s, b, v_local]
  MtpLogits = 1u << 4,
  RouterLogits = 1u << 5,
  RouterScores = 1u << 6,
  RouterDiagnostics = 1u << 7,
  MhcStreams = 1u << 8,
};

// owner: canonical module name ("decoder.layers.3"); name: site name ("residual_in");
// dims: the layout of t ("s,b,h").
using ObserverFn = std::function<void(std::string_view owner, std::string_view name, ObserveKind kind,
                                      const Tensor& t, std::string_view dims)>;

namespace detail {
struct ObserverState {
  const ObserverFn* fn = nullptr;
  uint32_t mask = 0;
  bool suspended = false;
};
inline thread_local ObserverState t_observer;
}  // namespace detail

inline bool is_observing(ObserveKind kind) {
  const auto& s = detail::t_observer;
  return (s.mask & static_cast<uint32_t>(kind)) != 0 && !s.suspended;
}

inline void observe(std::string_view owner, std::string_view name, ObserveKind kind, const Tensor& t,
                    std::string_view dims) {
  if (is_observing(kind)) (*detail::t_observer.fn)(owner, name, kind, t, dims);
}

// Installs an observer for the kinds in `mask` for the scope's lifetime (restores the previous).
class ObserverScope {
 public:
  ObserverScope(const ObserverFn& fn, uint32_t mask) : saved_(detail::t_observer) {
    detail::t_observer.fn = &fn;
    detail::t_observer.mask = mask;
    detail::t_observer.suspended = false;
  }
  ~ObserverScope() { detail::t_observer = saved_; }
  ObserverScope(const ObserverScope&) = delete;
  ObserverScope& operator=(const ObserverScope&) = delete;

 private:
  detail::ObserverState saved_;
};

// Suspends observation (activation recompute) for the scope's lifetime.
class ObservationSuspended {
 public:
  ObservationSuspended() : was_(detail::t_observer.suspended) { detail::t_observer.suspended = true; }
  ~ObservationSuspended() { detail::t_observer.suspended = was_; }

 private:
  bool was_;
};

}  // namespace strata
