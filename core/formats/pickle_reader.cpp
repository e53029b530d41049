// The restricted unpickler (see pickle_reader.h): a stack machine over CPython's opcodes that
// builds PyValue data and never calls anything; the few callables it knows (OrderedDict, torch's
// tensor rebuilders, torch.Size, _codecs.encode) are evaluated by hand.
// Reference: CPython Lib/pickle.py (_Unpickler.load_*), torch/_utils.py (_rebuild_tensor_v2,
// _rebuild_parameter), torch/_tensor.py (_rebuild_from_type_v2), torch/storage.py (typed storages).
#include "core/formats/pickle_reader.h"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <stdexcept>
#include <cstring>
#include <set>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "core/formats/mapped_file.h"

namespace strata::formats {

namespace {

constexpr int kMaxDepth = 100;

// The storage classes of torch.save's persistent ids and their element types.
bool storage_dtype(const std::string& name, DType& out) {
  static const std::pair<const char*, DType> table[] = {
      {"FloatStorage", DType::F32}, {"DoubleStorage", DType::F64}, {"HalfStorage", DType::F16},
      {"BFloat16Storage", DType::BF16}, {"LongStorage", DType::I64}, {"IntStorage", DType::I32},
      {"ByteStorage", DType::U8}, {"BoolStorage", DType::Bool}};
  for (const auto& [n, d] : table)
    if (name == n) {
      out = d;
      return true;
    }
  return false;
}

const std::set<std::string>& allowed_globals() {
  static const std::set<std::string> names = {
      // containers and plain values
      "collections.OrderedDict", "builtins.set", "builtins.frozenset", "builtins.slice", "_codecs.encode",
      "argparse.Namespace", "signal.Signals", "builtins.getattr",
      // tensors
      "torch._utils._rebuild_tensor_v2", "torch._utils._rebuild_parameter", "torch._tensor._rebuild_from_type_v2",
      "torch.Tensor", "torch.nn.parameter.Parameter", "torch.Size", "torch.device", "torch.serialization._get_layout",
      "torch.float32", "torch.float64", "torch.float16", "torch.bfloat16", "torch.int64", "torch.int32",
      "torch.uint8", "torch.bool", "torch.int8", "torch.int16", "torch.strided",
      "torch.contiguous_format", "torch.channels_last", "torch.preserve_format",
      // numpy arrays and scalars (RNG states)
      "numpy.core.multiarray._reconstruct", "numpy._core.multiarray._reconstruct", "numpy.ndarray", "numpy.dtype",
      "numpy.core.multiarray.scalar", "numpy._core.multiarray.scalar",
      // PyTorch distributed checkpoint metadata
      "torch.distributed.checkpoint.metadata.Metadata", "torch.distributed.checkpoint.metadata.TensorStorageMetadata",
      "torch.distributed.checkpoint.metadata.TensorProperties",
      "torch.distributed.checkpoint.metadata.ChunkStorageMetadata",
      "torch.distributed.checkpoint.metadata.BytesStorageMetadata", "torch.distributed.checkpoint.metadata.MetadataIndex",
      "torch.distributed.checkpoint.metadata.StorageMeta", "torch.distributed.checkpoint.metadata._MEM_FORMAT_ENCODING",
      "torch.distributed.checkpoint.filesystem._StorageInfo", "torch.distributed.checkpoint.planner.SavePlan",
      "torch.distributed.checkpoint.planner.WriteItem", "torch.distributed.checkpoint.planner.WriteItemType",
      "torch.distributed.checkpoint.planner.TensorWriteData"};
  return names;
}

}  // namespace

bool pickle_global_allowed(const std::string& module, const std::string& name) {
  DType d;
  if (module == "torch" && storage_dtype(name, d)) return true;
  if (allowed_globals().count(module + "." + name)) return true;
  // Megatron-Core's enums (ModelType, AttnBackend, RerunMode, …) in the saved arguments and the
  // rerun state machine: built as values only (REDUCE with one plain argument, checked there).
  return module.rfind("megatron.core.", 0) == 0 && !name.empty() && std::isupper(static_cast<unsigned char>(name[0]));
}

namespace {

class Unpickler {
 public:
  Unpickler(const uint8_t* data, size_t size, const std::string& source) : p_(data), end_(data + size), src_(source) {}
  // Every value built that is not part of the result (all of them after a failed read) loses its
  // links, so values that refer to each other are freed rather than leaked: a crafted memo can make
  // a dict hold itself, and the pickle can pop it before STOP (then the result is acyclic and the
  // cycle unreachable from it).
  ~Unpickler() {
    for (const std::weak_ptr<PyValue>& w : made_)
      if (PyRef v = w.lock(); v && !result_.count(v.get())) {
        v->items.clear();
        v->dict.clear();
        v->state.reset();
      }
  }
  PyRef run();

 private:
  [[noreturn]] void fail(const std::string& what) const {
    STRATA_IO_THROW(src_, "malformed pickle at byte ", offset(), ": ", what);
  }
  size_t offset() const { return static_cast<size_t>(p_ - begin_); }
  void need(size_t n) const {
    if (static_cast<size_t>(end_ - p_) < n) fail("truncated (needs " + std::to_string(n) + " more bytes)");
  }
  uint64_t read_uint(int n) {
    need(n);
    uint64_t x = 0;
    for (int i = 0; i < n; ++i) x |= static_cast<uint64_t>(p_[i]) << (8 * i);
    p_ += n;
    return x;
  }
  std::string read_bytes(uint64_t n) {
    if (n > static_cast<uint64_t>(end_ - p_)) fail("a length of " + std::to_string(n) + " runs past the end");
    std::string s(reinterpret_cast<const char*>(p_), n);
    p_ += n;
    return s;
  }
  std::string read_line() {
    const uint8_t* nl = static_cast<const uint8_t*>(std::memchr(p_, '\n', end_ - p_));
    if (!nl) fail("a text argument has no end of line");
    std::string s(reinterpret_cast<const char*>(p_), nl - p_);
    p_ = nl + 1;
    return s;
  }

  void push(PyRef v) {
    made_.push_back(v);
    stack_.push_back(std::move(v));
  }
  // Refuses a value that contains itself; returns every value `root` reaches.
  std::unordered_set<const PyValue*> check_acyclic(const PyRef& root);
  PyRef pop() {
    if (stack_.empty() || (!marks_.empty() && stack_.size() <= marks_.back())) fail("pop from an empty stack");
    PyRef v = std::move(stack_.back());
    stack_.pop_back();
    return v;
  }
  PyRef& top() {
    if (stack_.empty() || (!marks_.empty() && stack_.size() <= marks_.back())) fail("empty stack");
    return stack_.back();
  }
  std::vector<PyRef> pop_mark() {
    if (marks_.empty()) fail("no MARK");
    const size_t m = marks_.back();
    marks_.pop_back();
    std::vector<PyRef> items(std::make_move_iterator(stack_.begin() + m), std::make_move_iterator(stack_.end()));
    stack_.resize(m);
    return items;
  }
  // Containers record their nesting depth; one deeper than kMaxDepth is refused.
  void add_child_depth(PyValue& parent, const PyRef& child) {
    parent.depth = std::max(parent.depth, child ? child->depth + 1 : 1);
    if (parent.depth > kMaxDepth) fail("nesting deeper than " + std::to_string(kMaxDepth));
  }
  PyRef container(PyValue::Kind kind, std::vector<PyRef> items) {
    PyRef v = kind == PyValue::Kind::Tuple ? PyValue::tuple() : PyValue::list();
    v->kind = kind;
    for (const PyRef& i : items) add_child_depth(*v, i);
    v->items = std::move(items);
    return v;
  }
  void set_items(PyValue& d, std::vector<PyRef>& kv) {
    if (d.kind != PyValue::Kind::Dict) fail("SETITEM(S) on a " + std::string(d.kind_name()));
    if (kv.size() % 2) fail("SETITEMS with an odd number of items");
    for (size_t i = 0; i < kv.size(); i += 2) {
      add_child_depth(d, kv[i + 1]);
      const PyRef& k = kv[i];
      auto same = [&](const std::pair<PyRef, PyRef>& e) {
        return e.first->kind == k->kind && e.first->text == k->text && e.first->integer == k->integer &&
               (k->kind == PyValue::Kind::Str || k->kind == PyValue::Kind::Int || k->kind == PyValue::Kind::Bytes);
      };
      auto it = std::find_if(d.dict.begin(), d.dict.end(), same);
      if (it != d.dict.end()) it->second = kv[i + 1];
      else d.dict.emplace_back(k, kv[i + 1]);
    }
  }
  void memo_put(uint64_t i) {
    if (memo_.size() > static_cast<size_t>(end_ - begin_)) fail("memo larger than the input");
    memo_[i] = top();
  }
  PyRef memo_get(uint64_t i) {
    auto it = memo_.find(i);
    if (it == memo_.end()) fail("memo entry " + std::to_string(i) + " was never stored");
    return it->second;
  }
  PyRef global(const std::string& module, const std::string& name) {
    if (!pickle_global_allowed(module, name))
      STRATA_IO_THROW(src_, "refusing to load the Python type ", module, ".", name,
                      " (not among the types Megatron's checkpoints hold)");
    return PyValue::of_global(module, name);
  }
  int64_t read_long(uint64_t n);
  PyRef reduce(const PyRef& callable, const PyRef& args);
  PyRef rebuild_tensor(const std::vector<PyRef>& a);
  void build(const PyRef& state);
  bool step(uint8_t op);

  const uint8_t* p_;
  const uint8_t* end_;
  const uint8_t* begin_ = p_;
  std::string src_;
  std::vector<PyRef> stack_;
  std::vector<size_t> marks_;
  std::unordered_map<uint64_t, PyRef> memo_;
  std::vector<std::weak_ptr<PyValue>> made_;  // every value pushed (at most one per opcode)
  std::unordered_set<const PyValue*> result_;  // what the returned value reaches (empty until STOP)
};

// Megatron's and PyTorch's pickles hold trees (shared leaves at most); a value that contains itself
// is refused (it would also never be freed).
std::unordered_set<const PyValue*> Unpickler::check_acyclic(const PyRef& root) {
  auto children = [](const PyValue* v) {
    std::vector<const PyValue*> c;
    for (const PyRef& i : v->items) c.push_back(i.get());
    for (const auto& [k, x] : v->dict) c.push_back(k.get()), c.push_back(x.get());
    c.push_back(v->state.get());
    return c;
  };
  struct Frame {
    const PyValue* v;
    std::vector<const PyValue*> children;
    size_t next = 0;
  };
  std::unordered_map<const PyValue*, int> state;  // 1: on the current path, 2: done
  std::vector<Frame> path;
  path.push_back({root.get(), children(root.get())});
  state[root.get()] = 1;
  while (!path.empty()) {
    Frame& f = path.back();
    if (f.next >= f.children.size()) {
      state[f.v] = 2;
      path.pop_back();
      continue;
    }
    const PyValue* child = f.children[f.next++];
    if (!child) continue;
    int& s = state[child];
    if (s == 1) fail("a value that contains itself");
    if (s == 0) {
      s = 1;
      path.push_back({child, children(child)});
    }
  }
  std::unordered_set<const PyValue*> reached;
  for (const auto& [v, s] : state) reached.insert(v);
  return reached;
}

// LONG1 / LONG4: little-endian two's complement of n bytes; only values that fit int64.
int64_t Unpickler::read_long(uint64_t n) {
  const std::string b = read_bytes(n);
  if (n == 0) return 0;
  if (n > 8) {
    for (size_t i = 8; i < n; ++i) {  // sign extension only
      const uint8_t want = (static_cast<uint8_t>(b[7]) & 0x80) ? 0xFF : 0x00;
      if (static_cast<uint8_t>(b[i]) != want) fail("an integer wider than 64 bits");
    }
    n = 8;
  }
  uint64_t u = 0;
  for (uint64_t i = 0; i < n; ++i) u |= static_cast<uint64_t>(static_cast<uint8_t>(b[i])) << (8 * i);
  if (n < 8 && (static_cast<uint8_t>(b[n - 1]) & 0x80)) u |= ~uint64_t{0} << (8 * n);
  return static_cast<int64_t>(u);
}

// torch._utils._rebuild_tensor_v2(storage, storage_offset, size, stride, requires_grad, hooks[, metadata])
PyRef Unpickler::rebuild_tensor(const std::vector<PyRef>& a) {
  if (a.size() < 4) fail("_rebuild_tensor_v2 with " + std::to_string(a.size()) + " arguments");
  const PyValue& st = *a[0];
  if (!st.is_instance_of("__persistent__", "id") || st.items.size() != 1 || st.items[0]->kind != PyValue::Kind::Tuple)
    fail("_rebuild_tensor_v2 of something other than a storage");
  const auto& pid = st.items[0]->items;  // ('storage', type, key, location, numel)
  if (pid.size() != 5 || !pid[0]->is_str() || pid[0]->text != "storage" || pid[1]->kind != PyValue::Kind::Global ||
      !pid[2]->is_str() || !pid[4]->is_int())
    fail("a storage id that is not ('storage', type, key, location, numel)");
  PyTensorRef t;
  if (!storage_dtype(pid[1]->global.name, t.dtype)) fail("storage type " + pid[1]->global.full() + " is not supported");
  t.storage_key = pid[2]->text;
  t.storage_numel = pid[4]->integer;
  if (!a[1]->is_int() || !a[2]->is_sequence() || !a[3]->is_sequence()) fail("_rebuild_tensor_v2 arguments");
  t.offset = a[1]->integer;
  for (const PyRef& d : a[2]->items) {
    if (!d->is_int() || d->integer < 0) fail("a tensor size that is not a non-negative int");
    t.size.push_back(d->integer);
  }
  for (const PyRef& d : a[3]->items) {
    if (!d->is_int() || d->integer < 0) fail("a tensor stride that is not a non-negative int");
    t.stride.push_back(d->integer);
  }
  if (t.size.size() != t.stride.size()) fail("a tensor with " + std::to_string(t.size.size()) + " sizes and " +
                                             std::to_string(t.stride.size()) + " strides");
  if (t.offset < 0 || t.storage_numel < 0) fail("a negative storage offset or size");
  return PyValue::of_tensor(std::move(t));
}

// REDUCE: the known callables evaluated, the whitelisted classes as instances.
PyRef Unpickler::reduce(const PyRef& callable, const PyRef& args) {
  if (callable->kind != PyValue::Kind::Global) fail("REDUCE of a " + std::string(callable->kind_name()));
  if (args->kind != PyValue::Kind::Tuple) fail("REDUCE arguments that are not a tuple");
  const PyGlobal& g = callable->global;
  const auto& a = args->items;
  if (g.is("collections", "OrderedDict") && a.empty()) return PyValue::empty_dict();
  if (g.is("torch._utils", "_rebuild_tensor_v2")) return rebuild_tensor(a);
  if (g.is("torch._utils", "_rebuild_parameter") && !a.empty() && a[0]->kind == PyValue::Kind::Tensor) return a[0];
  if (g.is("torch._tensor", "_rebuild_from_type_v2")) {  // (func, type, args, state)
    if (a.size() != 4 || a[2]->kind != PyValue::Kind::Tuple) fail("_rebuild_from_type_v2 arguments");
    return reduce(a[0], a[2]);
  }
  if (g.is("torch", "Size")) {
    if (a.size() != 1 || !a[0]->is_sequence()) fail("torch.Size of something other than a tuple");
    return container(PyValue::Kind::Tuple, a[0]->items);
  }
  if (g.is("_codecs", "encode")) {  // protocol-2 bytes: _codecs.encode(str, 'latin1')
    if (a.size() != 2 || !a[0]->is_str()) fail("_codecs.encode arguments");
    std::string out;  // UTF-8 code points below 256 → one byte each
    const std::string& s = a[0]->text;
    for (size_t i = 0; i < s.size(); ++i) {
      const auto c = static_cast<uint8_t>(s[i]);
      if (c < 0x80) out.push_back(static_cast<char>(c));
      else if ((c & 0xE0) == 0xC0 && i + 1 < s.size() && c <= 0xC3)
        out.push_back(static_cast<char>(((c & 0x1F) << 6) | (static_cast<uint8_t>(s[++i]) & 0x3F)));
      else fail("_codecs.encode of a character outside latin-1");
    }
    return PyValue::of_bytes(std::move(out));
  }
  if (g.module.rfind("megatron.core.", 0) == 0 &&
      (a.size() != 1 || !(a[0]->is_int() || a[0]->is_str() || a[0]->kind == PyValue::Kind::Float)))
    STRATA_IO_THROW(src_, "refusing to load ", g.full(), " built from ", a.size(),
                    " arguments (only Megatron-Core's enum values are read)");
  if (g.module == "torch" || g.is("builtins", "getattr"))
    if (!g.is("torch", "device")) fail("calling " + g.full() + " is not supported");
  PyRef v = PyValue::instance(g, a);
  for (const PyRef& i : a) add_child_depth(*v, i);
  return v;
}

// BUILD: the state of an instance (a dict or a (dict, slots) tuple); a tensor's empty state.
void Unpickler::build(const PyRef& state) {
  PyRef& obj = top();
  if (obj->kind == PyValue::Kind::Tensor) return;  // _rebuild_from_type_v2's dict state: attributes, unused
  if (obj->kind == PyValue::Kind::Dict && state->kind == PyValue::Kind::Dict) {
    std::vector<PyRef> kv;
    for (auto& [k, v] : state->dict) kv.push_back(k), kv.push_back(v);
    set_items(*obj, kv);
    return;
  }
  if (obj->kind != PyValue::Kind::Instance) fail("BUILD on a " + std::string(obj->kind_name()));
  add_child_depth(*obj, state);
  obj->state = state;
}

// One opcode; false at STOP.
bool Unpickler::step(uint8_t op) {
  using K = PyValue::Kind;
  switch (op) {
    case 0x80: read_uint(1); return true;                        // PROTO
    case 0x95: read_uint(8); return true;                        // FRAME (the bytes follow inline)
    case '.': return false;                                      // STOP
    case '(': marks_.push_back(stack_.size()); return true;      // MARK
    case '0': pop(); return true;                                // POP
    case '1': pop_mark(); return true;                           // POP_MARK
    case '2': push(top()); return true;                          // DUP
    case 'N': push(PyValue::none()); return true;
    case 0x88: push(PyValue::of_bool(true)); return true;        // NEWTRUE
    case 0x89: push(PyValue::of_bool(false)); return true;       // NEWFALSE
    case 'J': push(PyValue::of_int(static_cast<int32_t>(read_uint(4)))); return true;  // BININT
    case 'K': push(PyValue::of_int(static_cast<int64_t>(read_uint(1)))); return true;  // BININT1
    case 'M': push(PyValue::of_int(static_cast<int64_t>(read_uint(2)))); return true;  // BININT2
    case 0x8a: push(PyValue::of_int(read_long(read_uint(1)))); return true;            // LONG1
    case 0x8b: push(PyValue::of_int(read_long(read_uint(4)))); return true;            // LONG4
    case 'I': case 'L': {                                                              // INT, LONG (text)
      std::string t = read_line();
      if (!t.empty() && t.back() == 'L') t.pop_back();
      if (t == "00" || t == "01") { push(PyValue::of_bool(t == "01")); return true; }
      try { size_t used = 0; const long long v = std::stoll(t, &used); if (used != t.size()) fail("INT text");
            push(PyValue::of_int(v)); } catch (const std::logic_error&) { fail("INT text '" + t + "'"); }
      return true;
    }
    case 'G': {                                                  // BINFLOAT: big-endian double
      need(8);
      uint64_t u = 0;
      for (int i = 0; i < 8; ++i) u = (u << 8) | p_[i];
      p_ += 8;
      double d;
      std::memcpy(&d, &u, 8);
      push(PyValue::of_float(d));
      return true;
    }
    case 'X': push(PyValue::of_str(read_bytes(read_uint(4)))); return true;    // BINUNICODE
    case 0x8c: push(PyValue::of_str(read_bytes(read_uint(1)))); return true;   // SHORT_BINUNICODE
    case 0x8d: push(PyValue::of_str(read_bytes(read_uint(8)))); return true;   // BINUNICODE8
    case 'T': push(PyValue::of_bytes(read_bytes(read_uint(4)))); return true;  // BINSTRING (py2 str)
    case 'U': push(PyValue::of_bytes(read_bytes(read_uint(1)))); return true;  // SHORT_BINSTRING
    case 'B': push(PyValue::of_bytes(read_bytes(read_uint(4)))); return true;  // BINBYTES
    case 'C': push(PyValue::of_bytes(read_bytes(read_uint(1)))); return true;  // SHORT_BINBYTES
    case 0x8e: case 0x96: push(PyValue::of_bytes(read_bytes(read_uint(8)))); return true;  // BINBYTES8, BYTEARRAY8
    case ']': push(PyValue::list()); return true;                // EMPTY_LIST
    case ')': push(PyValue::tuple()); return true;               // EMPTY_TUPLE
    case '}': push(PyValue::empty_dict()); return true;          // EMPTY_DICT
    case 0x8f: push(container(K::Set, {})); return true;         // EMPTY_SET
    case 'l': push(container(K::List, pop_mark())); return true;   // LIST
    case 't': push(container(K::Tuple, pop_mark())); return true;  // TUPLE
    case 0x91: push(container(K::Set, pop_mark())); return true;   // FROZENSET
    case 0x85: case 0x86: case 0x87: {                           // TUPLE1..3
      std::vector<PyRef> items(op - 0x84);
      for (size_t i = items.size(); i-- > 0;) items[i] = pop();
      push(container(K::Tuple, std::move(items)));
      return true;
    }
    case 'd': {                                                  // DICT
      std::vector<PyRef> kv = pop_mark();
      PyRef d = PyValue::empty_dict();
      set_items(*d, kv);
      push(d);
      return true;
    }
    case 'a': case 'e': case 0x90: {                             // APPEND, APPENDS, ADDITEMS
      std::vector<PyRef> items;
      if (op == 'a') items.push_back(pop());
      else items = pop_mark();
      PyValue& c = *top();
      if (c.kind != (op == 0x90 ? K::Set : K::List)) fail("APPEND(S)/ADDITEMS on a " + std::string(c.kind_name()));
      for (PyRef& i : items) { add_child_depth(c, i); c.items.push_back(std::move(i)); }
      return true;
    }
    case 's': case 'u': {                                        // SETITEM, SETITEMS
      std::vector<PyRef> kv;
      if (op == 's') { PyRef v = pop(); PyRef k = pop(); kv = {k, v}; }
      else kv = pop_mark();
      set_items(*top(), kv);
      return true;
    }
    case 'c': {                                                  // GLOBAL "module\nname\n"
      std::string module = read_line();
      push(global(module, read_line()));
      return true;
    }
    case 0x93: {                                                 // STACK_GLOBAL
      PyRef name = pop(), module = pop();
      if (!name->is_str() || !module->is_str()) fail("STACK_GLOBAL of non-strings");
      push(global(module->text, name->text));
      return true;
    }
    case 'R': { PyRef args = pop(); PyRef f = pop(); push(reduce(f, args)); return true; }  // REDUCE
    case 0x81: {                                                 // NEWOBJ cls args
      PyRef args = pop(), cls = pop();
      if (cls->kind != K::Global || args->kind != K::Tuple) fail("NEWOBJ arguments");
      if (cls->global.module == "torch" && !cls->global.is("torch", "Size")) fail("NEWOBJ of " + cls->global.full());
      push(cls->global.is("torch", "Size") ? reduce(cls, PyValue::tuple({args})) : reduce(cls, args));
      return true;
    }
    case 'b': build(pop()); return true;                         // BUILD
    case 'Q': {                                                  // BINPERSID
      PyRef pid = pop();
      PyRef v = PyValue::instance({"__persistent__", "id"}, {pid});
      add_child_depth(*v, pid);
      push(v);
      return true;
    }
    case 'p': memo_put(std::stoull("0" + read_line())); return true;  // PUT (text)
    case 'q': memo_put(read_uint(1)); return true;               // BINPUT
    case 'r': memo_put(read_uint(4)); return true;               // LONG_BINPUT
    case 0x94: memo_put(memo_.size()); return true;              // MEMOIZE
    case 'g': push(memo_get(std::stoull("0" + read_line()))); return true;  // GET (text)
    case 'h': push(memo_get(read_uint(1))); return true;         // BINGET
    case 'j': push(memo_get(read_uint(4))); return true;         // LONG_BINGET
    default: {
      char hex[8];
      std::snprintf(hex, sizeof hex, "0x%02x", op);
      fail(std::string("opcode ") + hex + " is not supported");
    }
  }
}

PyRef Unpickler::run() {
  while (true) {
    need(1);
    const uint8_t op = *p_++;
    if (!step(op)) break;
  }
  if (stack_.size() != 1 || !marks_.empty()) fail("STOP with " + std::to_string(stack_.size()) + " values on the stack");
  result_ = check_acyclic(stack_.back());
  return stack_.back();
}

}  // namespace

PyRef unpickle_restricted(const uint8_t* data, size_t size, const std::string& source) {
  try {
    return Unpickler(data, size, source).run();
  } catch (const std::invalid_argument&) {
    STRATA_IO_THROW(source, "malformed pickle: a text argument is not a number");
  } catch (const std::out_of_range&) {
    STRATA_IO_THROW(source, "malformed pickle: a number out of range");
  }
}

}  // namespace strata::formats
