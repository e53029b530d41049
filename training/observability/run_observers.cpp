// The observers of a run (see run_observers.h).
#include "training/observability/run_observers.h"

namespace strata {

std::vector<StepObserver*> RunObservers::all() {
  std::vector<StepObserver*> v;
  for (auto& o : owned_) v.push_back(o.get());
  for (StepObserver* o : borrowed_) v.push_back(o);
  return v;
}

RunObservers::Step::Step(RunObservers& r, const ObservationContext& c) : r_(r), c_(c) {
  if (r.empty()) return;
  context_.emplace(c);
  for (StepObserver* o : r.all()) {
    const SourceKinds k = o->kinds_for(c);
    if (k.empty()) continue;
    fanout_.add(*o, k);
    active_.push_back(o);
  }
  if (!fanout_.empty()) capture_.emplace(fanout_, fanout_.kinds());
}

RunObservers::Step::~Step() {
  capture_.reset();
  context_.reset();
  for (StepObserver* o : active_) o->end_step(c_);
}

void RunObservers::finish() {
  for (StepObserver* o : all()) o->finish();
}

}  // namespace strata
