// The pickle writer (core/formats/pickle_writer.h) against hand-assembled protocol-2 bytes (CPython
// Lib/pickle.py's opcodes), Megatron's per-rank snapshot name, and the memory history's events and
// live blocks for allocations the test makes (core/memory_history.h). The snapshot read by Python's
// pickle: tests/memory/test_memory_snapshot.py.
#include <catch2/catch.hpp>

#include "core/allocator.h"
#include "core/formats/pickle_writer.h"
#include "core/memory_history.h"
#include "core/phase_scope_stack.h"
#include "core/phase_timer.h"

using namespace strata;
using namespace strata::formats;

TEST_CASE("pickle writer: protocol-2 bytes of plain values", "[memory_history]") {
  using namespace std::string_literals;
  // PROTO 2, BININT 1, STOP
  CHECK(pickle_dumps(PickleValue(1)) == "\x80\x02J\x01\x00\x00\x00."s);
  // -2 as BININT; 3000000000 as LONG1 with 5 bytes (0xB2D05E00 and a 0 sign byte); -2^40 as LONG1 6 bytes.
  CHECK(pickle_dumps(PickleValue(-2)) == "\x80\x02J\xfe\xff\xff\xff."s);
  CHECK(pickle_dumps(PickleValue(int64_t{3000000000})) == "\x80\x02\x8a\x05\x00\x5e\xd0\xb2\x00."s);
  CHECK(pickle_dumps(PickleValue(-(int64_t{1} << 40))) == "\x80\x02\x8a\x06\x00\x00\x00\x00\x00\xff."s);
  // BINFLOAT 1.5 (big-endian 0x3FF8000000000000), None, True, False.
  CHECK(pickle_dumps(PickleValue(1.5)) == "\x80\x02G\x3f\xf8\x00\x00\x00\x00\x00\x00."s);
  CHECK(pickle_dumps(PickleValue()) == "\x80\x02N."s);
  CHECK(pickle_dumps(PickleValue(true)) == "\x80\x02\x88."s);
  CHECK(pickle_dumps(PickleValue(false)) == "\x80\x02\x89."s);
  // BINUNICODE "é" (2 UTF-8 bytes); an empty list; a list with MARK … APPENDS; a tuple.
  CHECK(pickle_dumps(PickleValue("\xc3\xa9")) == "\x80\x02X\x02\x00\x00\x00\xc3\xa9."s);
  CHECK(pickle_dumps(PickleValue(PickleList{})) == "\x80\x02]."s);
  CHECK(pickle_dumps(PickleValue(PickleList{1, "a"})) == "\x80\x02](J\x01\x00\x00\x00X\x01\x00\x00\x00\x61" "e."s);
  CHECK(pickle_dumps(PickleValue(PickleTuple{{0, 0}})) == "\x80\x02(J\x00\x00\x00\x00J\x00\x00\x00\x00t."s);
  // {"k": None}: EMPTY_DICT, MARK, key, value, SETITEMS.
  CHECK(pickle_dumps(PickleValue(PickleDict{{"k", PickleValue()}})) == "\x80\x02}(X\x01\x00\x00\x00kNu."s);
}

TEST_CASE("memory history: Megatron's per-rank snapshot name", "[memory_history]") {
  // os.path.splitext(path) -> f"{base}_{rank}{ext}"
  CHECK(memory_history::rank_snapshot_path("snapshot.pickle", 3) == "snapshot_3.pickle");
  CHECK(memory_history::rank_snapshot_path("/a.b/snap", 0) == "/a.b/snap_0");
  CHECK(memory_history::rank_snapshot_path("dir/x.tar.gz", 1) == "dir/x.tar_1.gz");
  CHECK(memory_history::rank_snapshot_path(".hidden", 2) == ".hidden_2");
}

TEST_CASE("memory history: events and live blocks of the allocations made while recording", "[memory_history]") {
  void* before = allocate_bytes(Device::cpu(), 100);  // made before: not in the history
  memory_history::start(Device::cpu(), /*max_entries=*/4);
  REQUIRE(phase_timer::scope_stack_enabled());
  void* a = nullptr;
  {
    phase_timer::Scope outer("outer");
    phase_timer::Scope inner("inner");
    a = allocate_bytes(Device::cpu(), 100);  // rounded to 128 (64-byte alignment)
  }
  void* b = allocate_bytes(Device::cpu(), 1);
  free_bytes(Device::cpu(), b, 1);
  free_bytes(Device::cpu(), before, 100);  // a free of an unrecorded block is still an event
  std::vector<memory_history::Event> ev = memory_history::events();
  // 6 events happened (alloc a, alloc b, free b twice, free before twice); the latest 4 are kept.
  REQUIRE(ev.size() == 4);
  CHECK(ev[0].action == "free_requested");
  CHECK(ev[0].address == reinterpret_cast<uint64_t>(b));
  CHECK(ev[1].action == "free_completed");
  CHECK(ev[1].size == 64);
  CHECK(ev[3].action == "free_completed");
  CHECK(ev[3].address == reinterpret_cast<uint64_t>(before));
  const std::vector<memory_history::Block> live = memory_history::live_blocks();
  REQUIRE(live.size() == 1);
  CHECK(live[0].address == reinterpret_cast<uint64_t>(a));
  CHECK(live[0].size == 128);
  CHECK(live[0].requested == 100);
  CHECK(live[0].frames == std::vector<std::string>{"inner", "outer"});  // innermost first, as PyTorch's
  memory_history::stop();
  CHECK_FALSE(phase_timer::scope_stack_enabled());
  free_bytes(Device::cpu(), a, 100);
  CHECK(memory_history::events().empty());
}
