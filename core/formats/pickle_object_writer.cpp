// The object pickler (see pickle_object_writer.h).
// Reference: CPython Lib/pickle.py (_Pickler: save_none, save_bool, save_long, save_float,
// save_str, save_bytes, save_tuple, save_list/_batch_appends, save_dict/_batch_setitems,
// save_set, save_global, save_reduce, memoize, put/get), torch/serialization.py (_save).
#include "core/formats/pickle_object_writer.h"

#include <cstring>
#include <map>

#include "core/error.h"
#include "core/formats/pickle_writer.h"

namespace strata::formats {

namespace {
constexpr size_t kBatchSize = 1000;  // pickle._Pickler._BATCHSIZE
constexpr int kMaxDepth = 1000;

class ObjectPickler {
 public:
  explicit ObjectPickler(const PickleObjectOptions& options) : opt_(options) {
    STRATA_CHECK(opt_.protocol == 2 || opt_.protocol == 3, "pickle_object_dumps: protocol ",
                 opt_.protocol, " is not supported (2 or 3)");
  }

  std::string dumps(const PyValue& value) {
    out_ = {static_cast<char>(0x80), static_cast<char>(opt_.protocol)};  // PROTO
    save(value, 0);
    out_.push_back('.');  // STOP
    return std::move(out_);
  }

 private:
  void op(char c) { out_.push_back(c); }
  void op(unsigned char c) { out_.push_back(static_cast<char>(c)); }
  void put_le(uint64_t x, int bytes) {
    for (int i = 0; i < bytes; ++i) out_.push_back(static_cast<char>((x >> (8 * i)) & 0xFF));
  }

  // BINPUT / LONG_BINPUT of the next memo slot; returns the slot.
  int64_t memoize() {
    if (!opt_.memoize) return -1;
    const int64_t idx = next_memo_++;
    if (idx < 256) {
      op('q');
      put_le(static_cast<uint64_t>(idx), 1);
    } else {
      op('r');
      put_le(static_cast<uint64_t>(idx), 4);
    }
    return idx;
  }
  void get(int64_t idx) {  // BINGET / LONG_BINGET
    if (idx < 256) {
      op('h');
      put_le(static_cast<uint64_t>(idx), 1);
    } else {
      op('j');
      put_le(static_cast<uint64_t>(idx), 4);
    }
  }

  void save_int(int64_t x) {
    if (x >= 0 && x <= 0xFF) {
      op('K');
      put_le(static_cast<uint64_t>(x), 1);
    } else if (x >= 0 && x <= 0xFFFF) {
      op('M');
      put_le(static_cast<uint64_t>(x), 2);
    } else if (x >= INT32_MIN && x <= INT32_MAX) {
      op('J');
      put_le(static_cast<uint32_t>(static_cast<int32_t>(x)), 4);
    } else {  // LONG1: little-endian two's complement, shortest form (pickle.encode_long)
      const std::string bytes = encode_long(x);
      op(static_cast<unsigned char>(0x8a));
      put_le(bytes.size(), 1);
      out_ += bytes;
    }
  }

  void save_float(double d) {
    op('G');  // BINFLOAT: big-endian IEEE 754 double
    uint64_t bits = 0;
    std::memcpy(&bits, &d, sizeof bits);
    for (int i = 7; i >= 0; --i) out_.push_back(static_cast<char>((bits >> (8 * i)) & 0xFF));
  }

  void save_str(const std::string& s) {
    if (opt_.memoize) {
      if (auto it = str_memo_.find(s); it != str_memo_.end()) return get(it->second);
    }
    op('X');  // BINUNICODE: 4-byte length, UTF-8
    STRATA_CHECK(s.size() <= 0xFFFFFFFFull, "pickle_object_dumps: a str of ", s.size(),
                 " bytes does not fit BINUNICODE");
    put_le(s.size(), 4);
    out_ += s;
    const int64_t idx = memoize();
    if (idx >= 0) str_memo_.emplace(s, idx);
  }

  void save_global(const PyGlobal& g) {
    std::string module = g.module;
    if (opt_.protocol < 3) {  // _compat_pickle.REVERSE_IMPORT_MAPPING (fix_imports)
      if (module == "builtins") module = "__builtin__";
      else if (module == "copyreg") module = "copy_reg";
    }
    const std::string key = module + "\n" + g.name + "\n";
    if (opt_.memoize) {
      if (auto it = global_memo_.find(key); it != global_memo_.end()) return get(it->second);
    }
    op('c');
    out_ += key;
    const int64_t idx = memoize();
    if (idx >= 0) global_memo_.emplace(key, idx);
  }

  void save_bytes(const std::string& b, int depth) {
    if (opt_.protocol >= 3) {
      if (b.size() < 256) {
        op('C');  // SHORT_BINBYTES
        put_le(b.size(), 1);
      } else {
        op('B');  // BINBYTES
        put_le(b.size(), 4);
      }
      out_ += b;
      memoize();
      return;
    }
    if (b.empty()) {  // save_reduce(bytes, ())
      save_global({"builtins", "bytes"});
      op(')');
      op('R');
      memoize();
      return;
    }
    std::string latin1_as_utf8;  // str(obj, 'latin1'), UTF-8 encoded
    for (unsigned char c : b) {
      if (c < 0x80) {
        latin1_as_utf8.push_back(static_cast<char>(c));
      } else {
        latin1_as_utf8.push_back(static_cast<char>(0xC0 | (c >> 6)));
        latin1_as_utf8.push_back(static_cast<char>(0x80 | (c & 0x3F)));
      }
    }
    save_global({"_codecs", "encode"});
    PyValue args;
    args.kind = PyValue::Kind::Tuple;
    args.items = {PyValue::of_str(std::move(latin1_as_utf8)), PyValue::of_str("latin1")};
    save(args, depth + 1);
    op('R');
    memoize();
  }

  void save_tuple(const std::vector<PyRef>& items, int depth) {
    if (items.empty()) return op(')');  // EMPTY_TUPLE: not memoized
    if (items.size() <= 3) {
      for (const PyRef& item : items) save_ref(item, depth);
      static constexpr unsigned char kTupleN[] = {0, 0x85, 0x86, 0x87};  // TUPLE1..3
      op(kTupleN[items.size()]);
    } else {
      op('(');
      for (const PyRef& item : items) save_ref(item, depth);
      op('t');
    }
    memoize();
  }

  void save_list_items(const std::vector<PyRef>& items, int depth) {  // _batch_appends
    for (size_t start = 0; start < items.size(); start += kBatchSize) {
      const size_t n = std::min(kBatchSize, items.size() - start);
      if (n > 1) op('(');
      for (size_t i = start; i < start + n; ++i) save_ref(items[i], depth);
      op(n > 1 ? 'e' : 'a');  // APPENDS / APPEND
    }
  }

  void save_dict_items(const std::vector<std::pair<PyRef, PyRef>>& items, int depth) {  // _batch_setitems
    for (size_t start = 0; start < items.size(); start += kBatchSize) {
      const size_t n = std::min(kBatchSize, items.size() - start);
      if (n > 1) op('(');
      for (size_t i = start; i < start + n; ++i) {
        save_ref(items[i].first, depth);
        save_ref(items[i].second, depth);
      }
      op(n > 1 ? 'u' : 's');  // SETITEMS / SETITEM
    }
  }

  void save_set(const PyValue& v, int depth) {  // protocol < 4: save_reduce(set, (list(obj),))
    save_global({"builtins", "set"});
    PyValue list;
    list.kind = PyValue::Kind::List;
    list.items = v.items;
    PyValue args;
    args.kind = PyValue::Kind::Tuple;
    args.items = {std::make_shared<PyValue>(std::move(list))};
    save(args, depth + 1);
    op('R');
    memoize();
  }

  void save_instance(const PyValue& v, int depth) {
    const bool ordered_dict = v.global.is("collections", "OrderedDict") && v.items.empty() &&
                              (!v.state || v.state->kind == PyValue::Kind::Dict);
    save_global(v.global);
    save_tuple(v.items, depth);
    op(v.newobj ? static_cast<unsigned char>(0x81) : static_cast<unsigned char>('R'));  // NEWOBJ / REDUCE
    memoize();
    if (!v.state) return;
    if (ordered_dict) return save_dict_items(v.state->dict, depth);
    save_ref(v.state, depth);
    op('b');  // BUILD
  }

  void save_tensor(const PyTensorRef& t, int depth) {
    STRATA_CHECK(t.size.size() == t.stride.size(), "pickle_object_dumps: tensor of storage '",
                 t.storage_key, "' has ", t.size.size(), " sizes but ", t.stride.size(), " strides");
    save_global({"torch._utils", "_rebuild_tensor_v2"});
    op('(');
    op('(');  // the persistent id ('storage', storage_type, key, location, numel)
    save_str("storage");
    save_global({"torch", torch_storage_class(t.dtype)});
    save_str(t.storage_key);
    save_str("cpu");
    save_int(t.storage_numel);
    op('t');
    memoize();
    op('Q');  // BINPERSID
    save_int(t.offset);
    std::vector<PyRef> size, stride;
    for (int64_t d : t.size) size.push_back(PyValue::of_int(d));
    for (int64_t s : t.stride) stride.push_back(PyValue::of_int(s));
    save_tuple(size, depth + 1);
    save_tuple(stride, depth + 1);
    op(static_cast<unsigned char>(0x89));  // requires_grad False
    save_global({"collections", "OrderedDict"});  // backward hooks: OrderedDict()
    op(')');
    op('R');
    memoize();
    op('t');
    memoize();
    op('R');
    memoize();
  }

  void save_ref(const PyRef& v, int depth) {
    STRATA_CHECK(v != nullptr, "pickle_object_dumps: a null value in the tree");
    save(*v, depth + 1);
  }

  void save(const PyValue& v, int depth) {
    STRATA_CHECK(depth <= kMaxDepth, "pickle_object_dumps: values nested deeper than ", kMaxDepth);
    using K = PyValue::Kind;
    switch (v.kind) {
      case K::None: return op('N');
      case K::Bool: return op(static_cast<unsigned char>(v.boolean ? 0x88 : 0x89));
      case K::Int: return save_int(v.integer);
      case K::Float: return save_float(v.real);
      case K::Str: return save_str(v.text);
      case K::Bytes: return save_bytes(v.text, depth);
      case K::Tuple: return save_tuple(v.items, depth);
      case K::List:
        op(']');
        memoize();
        return save_list_items(v.items, depth);
      case K::Dict:
        op('}');
        memoize();
        return save_dict_items(v.dict, depth);
      case K::Set: return save_set(v, depth);
      case K::Global: return save_global(v.global);
      case K::Instance: return save_instance(v, depth);
      case K::Tensor: return save_tensor(v.tensor, depth);
    }
    STRATA_INTERNAL_ASSERT(false, "pickle_object_dumps: unknown PyValue kind");
  }

  PickleObjectOptions opt_;
  std::string out_;
  int64_t next_memo_ = 0;
  std::map<std::string, int64_t> str_memo_, global_memo_;
};
}  // namespace

std::string pickle_object_dumps(const PyValue& value, const PickleObjectOptions& options) {
  return ObjectPickler(options).dumps(value);
}

std::string pickle_object_dumps(const PyValue& value, int protocol) {
  PickleObjectOptions options;
  options.protocol = protocol;
  return pickle_object_dumps(value, options);
}

const char* torch_storage_class(DType dtype) {
  switch (dtype) {
    case DType::F64: return "DoubleStorage";
    case DType::F32: return "FloatStorage";
    case DType::BF16: return "BFloat16Storage";
    case DType::F16: return "HalfStorage";
    case DType::I64: return "LongStorage";
    case DType::I32: return "IntStorage";
    case DType::U8: return "ByteStorage";
    case DType::Bool: return "BoolStorage";
  }
  STRATA_INTERNAL_ASSERT(false, "torch_storage_class: unknown dtype");
  return "";
}

const char* torch_dtype_attr(DType dtype) {
  switch (dtype) {
    case DType::F64: return "float64";
    case DType::F32: return "float32";
    case DType::BF16: return "bfloat16";
    case DType::F16: return "float16";
    case DType::I64: return "int64";
    case DType::I32: return "int32";
    case DType::U8: return "uint8";
    case DType::Bool: return "bool";
  }
  STRATA_INTERNAL_ASSERT(false, "torch_dtype_attr: unknown dtype");
  return "";
}

PyRef py_int_tuple(const std::vector<int64_t>& values) {
  std::vector<PyRef> items;
  for (int64_t v : values) items.push_back(PyValue::of_int(v));
  return PyValue::tuple(std::move(items));
}

PyRef py_torch_size(const std::vector<int64_t>& dims) {
  return PyValue::instance({"torch", "Size"}, {py_int_tuple(dims)});
}

PyRef py_torch_dtype(DType dtype) { return PyValue::of_global("torch", torch_dtype_attr(dtype)); }

PyRef py_newobj(PyGlobal cls, std::vector<PyRef> args, PyRef state) {
  PyRef v = PyValue::instance(std::move(cls), std::move(args), std::move(state));
  v->newobj = true;
  return v;
}

}  // namespace strata::formats
