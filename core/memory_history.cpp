// The allocator's memory history (see memory_history.h).
// Reference: PyTorch c10/cuda/CUDACachingAllocator.h (TraceEntry, SegmentInfo, BlockInfo),
// torch/cuda/memory.py (_snapshot's dictionary layout).
#include "core/memory_history.h"

#include <atomic>
#include <chrono>
#include <deque>
#include <map>
#include <mutex>

#include "core/formats/pickle_writer.h"
#include "core/phase_scope_stack.h"

namespace strata::memory_history {

namespace {
struct State {
  std::mutex mu;
  Device device = Device::cpu();
  size_t max_entries = kDefaultMaxEntries;
  std::deque<Event> events;
  std::map<uint64_t, Block> live;
};
State& state() {
  static State s;
  return s;
}
std::atomic<bool> g_recording{false};

int64_t now_us() {
  return std::chrono::duration_cast<std::chrono::microseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

std::vector<std::string> current_frames() {
  std::vector<std::string> frames;
  const std::vector<const char*> open = phase_timer::open_scopes();
  for (auto it = open.rbegin(); it != open.rend(); ++it) frames.emplace_back(*it);  // innermost first
  return frames;
}

void push(State& s, Event e) {
  s.events.push_back(std::move(e));
  while (s.events.size() > s.max_entries) s.events.pop_front();
}

formats::PickleList frame_list(const std::vector<std::string>& frames) {
  formats::PickleList out;
  for (const std::string& f : frames)
    out.push_back(formats::PickleDict{{"filename", "strata"}, {"line", 0}, {"name", f}});
  return out;
}

formats::PickleValue segment_of(const Block& b, int device) {
  formats::PickleDict block = {{"address", b.address},          {"size", b.size},
                               {"requested_size", b.requested}, {"state", "active_allocated"},
                               {"frames", frame_list(b.frames)}};
  return formats::PickleDict{{"device", device},
                             {"address", b.address},
                             {"total_size", b.size},
                             {"allocated_size", b.size},
                             {"active_size", b.size},
                             {"requested_size", b.requested},
                             {"stream", 0},
                             {"segment_type", b.size >= (int64_t{1} << 20) ? "large" : "small"},
                             {"segment_pool_id", formats::PickleTuple{{0, 0}}},
                             {"is_expandable", false},
                             {"frames", formats::PickleList{}},
                             {"blocks", formats::PickleList{block}}};
}

formats::PickleValue trace_entry(const Event& e) {
  return formats::PickleDict{{"action", e.action}, {"addr", e.address},   {"size", e.size},
                             {"stream", 0},        {"time_us", e.time_us}, {"frames", frame_list(e.frames)}};
}
}  // namespace

void start(Device device, size_t max_entries) {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  s.device = device;
  s.max_entries = max_entries;
  s.events.clear();
  s.live.clear();
  phase_timer::set_scope_stack(true);
  g_recording = true;
}

void stop() {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  g_recording = false;
  phase_timer::set_scope_stack(false);
  s.events.clear();
  s.live.clear();
}

bool recording() { return g_recording.load(std::memory_order_relaxed); }

void on_alloc(Device device, const void* ptr, size_t size, size_t requested) {
  if (!recording()) return;
  State& s = state();
  std::vector<std::string> frames = current_frames();
  std::lock_guard<std::mutex> lock(s.mu);
  if (!g_recording || !(device == s.device)) return;
  const auto addr = reinterpret_cast<uint64_t>(ptr);
  s.live[addr] = Block{addr, static_cast<int64_t>(size), static_cast<int64_t>(requested), frames};
  push(s, Event{"alloc", addr, static_cast<int64_t>(size), static_cast<int64_t>(requested), now_us(), std::move(frames)});
}

void on_free(Device device, const void* ptr, size_t size) {
  if (!recording()) return;
  State& s = state();
  std::vector<std::string> frames = current_frames();
  std::lock_guard<std::mutex> lock(s.mu);
  if (!g_recording || !(device == s.device)) return;
  const auto addr = reinterpret_cast<uint64_t>(ptr);
  s.live.erase(addr);
  const int64_t t = now_us();
  // The memory is reusable at once (CPU; CUDA's caching allocator orders reuse on the stream).
  push(s, Event{"free_requested", addr, static_cast<int64_t>(size), static_cast<int64_t>(size), t, frames});
  push(s, Event{"free_completed", addr, static_cast<int64_t>(size), static_cast<int64_t>(size), t, std::move(frames)});
}

std::vector<Event> events() {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  return {s.events.begin(), s.events.end()};
}

std::vector<Block> live_blocks() {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  std::vector<Block> out;
  for (const auto& [addr, b] : s.live) out.push_back(b);
  return out;
}

void dump_snapshot(const std::string& path) {
  const int device = state().device.is_cuda() ? state().device.index : 0;
  formats::PickleList segments, trace, traces;
  for (const Block& b : live_blocks()) segments.push_back(segment_of(b, device));
  for (const Event& e : events()) trace.push_back(trace_entry(e));
  for (int d = 0; d < device; ++d) traces.push_back(formats::PickleList{});
  traces.push_back(std::move(trace));
  formats::write_pickle_file(path, formats::PickleDict{{"segments", std::move(segments)},
                                                       {"device_traces", std::move(traces)},
                                                       {"allocator_settings", formats::PickleDict{}}});
}

std::string rank_snapshot_path(const std::string& path, int rank) {
  // os.path.splitext: the extension starts at the last '.' of the last component, not at its start.
  const size_t slash = path.find_last_of('/');
  const size_t name = slash == std::string::npos ? 0 : slash + 1;
  size_t dot = path.find_last_of('.');
  if (dot == std::string::npos || dot < name) dot = path.size();
  size_t lead = name;
  while (lead < path.size() && path[lead] == '.') ++lead;  // leading dots are not an extension
  if (dot <= lead) dot = path.size();
  return path.substr(0, dot) + "_" + std::to_string(rank) + path.substr(dot);
}

}  // namespace strata::memory_history
