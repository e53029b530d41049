// The observers of a run (core/observe.h): the router tracer, the tensor dumper and the tensor
// metrics (training/observability/tensor_metrics/metric_observer.h) — each a StepObserver that says, per
// forward, which source kinds it wants; RunObservers puts the wanted ones behind one fan-out
// CaptureScope for that forward and tells each when the step ends. With no observer, or none
// wanting a step, no scope is installed: every site stays a thread-local load and a branch.
// The trainer opens one scope per training iteration (ObservationPhase::Train, iteration 0-based
// as Megatron's tracer counts) and one per evaluation pass (Eval, the current iteration); the
// pipeline schedule sets the micro-batch and model chunk of each forward in the
// ObservationContext; generation opens one per forward (Generate, the forward's step).
// Reference: megatron/training/training.py (the tracer's advance_step after each train_step),
// megatron/core/transformer/moe/router_trace.py.
#pragma once
#include <memory>
#include <optional>
#include <vector>

#include "core/observe.h"

namespace strata {

class StepObserver : public Observer {
 public:
  // The kinds wanted for the forward(s) of `c` (empty: none this time).
  virtual SourceKinds kinds_for(const ObservationContext& c) = 0;
  // After the step or evaluation pass or generation forward of `c` (flush, count the step).
  virtual void end_step(const ObservationContext& c) { (void)c; }
  // At the end of the run (and before a stop by signal): everything written out.
  virtual void finish() {}
};

class RunObservers {
 public:
  void add(std::unique_ptr<StepObserver> o) { owned_.push_back(std::move(o)); }
  void add(StepObserver& o) { borrowed_.push_back(&o); }  // not owned (tests)
  bool empty() const { return owned_.empty() && borrowed_.empty(); }

  // The scope of one step: installs the fan-out of the observers that want `c` (if any) and
  // sets the observation context; on destruction restores both and calls end_step.
  class Step {
   public:
    Step(RunObservers& r, const ObservationContext& c);
    ~Step();
    Step(const Step&) = delete;
    Step& operator=(const Step&) = delete;

   private:
    RunObservers& r_;
    ObservationContext c_;
    ObserverFanout fanout_;
    std::vector<StepObserver*> active_;
    std::optional<ObservationContextScope> context_;
    std::optional<CaptureScope> capture_;
  };

  void finish();

 private:
  std::vector<StepObserver*> all();
  std::vector<std::unique_ptr<StepObserver>> owned_;
  std::vector<StepObserver*> borrowed_;
};

}  // namespace strata
