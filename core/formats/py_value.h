// The Python values that Megatron's and PyTorch's pickles hold, as plain C++ data: what the
// restricted unpickler (core/formats/pickle_reader.h) builds and what the object pickler
// (core/formats/pickle_object_writer.h) writes. Objects are never executed: an instance is its class
// name, the arguments it was built from and the state BUILD gave it; a tensor is a reference to a
// storage record of its torch.save archive (core/formats/torch_archive.h).
// Reference: CPython Lib/pickle.py (_Unpickler load_* opcodes: REDUCE, NEWOBJ, BUILD, BINPERSID);
// torch/serialization.py (_save: persistent_id ('storage', storage_type, key, location, numel)),
// torch/_utils.py (_rebuild_tensor_v2).
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/dtype.h"

namespace strata::formats {

struct PyValue;
using PyRef = std::shared_ptr<PyValue>;

// A module-level name: a class, a function or a constant ("collections", "OrderedDict").
struct PyGlobal {
  std::string module, name;
  std::string full() const { return module + "." + name; }
  bool is(const char* m, const char* n) const { return module == m && name == n; }
};

// A tensor of a torch.save archive: `size` elements with `stride`, from element `offset` of the
// storage record data/<storage_key> holding `storage_numel` elements of `dtype`.
struct PyTensorRef {
  std::string storage_key;
  DType dtype = DType::F32;
  int64_t storage_numel = 0;
  int64_t offset = 0;
  std::vector<int64_t> size, stride;
};

struct PyValue {
  enum class Kind { None, Bool, Int, Float, Str, Bytes, List, Tuple, Dict, Set, Global, Instance, Tensor };
  Kind kind = Kind::None;
  bool boolean = false;
  int64_t integer = 0;
  double real = 0.0;
  std::string text;                          // Str (UTF-8) and Bytes
  std::vector<PyRef> items;                  // List, Tuple, Set; Instance: the constructor's arguments
  std::vector<std::pair<PyRef, PyRef>> dict; // Dict, in insertion order
  PyGlobal global;                           // Global; Instance: its class
  PyRef state;                               // Instance: what BUILD set (usually a Dict), or null
  // Instance: built by NEWOBJ (cls.__new__(cls, *args), what copyreg's __reduce_ex__ gives plain
  // classes such as argparse.Namespace and dataclasses under protocol >= 2) rather than REDUCE
  // (cls(*args): enum members, torch.Size, functions like _rebuild_tensor_v2). The object pickler
  // (core/formats/pickle_object_writer.h) writes the opcode it names; a reader may set it to record
  // which one built the value.
  bool newobj = false;
  PyTensorRef tensor;                        // Tensor
  int depth = 0;                             // nesting depth when built (bounded by the reader)

  static PyRef none();
  static PyRef of_bool(bool b);
  static PyRef of_int(int64_t i);
  static PyRef of_float(double d);
  static PyRef of_str(std::string s);
  static PyRef of_bytes(std::string s);
  static PyRef list(std::vector<PyRef> items = {});
  static PyRef tuple(std::vector<PyRef> items = {});
  static PyRef empty_dict();
  static PyRef of_global(std::string module, std::string name);
  // An instance of `cls` built from `args`, with BUILD's `state` (or null).
  static PyRef instance(PyGlobal cls, std::vector<PyRef> args = {}, PyRef state = nullptr);
  static PyRef of_tensor(PyTensorRef t);

  bool is_none() const { return kind == Kind::None; }
  bool is_str() const { return kind == Kind::Str; }
  bool is_int() const { return kind == Kind::Int || kind == Kind::Bool; }
  bool is_number() const { return is_int() || kind == Kind::Float; }
  bool is_sequence() const { return kind == Kind::List || kind == Kind::Tuple; }
  bool is_instance_of(const char* module, const char* name) const {
    return kind == Kind::Instance && global.is(module, name);
  }
  const char* kind_name() const;  // "int", "dict", "instance of argparse.Namespace", …

  // Dict access by a str key: nullptr when absent (or not a dict).
  const PyValue* find(const std::string& key) const;
  // Appends or replaces the str key `key` (a Dict).
  void set(const std::string& key, PyRef value);
  // An instance's attribute: its BUILD state's `key` (a Dict state, or the slots dict of a
  // (dict, slots) tuple state); nullptr when absent.
  const PyValue* attr(const std::string& key) const;
  double as_double() const;  // Int, Bool or Float; throws otherwise
};

}  // namespace strata::formats
