// The phase-timer scopes (core/phase_timer.h) open on the calling thread, outermost first: the
// context an allocation is recorded under by the memory history (core/memory_history.h), as
// PyTorch's snapshots record the Python stack. Kept only while enabled (it activates the scopes,
// which then cost one clock read each). Implemented in core/phase_timer.cpp.
#pragma once
#include <vector>

namespace strata::phase_timer {

void set_scope_stack(bool on);
bool scope_stack_enabled();
// This thread's open scopes' names, outermost first (empty while disabled).
std::vector<const char*> open_scopes();

}  // namespace strata::phase_timer
