// A writer of Python pickles (protocol 2) for plain data: None, bool, int, float, str, list, tuple
// and dict (keys in insertion order). Enough to write files that Python tools load with
// pickle.load, such as the memory snapshots PyTorch's memory_viz reads (core/memory_history.h).
// No memo and no objects: each value is written where it stands.
// Reference: CPython Lib/pickle.py (_Pickler save_* for protocol 2, opcodes PROTO, NONE, NEWTRUE,
// NEWFALSE, BININT, LONG1, BINFLOAT, BINUNICODE, EMPTY_LIST, APPENDS, EMPTY_DICT, SETITEMS, MARK,
// TUPLE, STOP), PEP 307.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <variant>
#include <vector>

namespace strata::formats {

struct PickleValue;
using PickleList = std::vector<PickleValue>;
struct PickleTuple {
  std::vector<PickleValue> items;
};
using PickleDict = std::vector<std::pair<std::string, PickleValue>>;  // str keys, in order

struct PickleValue {
  std::variant<std::monostate, bool, int64_t, double, std::string, PickleList, PickleTuple, PickleDict> v;
  PickleValue() = default;
  PickleValue(bool b) : v(b) {}
  PickleValue(int64_t i) : v(i) {}
  PickleValue(int i) : v(static_cast<int64_t>(i)) {}
  PickleValue(uint64_t i) : v(static_cast<int64_t>(i)) {}
  PickleValue(double d) : v(d) {}
  PickleValue(std::string s) : v(std::move(s)) {}
  PickleValue(const char* s) : v(std::string(s)) {}
  PickleValue(PickleList l) : v(std::move(l)) {}
  PickleValue(PickleTuple t) : v(std::move(t)) {}
  PickleValue(PickleDict d) : v(std::move(d)) {}
};

// pickle.encode_long: x as little-endian two's complement in the fewest bytes (LONG1's payload).
std::string encode_long(int64_t x);

// The pickle of `value` (starts with PROTO 2, ends with STOP).
std::string pickle_dumps(const PickleValue& value);
// Writes pickle_dumps(value) to `path` (through a temporary file renamed into place); throws
// naming the file on failure.
void write_pickle_file(const std::string& path, const PickleValue& value);

}  // namespace strata::formats
