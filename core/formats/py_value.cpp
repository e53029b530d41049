// PyValue constructors and accessors (core/formats/py_value.h).
#include "core/formats/py_value.h"

#include "core/error.h"

namespace strata::formats {

namespace {
PyRef make(PyValue::Kind k) {
  auto v = std::make_shared<PyValue>();
  v->kind = k;
  return v;
}
}  // namespace

PyRef PyValue::none() { return make(Kind::None); }
PyRef PyValue::of_bool(bool b) {
  PyRef v = make(Kind::Bool);
  v->boolean = b;
  v->integer = b ? 1 : 0;
  return v;
}
PyRef PyValue::of_int(int64_t i) {
  PyRef v = make(Kind::Int);
  v->integer = i;
  return v;
}
PyRef PyValue::of_float(double d) {
  PyRef v = make(Kind::Float);
  v->real = d;
  return v;
}
PyRef PyValue::of_str(std::string s) {
  PyRef v = make(Kind::Str);
  v->text = std::move(s);
  return v;
}
PyRef PyValue::of_bytes(std::string s) {
  PyRef v = make(Kind::Bytes);
  v->text = std::move(s);
  return v;
}
PyRef PyValue::list(std::vector<PyRef> items) {
  PyRef v = make(Kind::List);
  v->items = std::move(items);
  return v;
}
PyRef PyValue::tuple(std::vector<PyRef> items) {
  PyRef v = make(Kind::Tuple);
  v->items = std::move(items);
  return v;
}
PyRef PyValue::empty_dict() { return make(Kind::Dict); }
PyRef PyValue::of_global(std::string module, std::string name) {
  PyRef v = make(Kind::Global);
  v->global = {std::move(module), std::move(name)};
  return v;
}
PyRef PyValue::instance(PyGlobal cls, std::vector<PyRef> args, PyRef state) {
  PyRef v = make(Kind::Instance);
  v->global = std::move(cls);
  v->items = std::move(args);
  v->state = std::move(state);
  return v;
}
PyRef PyValue::of_tensor(PyTensorRef t) {
  PyRef v = make(Kind::Tensor);
  v->tensor = std::move(t);
  return v;
}

const char* PyValue::kind_name() const {
  switch (kind) {
    case Kind::None: return "None";
    case Kind::Bool: return "bool";
    case Kind::Int: return "int";
    case Kind::Float: return "float";
    case Kind::Str: return "str";
    case Kind::Bytes: return "bytes";
    case Kind::List: return "list";
    case Kind::Tuple: return "tuple";
    case Kind::Dict: return "dict";
    case Kind::Set: return "set";
    case Kind::Global: return "global";
    case Kind::Instance: return "instance";
    case Kind::Tensor: return "tensor";
  }
  return "?";
}

const PyValue* PyValue::find(const std::string& key) const {
  if (kind != Kind::Dict) return nullptr;
  for (const auto& [k, v] : dict)
    if (k && k->kind == Kind::Str && k->text == key) return v.get();
  return nullptr;
}

void PyValue::set(const std::string& key, PyRef value) {
  STRATA_INTERNAL_ASSERT(kind == Kind::Dict, "PyValue::set on a ", kind_name());
  for (auto& [k, v] : dict)
    if (k && k->kind == Kind::Str && k->text == key) {
      v = std::move(value);
      return;
    }
  dict.emplace_back(of_str(key), std::move(value));
}

const PyValue* PyValue::attr(const std::string& key) const {
  if (kind != Kind::Instance || !state) return nullptr;
  if (state->kind == Kind::Dict) return state->find(key);
  if (state->kind == Kind::Tuple) {  // (dict or None, slots dict)
    for (const PyRef& part : state->items)
      if (part && part->kind == Kind::Dict)
        if (const PyValue* v = part->find(key)) return v;
  }
  return nullptr;
}

double PyValue::as_double() const {
  STRATA_CHECK(is_number(), "expected a number, found a ", kind_name());
  return kind == Kind::Float ? real : static_cast<double>(integer);
}

}  // namespace strata::formats
