// The allocator's memory history (Megatron's --record-memory-history, PyTorch's
// torch.cuda.memory._record_memory_history): while recording, every tensor allocation and free on
// the recorded device is kept as an event (action, address, bytes, time, and the phase-timer scopes
// open at the time as its frames), up to a maximum number of the latest events, with the blocks
// still live. A snapshot is written in PyTorch's memory-snapshot layout, as a pickle: {"segments":
// [...], "device_traces": [[...]]}, which pytorch.org/memory_viz and torch.cuda._memory_viz
// (trace_plot, segment_plot, segsum, trace) read; docs/memory.md describes the fields.
// Recording off costs one relaxed atomic load per allocation.
// Reference: PyTorch torch/cuda/memory.py (_record_memory_history, _snapshot, _dump_snapshot),
// c10/cuda/CUDACachingAllocator.h (TraceEntry actions, SegmentInfo/BlockInfo fields),
// megatron/training/utils/utils.py (start_memory_history_recording: 100000 entries),
// megatron/training/training.py (training_log: _dump_snapshot to <base>_<rank><ext>).
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "core/device.h"

namespace strata::memory_history {

inline constexpr size_t kDefaultMaxEntries = 100000;  // Megatron's trace_alloc_max_entries

struct Event {
  std::string action;  // "alloc", "free_requested", "free_completed" (PyTorch's TraceEntry actions)
  uint64_t address = 0;
  int64_t size = 0;     // bytes the allocator handed out (requested size rounded up)
  int64_t requested = 0;
  int64_t time_us = 0;  // microseconds since the Unix epoch
  std::vector<std::string> frames;  // the open phase-timer scopes, innermost first
};

struct Block {
  uint64_t address = 0;
  int64_t size = 0, requested = 0;
  std::vector<std::string> frames;  // where it was allocated, innermost first
};

// Starts recording allocations on `device` (the events of earlier allocations are unknown, so their
// blocks are not in snapshots), keeping the latest max_entries events.
void start(Device device, size_t max_entries = kDefaultMaxEntries);
void stop();  // stops and forgets the history
bool recording();

// Called by the allocator (core/allocator.cpp) on every allocation and free.
void on_alloc(Device device, const void* ptr, size_t size, size_t requested);
void on_free(Device device, const void* ptr, size_t size);

// The recorded events (oldest first) and the live blocks (by address).
std::vector<Event> events();
std::vector<Block> live_blocks();

// Writes the snapshot (PyTorch's layout, a protocol-2 pickle) to `path`; throws naming the file.
void dump_snapshot(const std::string& path);
// Megatron's per-rank name: "<base>_<rank><ext>" for path "<base><ext>" (snapshot.pickle ->
// snapshot_3.pickle).
std::string rank_snapshot_path(const std::string& path, int rank);

}  // namespace strata::memory_history
