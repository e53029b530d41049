// DType names and sizes (core/dtype.h).
#include "core/dtype.h"

#include "core/error.h"

namespace strata {

size_t dtype_size(DType t) {
  switch (t) {
    case DType::F64: case DType::I64: return 8;
    case DType::F32: case DType::I32: return 4;
    case DType::BF16: case DType::F16: return 2;
    case DType::U8: case DType::Bool: return 1;
  }
  STRATA_INTERNAL_ASSERT(false, "bad dtype");
  return 0;
}

const char* dtype_name(DType t) {
  switch (t) {
    case DType::F64: return "f64";
    case DType::F32: return "f32";
    case DType::BF16: return "bf16";
    case DType::F16: return "f16";
    case DType::I64: return "i64";
    case DType::I32: return "i32";
    case DType::U8: return "u8";
    case DType::Bool: return "bool";
  }
  return "?";
}

DType dtype_from_name(std::string_view name) {
  for (DType t : kAllDTypes)
    if (name == dtype_name(t)) return t;
  if (name == "float32" || name == "fp32") return DType::F32;
  if (name == "float64" || name == "fp64") return DType::F64;
  if (name == "bfloat16") return DType::BF16;
  if (name == "float16" || name == "fp16") return DType::F16;
  STRATA_THROW("unknown dtype '", name, "' (expected one of f64, f32, bf16, f16, i64, i32, u8, bool)");
}

void throw_bad_dtype(const char* op, DType t, const char* expected) {
  STRATA_THROW(op, ": unsupported dtype ", dtype_name(t), " (expected ", expected, ")");
}

bool is_floating(DType t) {
  return t == DType::F64 || t == DType::F32 || t == DType::BF16 || t == DType::F16;
}

}  // namespace strata
