// A writer of Python pickles (protocols 2 and 3) for PyValue trees (core/formats/py_value.h):
// plain data, module-level globals, instances rebuilt by REDUCE or NEWOBJ with BUILD state, and
// torch tensors as torch.save pickles them. The pickles load with CPython's pickle.load and with
// torch.load (weights_only or not, for classes on torch's allow-list). Used for torch.save archives
// (core/formats/torch_archive_writer.h) and PyTorch distributed-checkpoint metadata
// (core/formats/dcp_writer.h). The plain-data pickler core/formats/pickle_writer.h stays for files
// that need no objects.
//
// Opcodes follow CPython's _Pickler byte for byte: BININT1/BININT2/BININT/LONG1 by range,
// BINFLOAT, BINUNICODE, EMPTY_TUPLE/TUPLE1..3/MARK TUPLE, EMPTY_LIST + APPEND(S), EMPTY_DICT +
// SETITEM(S) in batches of 1000, NEWTRUE/NEWFALSE, GLOBAL "module\nname\n" (protocol 2 maps
// builtins -> __builtin__ and copyreg -> copy_reg as fix_imports does), bytes as
// `_codecs.encode(latin-1 text, 'latin1')` under protocol 2 and SHORT_BINBYTES/BINBYTES under 3.
// With memoize (the default) every object CPython memoizes gets a BINPUT in the same place, and a
// str or global equal to one written before is a BINGET of it (CPython does that for the same
// object; strings and globals are immutable, so equal values may share): for the values torch
// writes the bytes then match torch.save's data.pkl exactly.
// Instances: `cls args REDUCE` or (PyValue::newobj) `cls args NEWOBJ`, then `state BUILD` when
// state is set; collections.OrderedDict with a Dict state is `OrderedDict () REDUCE` then its
// items by SETITEMS (OrderedDict.__reduce__). Tensors: `torch._utils._rebuild_tensor_v2(storage,
// offset, size, stride, False, OrderedDict())` with the storage as BINPERSID of ('storage',
// torch.<X>Storage, key, 'cpu', numel) (torch.serialization._save's persistent_id).
// Reference: CPython Lib/pickle.py (_Pickler.save_*, save_reduce, save_global, _batch_appends,
// _batch_setitems, memoize), Lib/copyreg.py (__reduce_ex__, __newobj__), Lib/collections/
// __init__.py (OrderedDict.__reduce__), torch/serialization.py (_save, persistent_id),
// torch/_tensor.py (Tensor._reduce_ex_internal), torch/_utils.py (_rebuild_tensor_v2).
#pragma once
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/formats/py_value.h"

namespace strata::formats {

struct PickleObjectOptions {
  int protocol = 2;      // 2 (what torch.save writes) or 3; others are refused
  bool memoize = true;   // BINPUT/BINGET as CPython places them (see above); false: none at all
};

// The pickle of `value` (PROTO, the value, STOP). Every kind is written; a null PyRef inside the
// tree, a protocol other than 2 or 3, or nesting deeper than 1000 throws strata::Error.
std::string pickle_object_dumps(const PyValue& value, const PickleObjectOptions& options);
std::string pickle_object_dumps(const PyValue& value, int protocol = 2);

// torch's names for a dtype: the storage class torch.save references ("FloatStorage", ...) and the
// dtype's attribute of module torch ("float32", ...).
const char* torch_storage_class(DType dtype);
const char* torch_dtype_attr(DType dtype);

// Small builders for the objects torch pickles (all `PyRef`s, fresh each call):
// torch.Size(dims): REDUCE of torch.Size with the tuple of dims.
PyRef py_torch_size(const std::vector<int64_t>& dims);
// torch.<dtype> (e.g. torch.float32): a Global.
PyRef py_torch_dtype(DType dtype);
// An instance built by NEWOBJ (cls.__new__(cls, *args)) with BUILD `state` (or none).
PyRef py_newobj(PyGlobal cls, std::vector<PyRef> args = {}, PyRef state = nullptr);
// A Tuple of ints.
PyRef py_int_tuple(const std::vector<int64_t>& values);

}  // namespace strata::formats
