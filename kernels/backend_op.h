// An op's backend functions declared from its specification: STRATA_BACKEND_OP(name) declares
// cpu::name and cuda::name with exactly the type of the public kernels::name (its signature,
// without the default arguments), so an op's signature is written once, in its public header, and
// changing it touches that header, the CPU file and the CUDA file only.
#pragma once

// A function of the current namespace declared with exactly the type of kernels::name (another
// implementation of the op, or its argument checks).
#define STRATA_DECLARE_LIKE_OP(name) decltype(::strata::kernels::name) name;

#define STRATA_BACKEND_OP(name)                     \
  namespace cpu {                                   \
  decltype(::strata::kernels::name) name;           \
  }                                                 \
  namespace cuda {                                  \
  decltype(::strata::kernels::name) name;           \
  }
