// Element types of tensors and their C++ storage types.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "core/half.h"

namespace strata {

enum class DType : uint8_t { F64, F32, BF16, F16, I64, I32, U8, Bool };

constexpr DType kAllDTypes[] = {DType::F64, DType::F32, DType::BF16, DType::F16,
                                DType::I64, DType::I32, DType::U8,   DType::Bool};
constexpr DType kFloatDTypes[] = {DType::F64, DType::F32, DType::BF16, DType::F16};

size_t dtype_size(DType t);
const char* dtype_name(DType t);  // "f64", "f32", "bf16", "f16", "i64", "i32", "u8", "bool"
DType dtype_from_name(std::string_view name);  // throws strata::Error naming the value
bool is_floating(DType t);

// Map a C++ storage type to its DType.
template <typename T> constexpr DType dtype_of();
template <> constexpr DType dtype_of<double>() { return DType::F64; }
template <> constexpr DType dtype_of<float>() { return DType::F32; }
template <> constexpr DType dtype_of<bfloat16>() { return DType::BF16; }
template <> constexpr DType dtype_of<float16>() { return DType::F16; }
template <> constexpr DType dtype_of<int64_t>() { return DType::I64; }
template <> constexpr DType dtype_of<int32_t>() { return DType::I32; }
template <> constexpr DType dtype_of<uint8_t>() { return DType::U8; }
template <> constexpr DType dtype_of<bool>() { return DType::Bool; }

}  // namespace strata

// Dtype dispatch: call f(TypeTag<T>{}) with T the storage type of `dtype`.
//   dispatch_float(x.dtype(), "gelu", [&](auto tag) { STRATA_SCALAR(tag); ... scalar_t ... });
// (Functions rather than macros so that OpenMP pragmas inside the body work.)
namespace strata {
template <typename T> struct TypeTag { using type = T; };

[[noreturn]] void throw_bad_dtype(const char* op, DType t, const char* expected);

template <typename F>
decltype(auto) dispatch_float(DType dtype, const char* op, F&& f) {
  switch (dtype) {
    case DType::F64: return f(TypeTag<double>{});
    case DType::F32: return f(TypeTag<float>{});
    case DType::BF16: return f(TypeTag<bfloat16>{});
    case DType::F16: return f(TypeTag<float16>{});
    default: throw_bad_dtype(op, dtype, "f64, f32, bf16 or f16");
  }
}

template <typename F>
decltype(auto) dispatch_all(DType dtype, const char* op, F&& f) {
  switch (dtype) {
    case DType::F64: return f(TypeTag<double>{});
    case DType::F32: return f(TypeTag<float>{});
    case DType::BF16: return f(TypeTag<bfloat16>{});
    case DType::F16: return f(TypeTag<float16>{});
    case DType::I64: return f(TypeTag<int64_t>{});
    case DType::I32: return f(TypeTag<int32_t>{});
    case DType::U8: return f(TypeTag<uint8_t>{});
    case DType::Bool: return f(TypeTag<bool>{});
  }
  throw_bad_dtype(op, dtype, "a valid dtype");
}
}  // namespace strata

#define STRATA_SCALAR(tag) using scalar_t = typename decltype(tag)::type
